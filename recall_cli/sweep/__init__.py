"""Sweeps: a grid of recipe overrides x seeds, each cell one `recall finetune` run in its own process.

    OUT/sweep.json        the index: every cell, its settings, state and exit code (written by the parent only)
    OUT/<cell>/           the cell's run directory, e.g. OUT/k0.1_t0250_random_s3
    OUT/logs/<cell>.log   the cell's finetune output (appended to on resume)

Every cell's recipe is validated before anything is created, so a typo fails the sweep at once and
not after hours of compute. A cell runs as a child process (``python -m recall_cli finetune``) so a
crash, a divergence or an out-of-memory kill fails that cell only. Re-running the same command skips
finished cells and resumes interrupted ones from their last/ checkpoint.

    plan.py     the grid, cell names, every cell's recipe checked, the index, a cell's outcome
    local.py    the local backend: child processes on this machine, --jobs at a time
    on_ray.py   the Ray backend (--backend ray): each cell a Ray task, on this machine or a cluster
"""

from .local import child_env, run_sweep, visible_gpus
from .plan import (FAILED, FINISHED, INDEX_FILE, INTERRUPTED, LOG_DIR, PENDING, RUNNING, Axis, Cell, Sweep,
                   _check_existing, cause_in_log, cell_names, name_part, parse_grid, parse_seeds, plan_sweep,
                   preflight_first_cell, print_commands, read_index, split_values, write_index)

__all__ = ["FAILED", "FINISHED", "INDEX_FILE", "INTERRUPTED", "LOG_DIR", "PENDING", "RUNNING", "Axis", "Cell",
           "Sweep", "_check_existing", "cause_in_log", "cell_names", "child_env", "name_part", "parse_grid",
           "parse_seeds", "plan_sweep", "preflight_first_cell", "print_commands", "read_index", "run_sweep",
           "split_values", "visible_gpus", "write_index"]
