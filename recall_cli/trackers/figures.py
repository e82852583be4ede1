"""This run's figures as PNG files for the trackers that take images: `recall forgetting`'s two
figures (report/plots.py, report/probe_plots.py) drawn for the one run, in a temporary folder."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DPI = 100  # the 13 x 4 inch figure at 1300 x 400 pixels: readable in a tracker, small to upload


@contextmanager
def run_figures(run_dir: Path) -> Iterator[dict[str, Path]]:
    """{"figures/forgetting": png, "figures/probes": png} for the run in ``run_dir``, each only where
    the run has the records it draws; the files are removed on exit."""
    with tempfile.TemporaryDirectory(prefix="recall-figures-") as tmp:
        yield _draw(run_dir, Path(tmp))


def _draw(run_dir: Path, folder: Path) -> dict[str, Path]:
    from ..report.curves import forgetting_groups
    from ..report.runs import read_run

    # A figure is an extra: the run has finished and its summary is written, so a figure that
    # cannot be drawn is left out rather than turned into a failed command.
    try:
        run = read_run(run_dir, run_dir.name)
        groups = forgetting_groups([run])
    except Exception:  # noqa: BLE001 - see above
        return {}
    drawn: dict[str, Path] = {}
    if run.train:
        drawn.update(_try("figures/forgetting", lambda: _forgetting(groups, folder / "forgetting.png")))
    if run.probes:
        drawn.update(_try("figures/probes", lambda: _probes(groups, folder / "probes.png")))
    return drawn


def _forgetting(groups, out: Path) -> Path:
    from ..report.plots import forgetting_figure

    return forgetting_figure(groups, out, dpi=DPI)


def _probes(groups, out: Path) -> Path:
    from ..report.probe_plots import probe_figure

    return probe_figure(groups, out, dpi=DPI)


def _try(name: str, draw) -> dict[str, Path]:
    try:
        return {name: draw()}
    except Exception:  # noqa: BLE001 - a figure is an extra (see _draw)
        return {}
