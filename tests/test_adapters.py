"""The adapters beyond LoRA's default (issue 38), on the tiny BERT and real MRPC rows: LoRA's variants
(model.lora.init = pissa / corda, use_dora, use_rslora) and OSF (model.osf), and intruder-dimension
reduction of a finished LoRA run (recall merge --method intruders: what peft's reduce_intruder_dimension
makes, scored records that recall tradeoff --select-on holdout reads).

Per adapter and variant: best/ and last/ are plain `from_pretrained` folders with the update merged in,
adapter/ beside them opens with peft on theta* and computes best/'s logits; a run stopped and resumed
ends as an uninterrupted one, bit for bit (CorDA reads its cached decomposition back instead of computing
it again); theta* by the adapted names computes theta*'s function and ||theta - theta*|| is the merged
update's norm; preflight counts what peft trains; bad values are refused in one line, exit 2, nothing
written; at their defaults the new keys leave config.yaml as it was before they existed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.methods import registry
from recall_cli.model import build_model
from recall_cli.recipe import dump_recipe, load_recipe, recipe_from_dict
from recall_cli.rundir import read_metrics
from recall_cli.training import loop as train

from conftest import (StopAfter, binary_task, comparable, encoder, pretrained_by_name, summary, tiny_recipe,
                      train_records, write_recipe)

runner = CliRunner()
NO_PROBE = {"enabled": False}
LORA = {"r": 4, "alpha": 8, "dropout": 0.0}
# Each adapter and variant a run is made with (model.<section>); corda's covariance from 48 sentences keeps it fast.
KINDS = {
    "pissa": {"lora": {**LORA, "init": "pissa"}},
    "corda": {"lora": {**LORA, "init": "corda", "corda_samples": 48}},
    "dora_rslora": {"lora": {**LORA, "use_dora": True, "use_rslora": True}},
    "osf": {"osf": {"rank": 4}},
    "pissa_dora": {"lora": {**LORA, "init": "pissa", "use_dora": True}},  # (no run of its own)
}


def finetune(*args):
    result = runner.invoke(app, ["finetune", *map(str, args), "--plain"])
    assert result.exit_code == 0, result.output
    return result


def adapter_recipe(model_dir: Path, out: Path, kind: str, **train_keys) -> dict:
    model = json.loads(json.dumps(KINDS[kind]))
    train_cfg = {"max_steps": 8, "log_every": 2, "eval_every": 4, **train_keys}
    return tiny_recipe(model_dir, out, optimizer={"name": "adamw", "lr": 1e-2}, probe=NO_PROBE, model=model, train=train_cfg)


def weights(run_dir: Path, folder: str = "last") -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / folder / "model.safetensors"))


def adapter_weights(run_dir: Path, folder: str = "last") -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / folder / "adapter" / "adapter_model.safetensors"))


def identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    assert a.keys() == b.keys()
    return all(torch.equal(a[k], b[k]) for k in a)


def built(model_dir: Path, kind: str, out: Path):
    """(the recipe, the adapter's Adapted around a freshly built tiny classifier, theta*)."""
    recipe = recipe_from_dict(adapter_recipe(model_dir, out, kind), "kind")
    model = build_model(recipe.model, binary_task(), recipe.train.seed)
    adapter = registry.active_adapter(recipe)
    return recipe, adapter.wrap(model.model, recipe, binary_task()), model.theta_star


def batch(rows: int = 6) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"input_ids": torch.randint(1000, 5000, (rows, 11), generator=g), "attention_mask": torch.ones(rows, 11, dtype=torch.long)}


# ---- 1. config.yaml: the new keys are written only when set -----------------------------------------


def test_new_keys_at_their_defaults_leave_config_yaml_as_before(tiny_model_dir, tmp_path):
    """A recipe that does not use the variants or OSF writes the config.yaml it wrote before they existed:
    model.lora has its four keys, there is no model.osf; set ones are written and read back."""
    plain = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "a", optimizer={"name": "adamw"},
                                         model={"lora": LORA}), "plain")
    dump_recipe(plain, tmp_path / "plain.yaml")
    model = yaml.safe_load((tmp_path / "plain.yaml").read_text())["model"]
    assert model == {"name_or_path": str(tiny_model_dir), "init": "pretrained", "anchor_dtype": "float32",
                     "trust_remote_code": False, "head": "auto", "lora": {"r": 4, "alpha": 8.0, "dropout": 0.0,
                                                                          "target_modules": None}}
    assert load_recipe(tmp_path / "plain.yaml") == plain
    assert plain.get("model.lora.init") == "default" and plain.get("model.osf.rank") == 0  # every key is there to read

    used = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "b", optimizer={"name": "adamw"},
                                        model={"lora": {**LORA, "init": "corda", "corda_samples": 9, "use_dora": True}}), "used")
    dump_recipe(used, tmp_path / "used.yaml")
    lora = yaml.safe_load((tmp_path / "used.yaml").read_text())["model"]["lora"]
    assert lora == {"r": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": None, "init": "corda", "corda_samples": 9,
                    "use_dora": True}
    assert load_recipe(tmp_path / "used.yaml") == used


def test_describe_summary_and_family_name_the_variants_only_when_set(tiny_model_dir, tmp_path):
    lora = registry.get("lora")
    plain = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path, optimizer={"name": "adamw"}, model={"lora": LORA}), "p")
    assert lora.describe(plain) == "LoRA r=4 alpha=8"  # today's words, today's summary block
    assert lora.summary(plain) == {"lora": {"r": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": None}}
    varied = recipe_from_dict(adapter_recipe(tiny_model_dir, tmp_path, "corda"), "v")
    assert lora.describe(varied) == "LoRA r=4 alpha=8 init=corda"
    assert lora.summary(varied)["lora"] == {"r": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": None, "init": "corda",
                                            "corda_samples": 48}
    both = recipe_from_dict(adapter_recipe(tiny_model_dir, tmp_path, "dora_rslora"), "d")
    assert lora.describe(both) == "LoRA r=4 alpha=8 DoRA rsLoRA"


# ---- 2. bad input: one line, exit 2, nothing written --------------------------------------------------


RECIPE_REFUSALS = [
    (["model.lora.r=4", "model.lora.init=foo"], "model.lora.init: expected one of default, pissa, corda, got 'foo'"),
    (["model.lora.corda_samples=-1"], "model.lora.corda_samples: must be >= 1 (sentences for CorDA's covariance), got -1"),
    (["model.lora.corda_samples=0"], "model.lora.corda_samples: must be >= 1 (sentences for CorDA's covariance), got 0"),
    (["model.lora.corda_samples=.nan"], "model.lora.corda_samples: expected an integer, got nan"),
    (["model.lora.corda_samples=.inf"], "model.lora.corda_samples: expected an integer, got inf"),
    (["model.lora.use_dora=2"], "model.lora.use_dora: expected true or false, got 2"),
    (["model.lora.use_rslora=maybe"], "model.lora.use_rslora: expected true or false, got 'maybe'"),
    (["model.osf.rank=-1"], "model.osf.rank: the trained singular directions per layer must be >= 0 (0 = off), got -1"),
    (["model.osf.rank=.nan"], "model.osf.rank: expected an integer, got nan"),
    (["model.osf.rank=.inf"], "model.osf.rank: expected an integer, got inf"),
    (["model.osf.rank=2.5"], "model.osf.rank: expected an integer, got 2.5"),
    (["model.osf.rank=4", "model.osf.target_modules=[]"],
     "model.osf.target_modules: name at least one module, or null for every linear layer"),
    (["model.osf.rank=4", "optimizer.name=recadam"],
     "model.osf.rank: recadam's pull toward theta* has nothing to act on under OSF (the pretrained weights stay frozen "
     "and the update starts at zero): use optimizer.name=adamw"),
    (["model.osf.rank=4", "train.linear_probe_steps=2"],
     "train.linear_probe_steps: LP-FT with OSF is not supported yet (set train.linear_probe_steps=0, or model.osf.rank=0)"),
    (["model.osf.rank=4", "model.lora.r=4"], "lora, osf: one adapter per run (turn all but one off)"),
]
# What only the model shows (a layer too small for the rank, a module it does not have): one line, no recipe header.
MODEL_REFUSALS = [
    (["model.osf.rank=32"], "error: model.osf.rank: 32 leaves nothing frozen in bert.encoder.layer.0.attention.self.query "
                            "(its smaller dimension is 32): set it below 32"),
    (["model.osf.rank=4", "model.osf.target_modules=[nope]"],
     "error: model.osf.target_modules: this model has no module named 'nope' (its linear layers are named "
     "classifier, dense, key, query, value; or null for all of them)"),
    (["model.lora.r=32", "model.lora.init=pissa"],
     "error: model.lora.r: 32 leaves nothing frozen in bert.encoder.layer.0.attention.self.query with "
     "model.lora.init=pissa (its smaller dimension is 32): set it below 32"),
    (["model.lora.r=40", "model.lora.init=corda", "model.lora.corda_samples=8"],
     "error: model.lora.r: 40 leaves nothing frozen in bert.encoder.layer.0.attention.self.query with "
     "model.lora.init=corda (its smaller dimension is 32): set it below 32"),
    (["model.lora.r=4", "model.lora.init=pissa", "model.lora.target_modules=[nope]"],
     "error: model.lora.target_modules: this model has no module named 'nope' (its linear layers are named classifier, "
     "dense, key, query, value; or null for all of them)"),
]


def refused(recipe: Path, out: Path, args: list[str]) -> list[list[str]]:
    """stderr's lines of `recall finetune` with ``args``, run and dry run; each exit 2, nothing written."""
    seen = []
    for extra in ([], ["--dry-run"]):
        result = runner.invoke(app, ["finetune", str(recipe), *args, "--plain", *extra])
        assert result.exit_code == 2, (args, extra, result.output)
        assert "Traceback" not in result.output
        assert not out.exists()
        seen.append(result.stderr.strip().splitlines())
    assert seen[0] == seen[1]
    return seen[0]


@pytest.mark.parametrize("args, line", RECIPE_REFUSALS, ids=[" ".join(a) for a, _ in RECIPE_REFUSALS])
def test_bad_adapter_values_are_refused_in_one_line(tiny_model_dir, tmp_path, args, line):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, out, probe=NO_PROBE, optimizer={"name": "adamw"}))
    lines = refused(recipe, out, args)
    assert len(lines) == 2 and lines[1].startswith(f"  - {line}")
    # A problem naming a key set on the command line says so, naming the override, and the header says whose
    # problems they are; one that names no key ("lora, osf: one adapter per run") stays the recipe's.
    if lines[1] == f"  - {line}":
        assert lines[0] == f"error: {recipe}: 1 problem in the recipe:" and line.startswith("lora, osf")
    else:
        assert lines[0] == f"error: {recipe}: 1 problem in the command line's overrides:"
        named = [a for a in args if line.startswith(a.split("=")[0] + ":")] or [a for a in args if a.split("=")[0] in line]
        assert lines[1] == f"  - {line} (set on the command line: {named[0]})"


@pytest.mark.slow
@pytest.mark.parametrize("args, line", MODEL_REFUSALS, ids=[" ".join(a) for a, _ in MODEL_REFUSALS])
def test_adapter_settings_this_model_cannot_take_are_refused_in_one_line(tiny_model_dir, tmp_path, args, line):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, out, probe=NO_PROBE, optimizer={"name": "adamw"}))
    assert refused(recipe, out, args) == [line]


@pytest.mark.slow
def test_corda_samples_beyond_the_unscored_sentences_are_refused_before_the_model_is_wrapped(tiny_model_dir, tmp_path):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, out, probe=NO_PROBE, optimizer={"name": "adamw"}))
    lines = refused(recipe, out, ["model.lora.r=4", "model.lora.init=corda", "model.lora.corda_samples=100000"])
    assert len(lines) == 1 and lines[0].startswith("error: model.lora.corda_samples: "), lines
    assert lines[0].endswith("holds 10285 sentences that the probes do not score, fewer than 100000: set it to 10285 or fewer")


# ---- 3. CorDA's sentences: STS-B train, never one the probes score --------------------------------------


@pytest.mark.slow
def test_corda_sentences_leave_out_every_sentence_the_probes_score(tiny_model_dir, tmp_path):
    from recall_cli.methods.lora.corda import calibration_texts
    from recall_cli.probes.sets import load_pairs, load_texts

    recipe = recipe_from_dict(adapter_recipe(tiny_model_dir, tmp_path, "corda"), "c")
    texts, left_out = calibration_texts(recipe)
    assert len(texts) == len(set(texts)) == 48
    assert texts[:2] == ["A plane is taking off.", "An air plane is taking off."]  # STS-B train's first row
    pairs = load_pairs(None)
    scored = set(load_texts(None)) | {" ".join(s.split()) for s in pairs.first + pairs.second}
    assert not scored & set(texts)
    bigger = recipe_from_dict({**adapter_recipe(tiny_model_dir, tmp_path, "corda"),
                               "model": {"name_or_path": str(tiny_model_dir), "lora": {**LORA, "init": "corda", "corda_samples": 256}}}, "c")
    texts256, left_out256 = calibration_texts(bigger)
    assert texts256[:48] == texts and left_out256 == 38 and not scored & set(texts256)  # STS-B dev repeats 38 of the first 294


# ---- 4. theta* by the adapted names; the update's norm; preflight's count -------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pissa", "corda", "dora_rslora", "pissa_dora", "osf"])
def test_theta_star_names_compute_theta_stars_function_and_the_norm_is_the_merged_update(tiny_model_dir, tmp_path, kind):
    """Every trained part moved by noise (as training would): loaded with theta_star_names the model
    computes theta*'s features (the head, which has no theta*, trains in full and is not part of it); update_norm is ||merged - theta*|| over the adapted weights; the trained
    count is what preflight counts on a meta model."""
    from recall_cli.probes.runner import weights_loaded
    from recall_cli.training import preflight
    from transformers import AutoConfig

    recipe, adapted, theta_star = built(tiny_model_dir, kind, tmp_path / "out")
    model = adapted.base_model.eval()

    def features():
        return model(**batch(), output_hidden_states=True).hidden_states[-1]

    with torch.no_grad():
        reference = features()  # theta* with the adapters at their start
        torch.manual_seed(1)
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
        moved = features()
        with weights_loaded(model, adapted.theta_star_names(theta_star)):
            back = features()
    assert (moved - reference).abs().max() > 1e-3  # the comparison can tell
    assert (back - reference).abs().max() <= 1e-6, (back - reference).abs().max()

    merged = adapted.merged_copy().state_dict()
    want = math.sqrt(sum(float((merged[n].double() - theta_star[n].double()).pow(2).sum())
                         for n in theta_star if not n.startswith("classifier")))
    assert adapted.update_norm() == pytest.approx(want, rel=1e-4)

    trainable, _ = adapted.trainable_counts()
    config = AutoConfig.from_pretrained(tiny_model_dir)
    from recall_cli.methods import active_adapter

    assert preflight.parameter_counts(config, binary_task(), recipe, active_adapter(recipe))[2] == trainable


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pissa", "osf"])
def test_the_decomposition_is_the_same_whatever_the_thread_count(tmp_path, kind):
    """MKL's SVD of a 128 x 512 weight differs between 1 and 2 threads; the adapters' start does not (it is
    made on one thread), so --resume, another --jobs or --nproc start from the same bits."""
    from recall_cli.testing import tiny_bert_dir

    model_dir = tiny_bert_dir(tmp_path / "wide", seed=3, hidden_size=128, num_layers=1, num_heads=2, intermediate_size=512)
    weight = torch.randn(512, 128, generator=torch.Generator().manual_seed(0))
    threads = torch.get_num_threads()
    starts = []
    try:
        for n in (2, 1):
            torch.set_num_threads(n)
            starts.append(([t.clone() for t in torch.linalg.svd(weight, full_matrices=False)],
                           {k: v.clone() for k, v in built(model_dir, kind, tmp_path / "out")[1].base_model.state_dict().items()}))
            assert torch.get_num_threads() == n  # given back
    finally:
        torch.set_num_threads(threads)
    (svd2, start2), (svd1, start1) = starts
    if not all(torch.equal(a, b) for a, b in zip(svd1, svd2)):  # where the library's SVD depends on it (MKL)
        assert start1.keys() == start2.keys() and all(torch.equal(start1[k], start2[k]) for k in start1)


# ---- 5. best/ and last/ are plain; adapter/ opens with peft on theta* and computes best/'s logits ---------


@pytest.fixture(scope="module")
def kind_run(tiny_model_dir, tmp_path_factory):
    """One run per kind (8 steps, adamw at lr 1e-2, evals at 4 and 8), made once on first use."""
    tmp, made = tmp_path_factory.mktemp("adapters"), {}

    def get(kind: str) -> Path:
        if kind not in made:
            out = tmp / kind
            finetune(write_recipe(tmp / f"{kind}.yaml", adapter_recipe(tiny_model_dir, out, kind)))
            made[kind] = out
        return made[kind]

    return get


def mrpc_batch(model_dir: Path, rows: int = 24) -> dict[str, torch.Tensor]:
    from recall_cli.model import load_tokenizer
    from recall_cli.tasks.batches import pad_inputs
    from recall_cli.training.setup import load_task_data

    recipe = recipe_from_dict(tiny_recipe(model_dir, model_dir / "unused"), "batch")
    dev = load_task_data(recipe, load_tokenizer(str(model_dir))).dev["dev"]
    return pad_inputs(dev, list(range(rows)), 0, None, recipe.task.max_seq_length)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pissa", "corda", "dora_rslora", "osf"])
def test_checkpoints_are_plain_and_the_adapter_on_theta_star_computes_their_logits(kind_run, tiny_model_dir, kind):
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    run_dir = kind_run(kind)
    pretrained = pretrained_by_name(tiny_model_dir)
    inputs = mrpc_batch(tiny_model_dir)
    for folder in ("best", "last"):
        ckpt, merged_weights = run_dir / folder, weights(run_dir, folder)
        assert not (ckpt / "adapter_config.json").exists()
        assert not [k for k in merged_weights if any(m in k for m in ("lora_", "osf_", "base_layer", "modules_to_save"))]
        merged, info = AutoModelForSequenceClassification.from_pretrained(ckpt, output_loading_info=True)
        assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
        # Only the adapted weights and the head moved; the embeddings and LayerNorms are theta*'s.
        changed = {k for k in pretrained if not torch.equal(merged_weights[k], pretrained[k])}
        assert changed and all(k.endswith(".weight") and ("dense" in k or "attention.self" in k) for k in changed), changed
        assert all(torch.equal(merged_weights[k], pretrained[k]) for k in pretrained if "embeddings" in k or "LayerNorm" in k)

        config = json.loads((ckpt / "adapter" / "adapter_config.json").read_text())
        if kind == "osf":
            assert config["peft_type"] == "OSF" and config["effective_rank"] == 32 - 4
        else:  # pissa and corda: converted to a LoRA on theta* of twice the rank, the same scale
            assert config["peft_type"] == "LORA" and config["init_lora_weights"] is True
            assert (config["r"], config["lora_alpha"]) == ((4, 8) if kind == "dora_rslora" else (8, 16))
            assert config["use_dora"] is (kind == "dora_rslora") and config["use_rslora"] is (kind == "dora_rslora")
        assert "classifier" in config["modules_to_save"]
        torch.manual_seed(0)
        base = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=2)
        with_adapter = PeftModel.from_pretrained(base, ckpt / "adapter").eval()
        frozen = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=2).eval()
        frozen.classifier.load_state_dict({"weight": merged_weights["classifier.weight"], "bias": merged_weights["classifier.bias"]})
        with torch.no_grad():
            want, got, before = merged.eval()(**inputs).logits, with_adapter(**inputs).logits, frozen(**inputs).logits
        assert (got - want).abs().max().item() <= 1e-5, (kind, folder, (got - want).abs().max().item())
        assert (before - want).abs().max().item() > 1e-3  # the encoder's update shows in the logits

    s = summary(run_dir)
    assert s["finished"] and s["method"]["names"] == [KINDS[kind].__iter__().__next__()]
    last = math.sqrt(sum(float((weights(run_dir)[k].double() - v.double()).pow(2).sum()) for k, v in pretrained.items()))
    assert s["final_distance"] == pytest.approx(last, rel=1e-4) and s["final_distance"] > 0.01
    assert train_records(run_dir)[-1]["distance"] == pytest.approx(last, rel=1e-4)
    card = (run_dir / "best" / "README.md").read_text()
    assert registry.get(s["method"]["names"][0]).describe(load_recipe(run_dir / "config.yaml")) in card
    if kind == "corda":  # the decomposition is cached in the run directory, in peft's cache format
        (cache,) = run_dir.glob("corda-*.pt")
        eigens = torch.load(cache, weights_only=True)
        assert len(eigens) == 3 * 13 and eigens["bert.pooler.dense.eigens.S_WC"].shape == (4,)


@pytest.mark.slow  # builds the model in prepare
@pytest.mark.parametrize("kind, key", [("osf", "osf"), ("corda", "lora_init")])
def test_dry_run_says_what_trains_and_writes_nothing(tiny_model_dir, tmp_path, kind, key):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", adapter_recipe(tiny_model_dir, out, kind))
    result = runner.invoke(app, ["finetune", str(recipe), "--dry-run"])
    assert result.exit_code == 0, result.output
    lines = {line.split(":", 1)[0][2:]: line.split(": ", 1)[1] for line in result.stdout.splitlines() if line.startswith("# ")}
    assert not out.exists()
    _, adapted, _ = built(tiny_model_dir, kind, out)
    trainable, total = adapted.trainable_counts()
    if kind == "osf":
        assert lines["osf"].startswith(f"{trainable:,} of {total:,} parameters train")
        assert lines["methods"] == "OSF rank=4"
    else:
        assert lines["lora_init"] == (f"CorDA (knowledge-preserved) from the covariance of 48 STS-B train sentences (7 left "
                                      f"out: the probes score them); cached at the first save in {adapted.start.cache_path}")
        assert adapted.start.cache_path.parent == out and not adapted.start.cache_path.exists()


# ---- 6. a run stopped and resumed ends as an uninterrupted one, bit for bit ---------------------------------


def resume_recipe(model_dir: Path, out: Path, kind: str) -> dict:
    recipe = adapter_recipe(model_dir, out, kind, max_steps=10, save_every=2, eval_every=4, log_every=1)
    if "lora" in recipe["model"]:
        recipe["model"]["lora"]["dropout"] = 0.1  # the RNG streams must come back too
    return recipe


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pissa_dora", "corda", "osf"])
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_resumed_run_ends_as_an_uninterrupted_one(tiny_model_dir, tmp_path, monkeypatch, kind):
    from recall_cli.methods.lora import corda

    reference = tmp_path / "reference"
    finetune(write_recipe(tmp_path / "reference.yaml", resume_recipe(tiny_model_dir, reference, kind)))
    stopped = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):
        train.finetune(recipe_from_dict(resume_recipe(tiny_model_dir, stopped, kind), "stopped"), reporter=StopAfter(5))
    assert json.loads((stopped / "last" / "trainer_state.json").read_text())["step"] == 4
    at_checkpoint = adapter_weights(stopped)
    caches = sorted(stopped.glob("corda-*.pt"))
    assert len(caches) == (kind == "corda")
    if kind == "corda":  # --resume reads the cached decomposition: computing the covariances again fails the test
        cached = caches[0].read_bytes()
        monkeypatch.setattr(corda, "covariances", lambda *a, **k: pytest.fail("the covariances were computed again"))
    result = finetune("--resume", stopped)
    assert "resuming at step 4," in result.output

    for folder in ("last", "best"):
        assert identical(weights(stopped, folder), weights(reference, folder)), folder
        assert identical(adapter_weights(stopped, folder), adapter_weights(reference, folder)), folder
    a, b = read_metrics(stopped), read_metrics(reference)
    assert comparable(a) == comparable(b) and len([r for r in a if r["split"] == "train"]) == 10
    oa = torch.load(stopped / "last" / "optimizer.pt", weights_only=True)["optimizer"]["state"]
    ob = torch.load(reference / "last" / "optimizer.pt", weights_only=True)["optimizer"]["state"]
    assert oa.keys() == ob.keys() and all(torch.equal(oa[i]["exp_avg_sq"], ob[i]["exp_avg_sq"]) for i in ob)
    sa, sb = summary(stopped), summary(reference)
    assert sa["final_distance"] == sb["final_distance"] > 0 and sa["method"] == sb["method"]
    after = adapter_weights(stopped)
    assert max((after[k] - at_checkpoint[k]).abs().max().item() for k in after) > 1e-4  # it trained on
    if kind == "corda":
        assert caches[0].read_bytes() == cached and [p.name for p in reference.glob("corda-*.pt")] == [caches[0].name]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["corda", "osf"])
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_a_run_killed_with_sigkill_resumes_bit_for_bit(tiny_model_dir, tmp_path, monkeypatch, kind):
    """A real `recall finetune` process killed with SIGKILL after a checkpoint (no handler runs) and resumed
    ends as an uninterrupted run: the same weights, adapter/, optimizer moments and records; CorDA's
    decomposition was written into the run directory at the first save and is read, not computed, on --resume."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from recall_cli.methods.lora import corda
    from recall_cli.rundir import find_checkpoint

    def checkpoint_step(run_dir: Path) -> int:
        folder = find_checkpoint(run_dir, "last")
        try:
            return json.loads((folder / "trainer_state.json").read_text())["step"] if folder else 0
        except (OSError, ValueError):  # replaced while read
            return 0

    def recipe(out: Path) -> dict:
        r = resume_recipe(tiny_model_dir, out, kind)
        r["train"].update(max_steps=160, save_every=3, eval_every=40, log_every=4)
        return r

    killed, reference = tmp_path / "killed", tmp_path / "reference"
    command = [sys.executable, "-m", "recall_cli", "finetune", str(write_recipe(tmp_path / "k.yaml", recipe(killed))), "--plain"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    deadline = time.monotonic() + 300
    while checkpoint_step(killed) < 9 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    killed_at = checkpoint_step(killed)
    assert 9 <= killed_at < 160 and not (killed / "summary.json").exists()
    caches = sorted(killed.glob("corda-*.pt"))
    assert len(caches) == (kind == "corda")
    if kind == "corda":
        cached = caches[0].read_bytes()
        monkeypatch.setattr(corda, "covariances", lambda *a, **k: pytest.fail("the covariances were computed again"))
    result = finetune("--resume", killed)
    assert f"resuming at step {killed_at}," in result.output
    monkeypatch.undo()
    finetune(write_recipe(tmp_path / "r.yaml", recipe(reference)))

    for folder in ("last", "best"):
        assert identical(weights(killed, folder), weights(reference, folder)), folder
        assert identical(adapter_weights(killed, folder), adapter_weights(reference, folder)), folder
    assert comparable(read_metrics(killed)) == comparable(read_metrics(reference))
    oa = torch.load(killed / "last" / "optimizer.pt", weights_only=True)["optimizer"]["state"]
    ob = torch.load(reference / "last" / "optimizer.pt", weights_only=True)["optimizer"]["state"]
    assert oa.keys() == ob.keys() and all(torch.equal(oa[i]["exp_avg_sq"], ob[i]["exp_avg_sq"]) for i in ob)
    if kind == "corda":
        assert caches[0].read_bytes() == cached


@pytest.mark.slow
def test_overwrite_reads_the_old_cache_and_writes_it_into_the_new_run_directory(tiny_model_dir, tmp_path, monkeypatch):
    """--overwrite moves the old run directory aside only at the new run's first step: a cache read from
    it (the same key: the same decomposition) is written into the new directory at the first save, so
    that the new run resumes from it too."""
    from recall_cli.methods.lora import corda

    recipe = write_recipe(tmp_path / "r.yaml", adapter_recipe(tiny_model_dir, tmp_path / "run", "corda", max_steps=2,
                                                              eval_every=0))
    finetune(recipe)
    (cache,) = (tmp_path / "run").glob("corda-*.pt")
    before = cache.read_bytes()
    monkeypatch.setattr(corda, "covariances", lambda *a, **k: pytest.fail("the covariances were computed again"))
    result = finetune(recipe, "--overwrite")
    assert "recall: done" in result.output
    assert [p.name for p in (tmp_path / "run").glob("corda-*.pt")] == [cache.name] and cache.read_bytes() == before


# ---- 7. intruder-dimension reduction of a finished LoRA run (recall merge --method intruders) ---------------


def merge(*args) -> "Result":  # noqa: F821
    return runner.invoke(app, ["merge", *map(str, args)])


MERGE_REFUSALS = [
    (["--mitigation-lambda", "2"], "error: --mitigation-lambda 2.0: give a number in [0, 1] (1 keeps the intruder dimensions, 0 removes them)"),
    (["--mitigation-lambda", "-0.5"], "error: --mitigation-lambda -0.5: give a number in [0, 1] (1 keeps the intruder dimensions, 0 removes them)"),
    (["--mitigation-lambda", "nan"], "error: --mitigation-lambda nan: not a finite number: give a number in [0, 1]: 1 keeps the intruder dimensions, 0 removes them"),
    (["--mitigation-lambda", "inf"], "error: --mitigation-lambda inf: not a finite number: give a number in [0, 1]: 1 keeps the intruder dimensions, 0 removes them"),
    (["--threshold-epsilon", "0"], "error: --threshold-epsilon 0.0: give a cosine in (0, 1] (e.g. 0.5)"),
    (["--threshold-epsilon", "nan"], "error: --threshold-epsilon nan: not a finite number: give a cosine in (0, 1], e.g. 0.5"),
    (["--top-k", "0"], "error: --top-k 0: give a whole number >= 1 (e.g. 10)"),
]


@pytest.mark.parametrize("options, line", MERGE_REFUSALS, ids=[" ".join(o) for o, _ in MERGE_REFUSALS])
def test_bad_intruder_settings_are_refused_in_one_line(tiny_model_dir, tmp_path, options, line):
    out = tmp_path / "out"
    result = merge(tiny_model_dir, tiny_model_dir, "--method", "intruders", *options, "--out", out)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [line] and not out.exists()


@pytest.mark.slow
def test_intruders_takes_a_lora_run_and_its_pretrained_model_and_refuses_dora(tiny_model_dir, tmp_path):
    import shutil

    dora = tmp_path / "dora"
    shutil.copytree(tiny_model_dir, dora)
    (dora / "adapter").mkdir()
    (dora / "adapter" / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "use_dora": True}))
    for models, line in (
        ([tiny_model_dir, tiny_model_dir], "error: --method intruders takes two models: a LoRA run (its checkpoint holds "
                                           "adapter/) and the pretrained model it was trained from; got 2, 0 with an adapter"),
        ([tiny_model_dir, dora, dora], "error: --method intruders takes two models: a LoRA run (its checkpoint holds "
                                       "adapter/) and the pretrained model it was trained from; got 3, 2 with an adapter"),
        ([tiny_model_dir, dora], f"error: {dora} was trained with DoRA (model.lora.use_dora): peft's intruder reduction "
                                 "factors the low-rank update alone and would leave DoRA's magnitudes as they were"),
    ):
        result = merge(*models, "--method", "intruders", "--out", tmp_path / "out")
        assert result.exit_code == 2, result.output
        assert result.stderr.strip().splitlines() == [line] and not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def holdout_lora_run(tiny_model_dir, tmp_path_factory) -> Path:
    """A LoRA run (r 4, lr 2e-2, 12 steps) trained with task.holdout and small probes: what the chooser reads."""
    tmp = tmp_path_factory.mktemp("intruders")
    recipe = tiny_recipe(tiny_model_dir, tmp / "lora", optimizer={"name": "adamw", "lr": 2e-2}, model={"lora": LORA},
                         task={"holdout": 0.25}, probe={"num_texts": 16, "num_pairs": 12, "max_length": 32},
                         train={"max_steps": 12, "eval_every": 12, "log_every": 4})
    finetune(write_recipe(tmp / "lora.yaml", recipe))
    return tmp / "lora"


@pytest.mark.slow
def test_intruder_reduction_writes_what_peft_makes_and_records_the_chooser_reads(holdout_lora_run, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from peft.tuners.lora.intruders import reduce_intruder_dimension
    from transformers import AutoModelForSequenceClassification

    settings = ["--top-k", "4", "--threshold-epsilon", "0.9"]
    outs = {}
    for lam in (0.0, 1.0):
        outs[lam] = tmp_path / f"l{lam:g}"
        result = merge(tiny_model_dir, holdout_lora_run, "--method", "intruders", "--mitigation-lambda", lam, *settings,
                       "--out", outs[lam], "--json")
        assert result.exit_code == 0, result.output
        record = json.loads(result.stdout)
        assert (record["method"], record["lambda"], record["top_k"], record["threshold_epsilon"]) == ("intruders", lam, 4, 0.9)
        assert len(record["intruders"]) == 13 and record["intruders_total"] == sum(record["intruders"].values()) > 0

    # The run's output is peft's helper on theta* with best/'s adapter, merged: the same bits.
    base = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=2)
    helped = PeftModel.from_pretrained(base, holdout_lora_run / "best" / "adapter")
    with torch.no_grad():
        reduce_intruder_dimension(helped, top_k=4, threshold_epsilon=0.9, mitigation_lambda=0.0, logging_sink=None)
        want = encoder(helped.merge_and_unload().state_dict())
    got, best = weights(outs[0.0], "lora"), weights(holdout_lora_run, "best")
    assert identical(encoder(got), {k: v for k, v in want.items() if k in encoder(got)})
    assert all(torch.equal(got[k], best[k]) for k in ("classifier.weight", "classifier.bias"))  # the run's own head
    # lambda 1 keeps the update (refactored at the adapter's rank); lambda 0 takes the intruders out of it.
    kept = weights(outs[1.0], "lora")
    assert max((kept[k] - best[k]).abs().max().item() for k in encoder(best)) <= 1e-5
    pretrained = pretrained_by_name(tiny_model_dir)
    dist = lambda ws: math.sqrt(sum(float((ws[k] - v).double().pow(2).sum()) for k, v in pretrained.items()))  # noqa: E731
    assert dist(got) < dist(best) - 1e-3

    # Scored records (holdout and dev), grouped by record.lambda, chosen among beside the run.
    for lam, out in outs.items():
        result = runner.invoke(app, ["evaluate", str(out / "lora"), "--record", str(tmp_path / f"rec{lam:g}"), "--device", "cpu", "--json"])
        assert result.exit_code == 0, result.output
        config = yaml.safe_load((tmp_path / f"rec{lam:g}" / "config.yaml").read_text())["record"]
        assert (config["merge"], config["lambda"], config["with"]) == ("intruders", lam, ["pretrained"])
        assert set(json.loads(result.stdout)["final"]) >= {"holdout", "dev"}
    result = runner.invoke(app, ["tradeoff", str(holdout_lora_run), str(tmp_path / "rec0"), str(tmp_path / "rec1"),
                                 "--within", "100", "--select-on", "holdout", "--json", "--out", str(tmp_path / "t.png")])
    assert result.exit_code == 0, result.output
    (task,) = json.loads(result.stdout)
    names = sorted(c["name"] for c in task["candidates"])
    assert len(names) == 3 and sum("intruder reduction" in n for n in names) == 2, names
    assert all(c["holdout"]["main"] is not None for c in task["candidates"])
