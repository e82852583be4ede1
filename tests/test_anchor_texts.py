"""The embedding anchor on texts of its own, on several layers, and caching only what a run draws
(issue 38, item 1), on the tiny BERT and real MRPC rows.

keep.texts (task, the general pool, a file), keep.text_column, keep.batch_size and keep.layers: a recipe
that sets none of them writes the config.yaml it always did and runs the anchor it always ran; the
anchor on the pool is the distance of a second forward, as computed by hand; several layers average
their distances; theta*'s features are computed for the rows and texts the run draws, no others; a
run on the pool resumed after a stop ends as an uninterrupted one; the pool holds no text the probes
score, and a text set that does is refused; every bad value is one line, exit 2, nothing written.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.errors import PreflightError
from recall_cli.methods.keep.build import build_anchor
from recall_cli.methods.keep.term import EmbeddingAnchor, TextAnchor, features, pool
from recall_cli.methods.teacher import frozen_copy
from recall_cli.methods.anchor_texts import ORDER_SALT, probe_overlap, read_texts
from recall_cli.model import build_model, load_tokenizer
from recall_cli.recipe import recipe_from_dict
from recall_cli.rundir import read_metrics
from recall_cli.tasks.batches import BatchOrder
from recall_cli.testing import tiny_bert, wordpiece_tokenizer
from recall_cli.training import loop as train
from recall_cli.training.loss import loss_step
from recall_cli.training.setup import load_task_data

from conftest import GLUE, REPO, StopAfter, comparable, summary, tiny_recipe, train_records, write_recipe

runner = CliRunner()
CPU = torch.device("cpu")
NO_PROBE = {"enabled": False}
POOL = REPO / "data" / "pool" / "general.txt"
PROBE_TEXTS = REPO / "data" / "probe" / "texts.txt"
DEV = GLUE / "STS-B" / "dev.tsv"


def normal(text: str) -> str:
    return " ".join(text.split()).lower()


def anchor_inputs(tiny_model_dir: Path, tmp_path: Path, train: dict | None = None, **keep):
    recipe = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "unused", keep={"embeddings": 1.0, **keep},
                                          probe=NO_PROBE, train={**(train or {})}), "test")
    tokenizer = load_tokenizer(recipe.model.name_or_path)
    task = load_task_data(recipe, tokenizer)
    built = build_model(recipe.model, task.kind, recipe.train.seed)
    return recipe, built, task, tokenizer


def make_anchor(recipe, built, task, tokenizer, total_steps: int, fresh: bool = True):
    return build_anchor(recipe, built.model, built.theta_star, task.train, total_steps=total_steps, device=CPU,
                        autocast=nullcontext(), pad_id=tokenizer.pad_token_id, batch_size=16, fresh=fresh,
                        tokenizer=tokenizer)


def moved(model: torch.nn.Module, scale: float = 0.05) -> None:
    """Move every weight of ``model`` away from theta* (in place, seeded): the distances are then not ~0."""
    torch.manual_seed(11)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn_like(p))


class Spy:
    """A forward that records the keyword arguments it was called with."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def __call__(self, **kwargs):
        self.calls.append(sorted(kwargs))
        return self.model(**kwargs)


# ---- 1. the recipe: unset keys write the config.yaml they always did ------------------------------


def test_a_recipe_without_the_new_keys_writes_the_keep_section_it_always_did(tiny_model_dir, tmp_path):
    """Older run directories and recipes stay byte-compatible: config.yaml (to_dict(as_written=True))
    leaves the new keys out while they are at their defaults, and every key is still there to read."""
    import yaml

    from recall_cli.recipe import dump_recipe, load_recipe

    plain = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "o", keep={"embeddings": 1.0}), "t")
    assert plain.keep.texts == "task" and plain.keep.layers == "last" and plain.keep.batch_size == 0
    dump_recipe(plain, tmp_path / "config.yaml")
    written = (tmp_path / "config.yaml").read_text(encoding="utf-8")
    assert "keep:\n  embeddings: 1.0\n  pooling: mean\n  distance: cosine\n  schedule: constant\noutput_dir:" in written
    assert yaml.safe_load(written)["keep"] == plain.to_dict(as_written=True)["keep"] == {
        "embeddings": 1.0, "pooling": "mean", "distance": "cosine", "schedule": "constant"}
    assert load_recipe(tmp_path / "config.yaml") == plain
    # the full dict and the dotted keys read every key (what methods, sweeps and reports read)
    assert plain.to_dict()["keep"] == {"embeddings": 1.0, "pooling": "mean", "distance": "cosine",
                                       "schedule": "constant", "texts": "task", "text_column": None, "batch_size": 0,
                                       "layers": "last", "next_token": 0.0}
    assert (plain.get("keep.texts"), plain.get("keep.layers"), plain.get("keep.batch_size")) == ("task", "last", 0)
    # a config.yaml an older version wrote (committed with the study, keep.embeddings 1.0) reads and is
    # written again byte for byte
    old = REPO / "docs" / "study" / "runs" / "budget" / "mrpc" / "keep1" / "s2" / "config.yaml"
    again = recipe_from_dict(yaml.safe_load(old.read_text(encoding="utf-8")), "old")
    assert again.keep.embeddings == 1.0 and again.keep.texts == "task"
    dump_recipe(again, tmp_path / "again.yaml")
    assert (tmp_path / "again.yaml").read_bytes() == old.read_bytes()
    # set at their defaults, they are still not written: the run is the one it always was
    same = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "o", keep={
        "embeddings": 1.0, "texts": "task", "batch_size": 0, "layers": "last", "text_column": None}), "t")
    assert same == plain and same.to_dict(as_written=True) == plain.to_dict(as_written=True)
    # set, they are written, read back and round-trip
    set_ = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "o", keep={
        "embeddings": 1.0, "texts": "pool", "batch_size": 4, "layers": [1, 2]}), "t")
    assert set_.to_dict(as_written=True)["keep"] == {"embeddings": 1.0, "pooling": "mean", "distance": "cosine",
                                                     "schedule": "constant", "texts": "pool", "batch_size": 4,
                                                     "layers": [1, 2]}
    assert recipe_from_dict(set_.to_dict(as_written=True), "again") == set_
    dump_recipe(set_, tmp_path / "set.yaml")
    assert load_recipe(tmp_path / "set.yaml") == set_
    # a run read back without them ran at their defaults (what compare and tradeoff group by)
    from recall_cli.report.runs import recipe_defaults

    assert {k: recipe_defaults()[k] for k in ("keep.texts", "keep.batch_size", "keep.layers", "keep.text_column")} == {
        "keep.texts": "task", "keep.batch_size": 0, "keep.layers": "last", "keep.text_column": None}


def test_a_sweep_reads_a_config_yaml_without_the_new_keys_as_their_defaults(tiny_model_dir, tmp_path):
    """A sweep resumes a cell only where its directory holds the same settings: a config.yaml without
    keep.texts (or model.lora.init, ...) ran at the default, so a cell on the pool is another run."""
    from recall_cli.recipe import dump_recipe
    from recall_cli.sweep import Cell, _check_existing

    run = tmp_path / "cell"
    run.mkdir()
    plain = recipe_from_dict(tiny_recipe(tiny_model_dir, run, keep={"embeddings": 1.0}), "t")
    dump_recipe(plain, run / "config.yaml")
    (run / "metrics.jsonl").write_text("", encoding="utf-8")
    assert "\n  texts:" not in (run / "config.yaml").read_text(encoding="utf-8")
    cell = Cell("cell", {}, run)
    assert _check_existing(cell, plain.to_dict()) is None and cell.resume  # the same run: resumed
    for changed, shown in ((dict(texts="pool"), "keep.texts: 'task' there, 'pool' now"),
                           (dict(layers=[1, 2]), "keep.layers: 'last' there, [1, 2] now")):
        other = recipe_from_dict(tiny_recipe(tiny_model_dir, run, keep={"embeddings": 1.0, **changed}), "t")
        assert _check_existing(Cell("cell", {}, run), other.to_dict()) == (
            f"{run} holds a run with other settings ({shown}): choose another --out, or delete the directory to run "
            "the cell again")
    lora = recipe_from_dict(tiny_recipe(tiny_model_dir, run, keep={"embeddings": 1.0}, optimizer={"name": "adamw"},
                                        model={"lora": {"r": 0, "init": "corda"}}), "t")
    assert "model.lora.init: 'default' there, 'corda' now" in _check_existing(Cell("cell", {}, run), lora.to_dict())


# ---- 2. the term: a second forward on the anchor's texts, several layers ---------------------------


@pytest.mark.slow
def test_the_anchor_on_the_pool_is_the_distance_of_a_second_forward_computed_by_hand(tiny_model_dir, tmp_path):
    recipe, built, task, tokenizer = anchor_inputs(tiny_model_dir, tmp_path, texts="pool", batch_size=4,
                                                   distance="mse", embeddings=2.0)
    model, theta_star = built.model, built.theta_star
    anchor, plan, _ = make_anchor(recipe, built, task, tokenizer, total_steps=12)
    assert isinstance(anchor, TextAnchor) and not anchor.needs_hidden_states
    texts = POOL.read_text(encoding="utf-8").splitlines()
    assert read_texts(recipe.keep) == texts and len(texts) == 5442
    order = BatchOrder(len(texts), 4, recipe.train.seed + ORDER_SALT)  # 4 texts a micro-batch, its own seeded order
    assert plan.rows == sorted({i for p in range(12) for i in order.batch(p)}) and len(plan.rows) == 48
    assert anchor.cache.shape == (48, 32)  # theta*'s embeddings of the 48 texts 12 micro-batches draw, no others

    model.eval()  # no dropout: the student's forwards are the same function here and by hand
    moved(model)
    batch = task.kind.collate(task.train, list(range(8)), tokenizer.pad_token_id, None, 48)
    spy = Spy(model)
    anchor.at(5)
    total, parts = loss_step(spy, batch, [anchor], step=3)
    assert spy.calls == [sorted(batch)]  # the task's forward asks for no hidden states: it is the vanilla one

    drawn = [texts[i] for i in order.batch(5)]
    inputs = tokenizer(drawn, padding=True, truncation=True, max_length=48, return_tensors="pt")
    reference = frozen_copy(model, theta_star)
    with torch.no_grad():
        star = pool(reference(**inputs, output_hidden_states=True).hidden_states[-1], inputs["attention_mask"], "mean")
    student = pool(model(**inputs, output_hidden_states=True).hidden_states[-1], inputs["attention_mask"], "mean")
    by_hand = ((student - star) ** 2).mean()
    assert by_hand.item() > 1e-4
    assert parts["loss_keep"].item() == pytest.approx(by_hand.item(), rel=1e-5)
    assert torch.equal(parts["loss_task"], model(**batch).loss)
    assert torch.equal(total, parts["loss_task"] + 2.0 * parts["loss_keep"])
    # the term's gradient reaches the encoder through the second forward
    total.backward()
    task_only = copy.deepcopy(model)
    task_only.zero_grad()
    task_only(**batch).loss.backward()
    grad = dict(model.named_parameters())["bert.embeddings.word_embeddings.weight"].grad
    alone = dict(task_only.named_parameters())["bert.embeddings.word_embeddings.weight"].grad
    assert (grad - alone).abs().max().item() > 1e-6

    anchor.at(6)  # another position, other texts
    other = loss_step(model, batch, [anchor], step=3)[1]["loss_keep"]
    assert other.item() != parts["loss_keep"].item()
    with pytest.raises(ValueError, match="position"):
        TextAnchor(1.0, student=model, texts=anchor.texts, draw=anchor.draw, pad_id=0, cache=anchor.cache)(None, batch)


@pytest.mark.slow
def test_layers_average_the_distances_of_each_hidden_states_pooled_features():
    model = tiny_bert(head="classifier", seed=3).eval()
    tokenizer = wordpiece_tokenizer()
    batch = dict(tokenizer(["a short one", "a much longer sentence with more words in it", "x"], padding=True,
                           return_tensors="pt"))
    reference = copy.deepcopy(model)
    moved(reference)
    reference.requires_grad_(False)
    outputs = model(**batch, output_hidden_states=True)
    last = EmbeddingAnchor(1.0, theta_star=reference)(outputs, batch)
    # the tiny model has 2 layers: hidden state 2 is the last, and alone it is today's anchor bit for bit
    assert torch.equal(EmbeddingAnchor(1.0, theta_star=reference, layers=[2])(outputs, batch), last)
    with torch.no_grad():
        ref = reference(**batch, output_hidden_states=True).hidden_states
    mask = batch["attention_mask"]
    by_hand = sum(1 - torch.cosine_similarity(pool(outputs.hidden_states[i], mask, "mean"), pool(ref[i], mask, "mean"),
                                              dim=-1).mean() for i in (0, 2)) / 2
    both = EmbeddingAnchor(1.0, theta_star=reference, layers=[0, 2])(outputs, batch)
    assert both.item() == pytest.approx(by_hand.item(), rel=1e-5) and both.item() != pytest.approx(last.item())
    assert features(outputs.hidden_states, mask, "mean", (0, 2)).shape == (3, 2, 32)
    for bad in ([], [-1], [0.5]):
        with pytest.raises(ValueError, match="layers"):
            EmbeddingAnchor(1.0, theta_star=reference, layers=bad)


# ---- 3. theta*'s features of what the run draws, and nothing else --------------------------------------


@pytest.mark.slow
def test_the_cache_holds_only_the_training_rows_the_run_draws(tiny_model_dir, tmp_path):
    recipe, built, task, tokenizer = anchor_inputs(tiny_model_dir, tmp_path)
    anchor, plan, _ = make_anchor(recipe, built, task, tokenizer, total_steps=3)
    order = BatchOrder(96, 8, recipe.train.seed)  # the loop's order (training/setup.py)
    rows = sorted({i for p in range(3) for i in order.batch(p)})
    assert plan.rows == rows and len(rows) == 24 and plan.total == 96
    assert anchor.cache.shape == (24, 32)
    assert anchor.slot[rows].tolist() == list(range(24)) and int((anchor.slot >= 0).sum()) == 24
    assert plan.line.startswith("theta*'s embeddings of the 24 training examples the run draws (of 96) cached (0.0 MiB")
    # each cached row is theta*'s pooled embedding of its example (as the pre-pass of every row gives it)
    reference = frozen_copy(built.model, built.theta_star)
    picked = [rows[0], rows[7], rows[-1]]
    inputs = task.kind.collate(task.train, picked, tokenizer.pad_token_id, None, 48)
    inputs.pop("labels")
    with torch.no_grad():
        pooled = pool(reference(**inputs, output_hidden_states=True).hidden_states[-1], inputs["attention_mask"], "mean")
    assert torch.allclose(anchor.cache[anchor.slot[torch.tensor(picked)]], pooled, atol=1e-5)

    # grad_accum 2: a step is two micro-batches of the order
    recipe2, *_ = anchor_inputs(tiny_model_dir, tmp_path, train={"grad_accum": 2})
    assert make_anchor(recipe2, built, task, tokenizer, total_steps=3)[1].rows == sorted(
        {i for p in range(6) for i in order.batch(p)})
    # a run of a whole epoch draws every row: today's cache, row i for example i, bit for bit
    full, plan, _ = make_anchor(recipe, built, task, tokenizer, total_steps=12)
    assert full.slot is None and full.cache.shape == (96, 32) and plan.rows == list(range(96))
    # the same embeddings, up to the float rounding of other batches in the pass
    assert torch.allclose(full.cache[torch.tensor(rows)], anchor.cache, atol=1e-5)
    again, _, _ = make_anchor(recipe, built, task, tokenizer, total_steps=40)  # past one epoch: the same cache
    assert torch.equal(again.cache, full.cache)


@pytest.mark.slow
def test_a_resumed_run_rebuilds_the_same_cache_of_drawn_texts(tiny_model_dir, tmp_path):
    recipe, built, task, tokenizer = anchor_inputs(tiny_model_dir, tmp_path, texts="pool", batch_size=4, layers=[1, 2])
    fresh, plan, _ = make_anchor(recipe, built, task, tokenizer, total_steps=12)
    assert fresh.cache.shape == (48, 2, 32)
    student = copy.deepcopy(built.model)
    moved(student)  # as a resumed run has it: the student moved, theta* from anchor.safetensors
    resumed, _, _ = build_anchor(recipe, student, built.theta_star, task.train, total_steps=12, device=CPU,
                                 autocast=nullcontext(), pad_id=tokenizer.pad_token_id, batch_size=16, fresh=False,
                                 tokenizer=tokenizer)
    assert torch.equal(resumed.cache, fresh.cache)
    assert [resumed.draw(p) for p in range(12)] == [fresh.draw(p) for p in range(12)]


# ---- 4. the pool and the probes ---------------------------------------------------------------------


@pytest.mark.slow
def test_the_pool_is_what_its_script_writes_and_holds_no_text_the_probes_score(tmp_path):
    lines = POOL.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 5442 and all(line.strip() == line and line for line in lines)
    assert len({normal(line) for line in lines}) == len(lines)  # distinct
    sources = (REPO / "data" / "pool" / "SOURCES.md").read_text(encoding="utf-8")
    assert hashlib.sha256(POOL.read_bytes()).hexdigest() in sources
    import csv

    with open(DEV, encoding="utf-8", newline="") as f:
        dev = [t for row in list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:] for t in (row[7], row[8])]
    scored = {normal(t) for t in dev + PROBE_TEXTS.read_text(encoding="utf-8").splitlines()}
    assert not {normal(line) for line in lines} & scored
    assert probe_overlap(lines, recipe_from_dict(tiny_recipe(Path("m"), tmp_path), "t", check_files=False).probe) is None
    # the script rebuilds it byte for byte (run on a copy of data/, so the checkout is not written)
    data = tmp_path / "data"
    (data / "pool").mkdir(parents=True)
    shutil.copy(REPO / "data" / "pool" / "make_pool.py", data / "pool")
    for name in ("glue", "probe"):
        (data / name).symlink_to(REPO / "data" / name)
    subprocess.run([sys.executable, str(data / "pool" / "make_pool.py")], check=True, capture_output=True)
    assert (data / "pool" / "general.txt").read_bytes() == POOL.read_bytes()


def test_texts_are_read_from_a_column_file(tmp_path):
    from recall_cli.recipe import KeepConfig

    csv_file = tmp_path / "a.csv"
    csv_file.write_text('id,sentence\n1,"A man, a plan."\n2,  \n3,Dogs  run.\n', encoding="utf-8")
    assert read_texts(KeepConfig(texts=str(csv_file), text_column="sentence")) == ["A man, a plan.", "Dogs run."]
    jsonl = tmp_path / "b.jsonl"
    jsonl.write_text('{"id": 1, "text": "one"}\n\n{"id": 2, "text": 3}\n{"id": 3, "text": "two"}\n', encoding="utf-8")
    assert read_texts(KeepConfig(texts=str(jsonl))) == ["one", "two"]  # the "text" column; a number is no text
    tsv = tmp_path / "c.tsv"
    tsv.write_text('sentence\n"quoted" words\nplain\n', encoding="utf-8")
    assert read_texts(KeepConfig(texts=str(tsv))) == ['"quoted" words', "plain"]  # its only column, quotes kept
    with pytest.raises(PreflightError, match="keep.text_column: .* has columns id, sentence: name the one"):
        read_texts(KeepConfig(texts=str(csv_file)))


# ---- 5. bad values: one line, exit 2, nothing written --------------------------------------------------


@pytest.mark.parametrize("overrides, said", [
    (["keep.batch_size=-1"], "keep.batch_size: must be >= 0 (0 or null: train.batch_size), got -1"),
    (["keep.batch_size=.nan"], "keep.batch_size: expected an integer, got nan"),
    (["keep.batch_size=.inf"], "keep.batch_size: expected an integer, got inf"),
    (["keep.batch_size=4"], "keep.batch_size: only with keep.texts=pool or a file (on the task's rows the anchor reads "
                            "each training batch itself), got 4: remove it, or set keep.texts"),
    (["keep.layers=[]"], "keep.layers: last, or a list of hidden states (0: the embeddings' output, i: layer i's), got []"),
    (["keep.layers=[-1]"], "keep.layers: hidden states >= 0, each once (0: the embeddings' output, i: layer i's), got [-1]"),
    (["keep.layers=[1,1]"], "keep.layers: hidden states >= 0, each once"),
    (["keep.layers=first"], "keep.layers: expected last or a list of integers, got 'first'"),
    (["keep.layers=[1.5]"], "keep.layers: expected last or a list of integers, got [1.5]"),
    (["keep.texts=notes.doc"], "keep.texts: task, pool, or a file of sentences (.txt, one a line; .csv, .tsv or .jsonl "
                               "with keep.text_column), got 'notes.doc'"),
    (["keep.texts=''"], "keep.texts: task, pool, or a file of sentences"),
    (["keep.texts=pool", "keep.text_column=text"], "keep.text_column: only for a .csv, .tsv or .jsonl keep.texts file "
                                                   "(keep.texts is pool): remove it"),
])
def test_bad_anchor_keys_are_refused_in_one_line_before_anything_is_written(tiny_model_dir, tmp_path, overrides, said):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, out, probe=NO_PROBE))
    for extra in ([], ["--dry-run"]):
        result = runner.invoke(app, ["finetune", str(recipe), "keep.embeddings=1", *overrides, "--plain", *extra])
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert lines == [f"error: {recipe}: 1 problem in the command line's overrides:", lines[1]], lines  # the keys are overrides
        assert lines[1].startswith(f"  - {said}"), lines[1]
        assert not out.exists()


def bad_files(tmp: Path) -> dict[str, Path]:
    files = {"empty.txt": "", "blank.txt": "\n   \n\t\n", "cols.csv": "id,sentence\n1,a dog\n",
             "blank.tsv": "sentence\n \n\n", "bad.jsonl": '{"text": "fine"}\nnot json\n'}
    for name, text in files.items():
        (tmp / name).write_text(text, encoding="utf-8")
    (tmp / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    probe = PROBE_TEXTS.read_text(encoding="utf-8").splitlines()
    msr = next(line.split("\t")[7] for line in DEV.read_text(encoding="utf-8").splitlines()[1:]
               if line.split("\t")[2] == "MSRvid")  # a dev sentence that is not a probe text
    pool = POOL.read_text(encoding="utf-8").splitlines()
    (tmp / "overlap.txt").write_text("\n".join(pool[:7] + [probe[3].upper(), "  " + probe[9], msr]) + "\n",
                                     encoding="utf-8")
    return {name: tmp / name for name in [*files, "latin1.txt", "overlap.txt"]}


@pytest.mark.parametrize("overrides, said", [
    (["keep.texts=missing.txt"], "keep.texts: file not found: missing.txt (a .txt file, one sentence a line; a .csv, "
                                 ".tsv or .jsonl file with keep.text_column; or task, pool)"),
    (["keep.texts={empty.txt}"], "keep.texts: {empty.txt} has no sentence to anchor on (every line is blank): put the "
                                 "sentences to keep in it, or use keep.texts=pool"),
    (["keep.texts={blank.txt}"], "keep.texts: {blank.txt} has no sentence to anchor on (every line is blank): put the "
                                 "sentences to keep in it, or use keep.texts=pool"),
    (["keep.texts={blank.tsv}"], "keep.texts: {blank.tsv} has no sentence to anchor on (column 'sentence' holds no "
                                 "text): put the sentences to keep in it, or use keep.texts=pool"),
    (["keep.texts={latin1.txt}"], "keep.texts: {latin1.txt} is not UTF-8 text (byte 3): save it as UTF-8"),
    (["keep.texts={cols.csv}", "keep.text_column=text"],
     "keep.text_column: {cols.csv} has no column 'text' (its columns: id, sentence)"),
    (["keep.texts={cols.csv}"], "keep.text_column: {cols.csv} has columns id, sentence: name the one with the sentences "
                                "(keep.text_column=NAME)"),
    (["keep.texts={bad.jsonl}"], "keep.texts: {bad.jsonl} line 2: invalid JSON (Expecting value): write one JSON object "
                                 "per line"),
    (["keep.layers=[1,3]"], "keep.layers: 3 is past the model's 2 layers (hidden states 0..2: 0 the embeddings' output, "
                            "2 the last layer's)"),
    # whether or not this run probes: `recall probe` scores the same files later
    (["keep.texts={overlap.txt}"], f"keep.texts: 3 of the anchor's 10 texts are texts the probes score (2 in the probe "
                                   f"texts of {PROBE_TEXTS}; 3 in the STS pairs of {DEV}): an anchor on them would make "
                                   "the kept-skill number meaningless; remove them from the file (or use keep.texts=pool, "
                                   "which holds none)"),
])
@pytest.mark.slow
def test_anchor_inputs_the_run_cannot_use_are_refused_in_one_line(tiny_model_dir, tmp_path, overrides, said):
    files = bad_files(tmp_path)
    def fill(text: str) -> str:
        for name, path in files.items():
            text = text.replace("{" + name + "}", str(path))
        return text

    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, out, probe=NO_PROBE))
    for extra in ([], ["--dry-run"]):
        result = runner.invoke(app, ["finetune", str(recipe), "keep.embeddings=1", *map(fill, overrides), "--plain", *extra])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        # one line (the dry run warns of this tiny recipe's schedule first)
        assert [x for x in result.stderr.strip().splitlines() if not x.startswith("warning: ")] == [f"error: {fill(said)}"]
        assert not out.exists()
    # the anchor off: its inputs are not read
    off = runner.invoke(app, ["finetune", str(recipe), "keep.embeddings=0", *map(fill, overrides), "--dry-run"])
    assert off.exit_code == 0, off.output


# ---- 6. the dry run says what the anchor computes, what it costs, and its bound ---------------------------


@pytest.mark.slow
def test_the_dry_run_names_the_texts_the_rows_drawn_the_time_and_the_bound(tiny_model_dir, tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out", probe=NO_PROBE))
    result = runner.invoke(app, ["finetune", str(recipe), "keep.embeddings=1", "keep.texts=pool", "keep.batch_size=4",
                                 "--dry-run", "--plain"])
    assert result.exit_code == 0, result.output
    assert "# methods: embedding anchor 1 (mean, cosine, on the general pool)" in result.stdout
    line = next(x for x in result.stdout.splitlines() if x.startswith("# anchor: "))
    assert line.startswith("# anchor: theta*'s embeddings of the 48 general-pool texts the run draws (of 5,442) cached "
                           "(0.0 MiB; limit 2 GiB), pre-pass ~"), line
    assert line.endswith(" s (one batch of 16 timed on cpu); each micro-batch adds a forward of 4 of them through the "
                         "student"), line
    assert "  texts: pool\n  batch_size: 4\n" in result.stdout and not (tmp_path / "out").exists()
    task = runner.invoke(app, ["finetune", str(recipe), "keep.embeddings=1", "train.max_steps=3", "--dry-run", "--json"])
    assert task.exit_code == 0, task.output
    plan = json.loads(task.stdout)
    assert plan["recipe"]["keep"] == {"embeddings": 1.0, "pooling": "mean", "distance": "cosine", "schedule": "constant"}
    assert plan["plan"]["anchor"].startswith("theta*'s embeddings of the 24 training examples the run draws (of 96) "
                                             "cached (0.0 MiB; limit 2 GiB), pre-pass ~")


# ---- 7. a run on the pool: its records, its name, and a resume that ends as an uninterrupted run -------


def pool_recipe(tiny_model_dir: Path, out: Path) -> dict:
    return tiny_recipe(tiny_model_dir, out, probe=NO_PROBE,
                       keep={"embeddings": 2.0, "texts": "pool", "batch_size": 4, "layers": [1, 2]},
                       train={"max_steps": 8, "grad_accum": 2, "eval_every": 2, "save_every": 2, "log_every": 1})


@pytest.fixture(scope="module")
def uninterrupted_pool_run(tiny_model_dir, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("pool")
    path = write_recipe(tmp / "pool.yaml", pool_recipe(tiny_model_dir, tmp / "pool"))
    result = runner.invoke(app, ["finetune", str(path), "--plain"])
    assert result.exit_code == 0, result.output
    return tmp / "pool"


@pytest.mark.slow
@pytest.mark.parametrize("stop", [4, 5])  # at a checkpoint; one step past it (step 5 is drawn again)
def test_a_run_on_the_pool_resumed_after_a_stop_ends_as_an_uninterrupted_one(tiny_model_dir, tmp_path,
                                                                            uninterrupted_pool_run, stop):
    from safetensors.torch import load_file

    stopped = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):
        train.finetune(recipe_from_dict(pool_recipe(tiny_model_dir, stopped), "stopped"), reporter=StopAfter(stop))
    assert json.loads((stopped / "last" / "trainer_state.json").read_text())["step"] == 4
    result = runner.invoke(app, ["finetune", "--resume", str(stopped), "--plain"])
    assert result.exit_code == 0, result.output
    reference = uninterrupted_pool_run
    for folder in ("last", "best"):
        a, b = load_file(str(stopped / folder / "model.safetensors")), load_file(str(reference / folder / "model.safetensors"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), folder
    assert comparable(read_metrics(stopped)) == comparable(read_metrics(reference))
    untimed = lambda block: {k: v for k, v in block.items() if k != "anchor"}  # noqa: E731
    assert untimed(summary(stopped)["method"]) == untimed(summary(reference)["method"])


@pytest.mark.slow
def test_a_run_on_the_pool_records_its_parts_and_names_its_texts(uninterrupted_pool_run):
    records = train_records(uninterrupted_pool_run)
    assert [r["step"] for r in records] == list(range(1, 9))
    for r in records:
        assert r["keep_weight"] == 2.0 and r["loss_keep"] > 0
        assert r["loss"] == pytest.approx(r["loss_task"] + 2.0 * r["loss_keep"], rel=1e-5)
    block = summary(uninterrupted_pool_run)["method"]
    assert block["labels"] == ["embedding anchor 2 (mean, cosine, hidden states 1, 2, on the general pool)"]
    assert block["keep"] == {"embeddings": 2.0, "pooling": "mean", "distance": "cosine", "schedule": "constant",
                             "texts": "pool", "batch_size": 4, "layers": [1, 2]}
    # 8 steps x 2 micro-batches x 4 texts
    assert block["anchor"].startswith("theta*'s features at hidden states 1, 2 of the 64 general-pool texts the run "
                                      "draws (of 5,442) cached (0.0 MiB; limit 2 GiB), pre-pass ")
    assert block["anchor"].endswith("; each micro-batch adds a forward of 4 of them through the student")
    card = (uninterrupted_pool_run / "best" / "README.md").read_text(encoding="utf-8")
    assert "embedding anchor 2 (mean, cosine, hidden states 1, 2, on the general pool)" in card
