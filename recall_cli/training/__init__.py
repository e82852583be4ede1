"""What only `recall finetune` runs, in the order a run meets it.

    setup.py       prepare (load and check, nothing written) and set_up (the run's typed state)
    preflight.py   the checks a run makes before anything is written, and the memory estimate
    compiled.py    whether and how the step runs under torch.compile
    schedule.py    the learning rate's warm-up and decay
    loop.py        the step and the loop around it: log, evaluate, probe, save
    progress.py    the loop's records and the reporter interface the CLI draws
    checkpoint.py  theta*, best/ and last/ with everything exact resume needs
"""
