"""recall as a package on PyPI: its distribution name is its own, the wheel and sdist build, and the
wheel installs into a fresh virtual environment where the `recall` command runs."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from recall_cli.names import DISTRIBUTION, pip_extra

REPO = Path(__file__).resolve().parents[1]


def test_the_distribution_name_is_recalls_own_everywhere():
    """"recall-cli" on PyPI is another project: nothing may send a user there."""
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert f'name = "{DISTRIBUTION}"' in pyproject and DISTRIBUTION == "recall-finetune"
    assert pip_extra("mlflow") == "pip install 'recall-finetune[mlflow]'"
    for path in [REPO / "README.md", REPO / "pyproject.toml", *sorted((REPO / "recall_cli").rglob("*.py"))]:
        text = path.read_text(encoding="utf-8")
        assert "recall-cli[" not in text and "pip install recall-cli" not in text, path


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_wheel_and_sdist_build_and_the_wheel_installs_into_a_fresh_venv(tmp_path):
    pytest.importorskip("build", reason="the dev extra installs build")
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--sdist", "--outdir", str(dist),
                            str(REPO)], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    [wheel] = dist.glob("recall_finetune-*.whl")
    [sdist] = dist.glob("recall_finetune-*.tar.gz")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert "recall_cli/cli/__init__.py" in names and "recall_cli/training/loop.py" in names
    assert "recall_cli/methods/lora/__init__.py" in names and "recall_cli/methods/registry.py" in names
    assert not any(n.startswith("tests/") for n in names)
    with tarfile.open(sdist) as t:
        assert any(n.endswith("recall_cli/methods/keep/term.py") for n in t.getnames())

    # A fresh venv with only the wheel installed (no index: --no-deps); its dependencies are reached
    # through a .pth file naming this environment's site-packages, which is added after the venv's own,
    # so recall_cli is imported from the wheel, not from this checkout.
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    installed = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
                               capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr[-2000:]
    # cwd: not the checkout (python -c puts the working directory first on sys.path).
    help_ = subprocess.run([str(venv / "bin" / "recall"), "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert help_.returncode == 0, help_.stderr[-2000:]
    assert "finetune" in help_.stdout and "merge" in help_.stdout
    # recall-ft: the same app, for a machine where recall-cli's `recall` shadows ours.
    help_ft = subprocess.run([str(venv / "bin" / "recall-ft"), "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert help_ft.returncode == 0 and "Usage: recall-ft [OPTIONS] COMMAND" in help_ft.stdout, help_ft.stdout[:300]
    assert [line.split() for line in help_ft.stdout.splitlines()[3:]] == [line.split() for line in help_.stdout.splitlines()[3:]]
    where = subprocess.run([str(python), "-c", "import importlib.metadata as m, recall_cli; "
                            f"print(m.version('{DISTRIBUTION}'), recall_cli.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path).stdout.split()
    assert where[0] == __import__("recall_cli").__version__
    assert where[1].startswith(site), where  # the wheel's copy, not this checkout
