"""The frontier study's committed records (docs/study/runs/frontier*/) rebuild its tables byte for byte,
hold one device and precision per comparison, and are where the README's and results page's numbers
come from (issue 39)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "docs" / "study" / "tables" / "frontier.md"


def test_the_report_rebuilds_the_committed_table_byte_for_byte():
    before = TABLE.read_bytes()
    try:
        done = subprocess.run([sys.executable, "docs/study/frontier.py", "report"], cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert TABLE.read_bytes() == before
    finally:
        TABLE.write_bytes(before)  # a failed rebuild (records added and not yet reported) leaves the committed table


def test_each_comparison_ran_on_one_device_in_one_precision_on_every_pair():
    for root in ("frontier", "frontier_cpu"):
        kinds: dict[tuple[str, str], set] = {}
        for summary in (REPO / "docs" / "study" / "runs" / root).glob("*/*/*/s*/summary.json"):
            data = json.loads(summary.read_text())
            budget, task = summary.parts[-5], summary.parts[-4]
            kinds.setdefault((budget, task), set()).add((data["device_name"], data["precision"]))
            chosen = json.loads((summary.parent / "chosen" / "summary.json").read_text())
            assert chosen["probe"]["sts_pairs"] == 1500, summary
        assert all(len(k) == 1 for k in kinds.values()), kinds


def rows(task_heading: str) -> dict[str, tuple[str, str]]:
    """point -> (dev, kept) of one section of the table."""
    text = TABLE.read_text(encoding="utf-8").split(f"## {task_heading}", 1)[1].split("\n## ", 1)[0]
    return {m[0]: (m[2], m[3]) for m in re.findall(r"^\| (\S+) \| \d+ \| ([\d.–-]+) \| ([\d.–-]+) \| ([\d.–-]+) \|", text, re.M)}


def test_the_readme_quotes_the_tables_numbers():
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    mrpc, cola = rows("MRPC, 3,000 steps (frontier/)"), rows("CoLA, 3,000 steps (frontier/)")
    said = {("MRPC", "vanilla_lr1e-4"): "tuned vanilla (lr 1e-4) {} dev at {} % kept",
            ("MRPC", "lora_r8_lr5e-4"): "LoRA's pick (5e-4) {} at {} %",
            ("CoLA", "vanilla_lr5e-5"): "vanilla (5e-5) MCC {} at {} %",
            ("CoLA", "lora_r8_lr2e-4"): "LoRA (2e-4) {} at {} %"}
    for (task, point), template in said.items():
        dev, kept = (mrpc if task == "MRPC" else cola)[point]
        assert template.format(dev, kept) in readme, (task, point, dev, kept)
