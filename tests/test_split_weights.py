"""benchmarks/split_weights.py: the packaged weights carried to a GPU machine as two halves of 16 bits,
joined there bit for bit; a second join on the same warm machine (a third call) must leave them as they are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from split_weights import LOW, WEIGHTS, digest, join, split  # noqa: E402


def _weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"a.weight": torch.randn(7, 5, generator=g) * 1e-3, "b.bias": torch.tensor([-0.0, 1e-38, -3.4e38, 1.5]),
            "position_ids": torch.arange(6)}


def test_split_then_join_gives_every_bit_back():
    source = _weights()
    top, low = split(source)
    assert top["a.weight"].dtype == torch.bfloat16 and "position_ids" not in low  # integers travel whole
    whole = join(top, low)
    assert all(torch.equal(whole[k].view(torch.uint8), v.view(torch.uint8)) for k, v in source.items())


def _kit(tmp_path: Path, top: dict, low: dict, sha256: str) -> tuple[Path, Path]:
    """What the two calls carry: the site with the top halves, and the low halves with the sha to check."""
    site, lows = tmp_path / "site", tmp_path / "low"
    (site / WEIGHTS).parent.mkdir(parents=True)
    lows.mkdir()
    save_file(top, str(site / WEIGHTS))
    save_file(low, str(lows / LOW), metadata={"format": "pt", "sha256": sha256})
    return site, lows


def _join(site: Path, low: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "split_weights.py"), "join", str(site), str(low)],
                          capture_output=True, text=True)


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_join_twice_on_a_warm_machine_keeps_the_joined_weights(tmp_path):
    source = _weights()
    site, lows = _kit(tmp_path, *split(source), digest(source))
    first = _join(site, lows)
    assert first.returncode == 0, first.stderr
    assert digest(load_file(str(site / WEIGHTS))) == digest(source)
    again = _join(site, lows)  # it used to fail here, joining fp32 weights with the low halves again
    assert again.returncode == 0, again.stderr
    assert "already" in again.stdout
    assert digest(load_file(str(site / WEIGHTS))) == digest(source)


@pytest.mark.slow
def test_join_refuses_halves_of_other_weights(tmp_path):
    top, low = split(_weights())
    other = {k: v + 1 if v.is_floating_point() else v for k, v in _weights().items()}
    site, lows = _kit(tmp_path, top, low, digest(other))
    done = _join(site, lows)
    assert done.returncode == 1 and "do not match" in done.stderr
    assert torch.equal(load_file(str(site / WEIGHTS))["a.weight"], top["a.weight"])  # nothing written
