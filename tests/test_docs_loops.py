"""A page's shell loop over recall's commands names only folders the commands before it write (issue 53: the
merge loop on docs/lm.md named folders no command wrote). The loop is expanded by bash with `recall` a shell
function that prints its arguments; each sweep's cell folders come from `recall sweep --print-commands`, each
merge's outputs are OUT/<the name merge gives each input>, and every folder a later line reads must be one of
them. Nothing is trained or merged."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from recall_cli.cli import app

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)


def expanded(block: str) -> list[list[str]]:
    """The block's recall command lines as bash runs them (loops, $C, ${w#*,} expanded)."""
    script = 'recall() { printf "%s\\0" recall "$@"; printf "\\n"; }\n' + block
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return [line.split("\0")[:-1] for line in done.stdout.splitlines() if line]


def merge_name(arg: str) -> str:
    """The output folder merge gives an input (merge/io.py: a run directory's name, a package's module)."""
    return arg.removeprefix("pkg:") if arg.startswith("pkg:") else Path(arg).name


def test_the_lm_page_s_merge_loop_reads_only_folders_its_commands_write(monkeypatch):
    monkeypatch.chdir(REPO)
    page = (REPO / "docs" / "lm.md").read_text(encoding="utf-8")
    block = next(b for b in FENCE.findall(page) if "recall merge" in b and "recall sweep" in b)
    written: set[str] = set()
    checked = 0
    for argv in expanded(block):
        command = argv[1]
        if command == "sweep":
            result = CliRunner().invoke(app, [*argv[1:], "--print-commands"])
            assert result.exit_code == 0, result.output
            written |= set(re.findall(r"output_dir=(\S+)", result.output))
        elif command == "merge":
            out = argv[argv.index("--out") + 1]
            inputs = argv[2:argv.index("--method")]
            for arg in inputs:
                assert arg.startswith("pkg:") or arg in written, f"merge reads {arg}, which no command above writes"
            written |= {f"{out}/{merge_name(arg)}" for arg in inputs}
            checked += 1
        elif command == "evaluate":
            assert argv[2] in written, f"evaluate reads {argv[2]}, which no command above writes: {sorted(written)[:6]}"
            written.add(argv[argv.index("--record") + 1])
            checked += 1
    assert checked == 24, checked  # 3 seeds x (3 WiSE-FT + 1 RECALL) merges, each scored
