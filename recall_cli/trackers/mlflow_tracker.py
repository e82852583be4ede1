"""MLflow: one run per recall run, in the store MLFLOW_TRACKING_URI names, else MLflow's own default
(in MLflow 3, sqlite:///mlflow.db in the working directory, artifacts in ./mlruns/; `mlflow ui` run
there shows them). The experiment is MLFLOW_EXPERIMENT_NAME, else "recall".

Written through MlflowClient, not the fluent mlflow.start_run: no process-wide active run, so a
library caller's own MLflow run is left alone. A resumed run reopens the run whose id trackers.json
keeps. MLflow cannot take a logged point back, so the steps a crashed run logged after its last
checkpoint stay, and the resumed run skips them (exact resume makes them the same numbers; only the
timings differ); params are logged once, as MLflow refuses a second, different value.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ..names import pip_extra
from ..plugins.trackers import TrackerEntry, register_tracker
from . import RunInfo, numbers, start_failed

EXPERIMENT = "recall"
BATCH = 100  # MLflow's log_batch takes at most 100 params (and 1000 metrics) a call


def open_tracker(info: RunInfo) -> MlflowTracker:
    from mlflow.exceptions import MlflowException

    try:
        return MlflowTracker(info)
    except ImportError as exc:  # mlflow-skinny alone: MLflow 3's local sqlite store needs sqlalchemy and alembic
        raise start_failed("mlflow", exc, pip_extra("mlflow")) from exc
    except MlflowException as exc:
        raise start_failed("mlflow", exc, "check MLFLOW_TRACKING_URI (unset: MLflow's local store in the "
                                          "working directory)") from exc


def param_text(value: Any) -> str:
    """An MLflow param is text: a string as it is, anything else as JSON (1e-05, true, null, [0.9, 0.999])."""
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

    return (value if isinstance(value, str) else json.dumps(value))[:MAX_PARAM_VAL_LENGTH]


class MlflowTracker:
    def __init__(self, info: RunInfo):
        from mlflow.tracking import MlflowClient

        # MLflow's default local stores, where this run would be the one that makes them (see discard).
        self.made = [p for p in (Path("mlflow.db"), Path("mlruns")) if not p.exists()]
        self.client = MlflowClient()  # MLFLOW_TRACKING_URI, else MLflow's default store
        run = self._reopen(info.saved.get("run_id")) if info.resumed else None
        # The last step each metric reached before a resume: those steps are not logged again.
        self.logged: dict[str, int] = {}
        if run is None:
            tags = {"recall.kind": info.kind, "recall.folder": str(Path(info.folder).resolve())}
            if info.group:
                tags["recall.sweep"] = info.group  # a sweep's cells: filter with tags.`recall.sweep` = '...'
            run = self.client.create_run(self._experiment_id(), run_name=info.name, tags=tags)
            self.run_id = run.info.run_id
            self._log_params(info.params)
        else:
            self.run_id = run.info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            self.logged = {key: max(m.step for m in self.client.get_metric_history(self.run_id, key))
                           for key in run.data.metrics}

    def _reopen(self, run_id: str | None):
        from mlflow.exceptions import MlflowException

        if not run_id:
            return None
        try:
            return self.client.get_run(run_id)
        except MlflowException:  # another store now (MLFLOW_TRACKING_URI changed), or deleted: a new run
            return None

    def _experiment_id(self) -> str:
        from mlflow.exceptions import MlflowException

        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name)
        except MlflowException:  # a sweep's other cell created it meanwhile
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def _log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(key, param_text(value)) for key, value in params.items()]
        for start in range(0, len(items), BATCH):
            self.client.log_batch(self.run_id, params=items[start:start + BATCH])

    def state(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "tracking_uri": self.client.tracking_uri}

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        points = [Metric(key, value, now, step) for key, value in metrics.items() if step > self.logged.get(key, -1)]
        if points:
            self.client.log_batch(self.run_id, metrics=points)

    def log_summary(self, values: dict[str, Any], step: int) -> None:
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        # Numbers as metrics at the last step; text (task, device, versions) as tags.
        metrics = [Metric(key, value, now, step) for key, value in numbers(values).items()]
        tags = [RunTag(key, value[:5000]) for key, value in values.items() if isinstance(value, str)]
        for start in range(0, max(len(metrics), len(tags)), BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[start:start + BATCH], tags=tags[start:start + BATCH])

    def log_image(self, name: str, png: Path, step: int) -> None:
        folder = name.rpartition("/")[0]  # figures/forgetting -> artifacts/figures/forgetting.png
        self.client.log_artifact(self.run_id, str(png), artifact_path=folder or None)

    def discard(self) -> None:
        """Another tracker could not start: delete this run, and the local store if it made it."""
        import shutil

        self.client.delete_run(self.run_id)
        if "MLFLOW_TRACKING_URI" not in os.environ:
            for path in self.made:
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                elif path.exists():
                    path.unlink()

    def close(self, finished: bool) -> None:
        # KILLED: stopped before its end (pre-empted, diverged, Ctrl-C); --resume sets it RUNNING again.
        self.client.set_terminated(self.run_id, status="FINISHED" if finished else "KILLED")


register_tracker(TrackerEntry("mlflow", open_tracker, requires="mlflow", extra="mlflow"))
