"""Scoring checkpoints: the commands that score weights, and the scores the training loop takes.

    evaluate.py   a model on a task's dev split(s): the loop's evaluations (score) and `recall evaluate`
    scored.py     which checkpoint a command scores, on which task (torch-free: checked before torch loads)
    predict.py    `recall predict`: predictions for GLUE's test split, dev, or a file of the user's
    records.py    `recall evaluate --record`: a checkpoint scored and probed, written as a run record
                  that compare, tradeoff and forgetting read beside the training runs

Callers import the module that owns a name (``from recall_cli.scoring.evaluate import score``): the
package re-exports nothing, so that reading records.RECORD_PATH_KEYS (the reports) loads no torch.
"""
