"""The run directory, recall's public on-disk format: its files, how a path resolves to weights, the
summary, the metrics log, and the one way anything in it is written (stage, then rename into place).

    RUN/config.yaml         the resolved recipe (a scored record adds a `record` section)
    RUN/metrics.jsonl       one JSON record per line: split "train", "eval" or "probe", each with its step
    RUN/summary.json        written once, at the end (Summary below; older layouts read as well)
    RUN/anchor.safetensors  theta*, by parameter name (training runs only)
    RUN/last/, RUN/best/    save_pretrained folders; last/ adds the training state for --resume
    RUN/checkpoints/step-N  copies of last/ kept by train.keep_last

Four kinds of folder hold weights, or name them, and every command resolves a path through
:func:`locate`: a training run (its best/, else last/), a scored record (`recall evaluate --record`:
no weights, it names the checkpoint it scored), a merge output (`recall merge`: DIR/<name>/ beside
DIR/merge.json) and a bare checkpoint (any save_pretrained folder, inside a run or not).

Everything here is torch-free; training/checkpoint.py writes the tensors into the folders this module stages.

The package's rooms, one concern each (everything is importable from ``recall_cli.rundir``):

    layout.py     the file names and how a path resolves to weights (locate)
    writing.py    strict JSON; the one way anything is written (staged, then renamed into place)
    metrics.py    metrics.jsonl, read back checked
    summary.py    summary.json, every layout since 0.1
    continual.py  continual.json, a sequence's record (recall continual)
    lifecycle.py  a new run directory, its writer's lock, what --resume may continue, train.save=final

"""

from .layout import (
    ANCHOR_FILE,
    BEST_DIR,
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    CONTINUAL_FILE,
    LAST_DIR,
    LP_DIR,
    Located,
    MERGE_RECORD,
    METRICS_FILE,
    MODEL_CONFIG_FILE,
    OPTIMIZER_FILE,
    RECORD_SECTION,
    RNG_FILE,
    SOURCE_RECIPE_FILE,
    START_FILE,
    SUMMARY_FILE,
    TRAINER_STATE_FILE,
    find_checkpoint,
    is_run_dir,
    locate,
    no_checkpoint_message,
    read_config,
    scored_record,
)
from .writing import (
    check_writable,
    dumps_strict,
    staged_folder,
    strict_json,
    swap_into_place,
    write_json_atomic,
    write_text_atomic,
)
from .metrics import (
    MetricsWriter,
    read_metrics,
    read_metrics_checked,
    record_problem,
    truncate_metrics,
    write_metrics,
)
from .continual import SEQUENCE_DEFAULTS, read_continual
from .summary import (
    Summary,
    read_summary,
    read_summary_checked,
    write_summary,
)
from .lifecycle import (
    LOCK_FILE,
    NewRunDir,
    RunLock,
    output_lock,
    output_lock_path,
    check_new_run_dir,
    keep_final,
    remove_stale_staging,
    saved_before,
)

__all__ = [
    "ANCHOR_FILE",
    "BEST_DIR",
    "CHECKPOINTS_DIR",
    "CONFIG_FILE",
    "CONTINUAL_FILE",
    "LAST_DIR",
    "LOCK_FILE",
    "LP_DIR",
    "Located",
    "MERGE_RECORD",
    "METRICS_FILE",
    "MODEL_CONFIG_FILE",
    "MetricsWriter",
    "NewRunDir",
    "OPTIMIZER_FILE",
    "RECORD_SECTION",
    "RNG_FILE",
    "RunLock", "output_lock", "output_lock_path",
    "SEQUENCE_DEFAULTS",
    "SOURCE_RECIPE_FILE",
    "START_FILE",
    "SUMMARY_FILE",
    "Summary",
    "TRAINER_STATE_FILE",
    "check_new_run_dir",
    "check_writable",
    "dumps_strict",
    "find_checkpoint",
    "is_run_dir",
    "keep_final",
    "locate",
    "no_checkpoint_message",
    "read_config",
    "read_metrics",
    "read_metrics_checked",
    "read_continual",
    "read_summary",
    "read_summary_checked",
    "record_problem",
    "remove_stale_staging",
    "saved_before",
    "scored_record",
    "staged_folder",
    "strict_json",
    "swap_into_place",
    "truncate_metrics",
    "write_json_atomic",
    "write_metrics",
    "write_summary",
    "write_text_atomic",
]
