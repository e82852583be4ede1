"""A causal-LM sequence (two tiny-Llama tasks): the stages share the LM head, so stage i's model scores every
task, seen or not: the matrix has row 0 (the starting model) and the cells above the diagonal, hence FWT."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import GLUE
from lm_tiny import lm_recipe, tiny_llama_dir
from recall_cli.sequence.matrix import forward_transfer
from recall_cli.sequence.runner import run_continual


@pytest.mark.slow
def test_a_causal_lm_sequence_has_row_zero_and_forward_transfer(tmp_path):
    model = tiny_llama_dir(tmp_path / "model")
    rows = [{"prompt": f"the cat sat on {w}", "completion": f" {w}"} for w in ("a", "the", "mat", "dog") * 6]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "dev.csv").write_text("prompt,completion\nthe cat sat on a, a\nthe cat sat on the, the\n", encoding="utf-8")
    first = lm_recipe(model, tmp_path / "unused", train={"max_steps": 4, "eval_every": 0},
                      task={"name": "sst2_lm", "data_dir": str(GLUE / "SST-2"), "max_seq_length": 48,
                            "max_train_examples": 32, "max_eval_examples": 8})
    second = lm_recipe(model, tmp_path / "unused", train={"max_steps": 4, "eval_every": 0},
                       task={"name": "custom_lm", "data_dir": None, "train_file": str(tmp_path / "train.jsonl"),
                             "dev_file": str(tmp_path / "dev.csv"), "max_seq_length": 32})
    files = []
    for name, recipe in (("a", first), ("b", second)):
        files.append(tmp_path / f"{name}.yaml")
        files[-1].write_text(yaml.safe_dump(recipe), encoding="utf-8")
    record = run_continual(files, [], tmp_path / "seq")
    m = record["matrix"]
    assert record["tasks"] == ["sst2_lm", "custom_lm"]
    assert m[0] is not None and all(v is not None for row in m for v in row)  # every cell, row 0 too
    for i, run in enumerate(["01-sst2_lm", "02-custom_lm"], 1):
        summary = json.loads((tmp_path / "seq/stages" / run / "summary.json").read_text())
        assert m[i][i - 1] == pytest.approx(summary["final"]["main"], abs=1e-9)
    assert record["fwt"] == pytest.approx(m[1][1] - m[0][1]) and record["fwt"] == forward_transfer(m)
    # the diagonal is each stage's own final evaluation, read back (not scored twice): exactly what the matrix's
    # scorer gives the same last/ weights on the same rows
    import torch

    from recall_cli.model import load_checkpoint_model, load_tokenizer
    from recall_cli.sequence.runner import plan_for, stage_recipe
    from recall_cli.sequence.scoring import Scorer
    from recall_cli.tasks import task_spec, task_type_for

    plan = plan_for(files, [], tmp_path / "seq", seed=None, resume=False)
    scorer, chosen = Scorer(plan, torch.device("cpu")), []
    for stage in plan.stages:
        trained, folder = stage_recipe(plan, stage, chosen), stage.run_dir / "last"
        chosen.append(folder)
        fresh = scorer.score(load_checkpoint_model(folder, task_type_for(task_spec(stage.recipe.task))), stage,
                             load_tokenizer(str(folder)))
        assert scorer.finetune_score(stage, trained, folder) == fresh == m[stage.index][stage.index - 1]
