"""`recall probe` after the fact: which θ and which θ* a target names, and one record per target.

A target is a run directory (θ = its best/, else last/; θ* = its recipe's model.name_or_path), a
checkpoint folder (inside a run directory: θ* from that run's recipe), or a model name (`pkg:`, hub id,
folder), which is its own θ* unless ``against`` names another. θ*'s side is computed once per θ*.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from typing import TYPE_CHECKING

from ..model_source import model_location, package_problem
from ..names import DEFAULT_PROBES
from ..recipe.schema import ProbeConfig
from ..errors import ProbeError

if TYPE_CHECKING:
    import torch

# torch, transformers and the runner are imported where a model loads, after resolve_target has checked every
# name: a data folder or a package typo is one line in a second, not after ~10 s (40 s loaded) of imports.


@dataclass(frozen=True)
class Target:
    name: str  # as the user gave it
    theta: str  # what is loaded as θ
    theta_star: str  # θ*
    probe: dict[str, Any] | None = None  # its run's recipe's probe section (schema defaults filled), in a run


def resolve_target(text: str, against: str | None = None) -> Target:
    """A path is resolved as every command resolves one (rundir.locate); anything else is a model name."""
    from ..recipe.file import read_yaml
    from ..rundir import CONFIG_FILE, locate

    for name, key in ((text, "target"), (against, "--against")):
        problem = package_problem(name, key) if name else None
        if problem:
            raise ProbeError(problem)
    if not Path(text).exists():
        return Target(text, text, against or text)  # pkg:, a hub id: its own θ* unless --against
    located = locate(text)
    theta_star = against
    config = read_yaml(located.run_dir / CONFIG_FILE) if located.run_dir is not None else {}
    if theta_star is None and located.run_dir is not None:
        model = config.get("model") or {}
        theta_star = model.get("name_or_path")
        if not theta_star:
            raise ProbeError(f"{located.run_dir / CONFIG_FILE}: no model.name_or_path to take θ* from: give --against MODEL")
        theta_star = model_location(theta_star, model.get("gguf_file"))
    theta = text if located.folder == Path(text) else str(located.folder)  # a folder named as the user wrote it
    section = config.get("probe") if located.run_dir is not None else None
    probe = {**_PROBE_DEFAULTS, **section} if isinstance(section, dict) else ({**_PROBE_DEFAULTS} if config else None)
    return Target(text, theta, theta_star or theta, probe)


# What `recall probe` takes from the targets' runs when it is not told and they all agree: their in-run probe
# measured so, and the same settings give the same numbers (tests/test_lm_choice.py).
FROM_RUNS = ("probes", "texts_file", "pairs_file", "choices_file", "num_texts", "num_pairs", "max_length")
_PROBE_DEFAULTS = {key: value for key, value in asdict(ProbeConfig()).items() if key in FROM_RUNS}
_PROBE_BATCH = ProbeConfig().batch_size


def run_settings(resolved: list[Target]) -> dict[str, Any]:
    """The probe settings every target's run shares (none when a target is not in a run)."""
    if not resolved or any(t.probe is None for t in resolved):
        return {}
    return {key: resolved[0].probe[key] for key in FROM_RUNS if _fits(key, resolved[0].probe.get(key))
            and all(t.probe.get(key) == resolved[0].probe.get(key) for t in resolved)}


def _fits(key: str, value: Any) -> bool:
    """A value of the type its key takes (a hand-edited config.yaml's other values are left to the flags' defaults)."""
    if value is None:
        return True
    if key == "probes":
        return isinstance(value, list) and bool(value) and all(isinstance(p, str) for p in value)
    if key.endswith("_file"):
        return isinstance(value, str)
    return isinstance(value, int) and not isinstance(value, bool)


def probe_targets(targets: list[str], *, against: str | None = None, probes: list[str] | None, texts_file: str | None = None,
                  pairs_file: str | None = None, num_texts: int | None = None, num_pairs: int | None = None,
                  max_length: int | None = None, batch_size: int = _PROBE_BATCH, device: str = "auto",
                  choices_file: str | None = None, from_runs: bool = False, dtype: str = "fp32") -> list[dict[str, Any]]:
    """One record per target: {"target", "theta", "reference", measures..., "notes"}. ``from_runs``: a
    setting given as None is the targets' runs' own when they all share it (`recall probe` unless told),
    else a run's default probe section's (ProbeConfig: the encoder's four probes, the first 128 sentences,
    every pair, 64 tokens), so that a model probed here and a run's record of it agree. ``num_texts`` or
    ``num_pairs`` 0: all of them. ``dtype`` (fp32, bf16, fp16): the models' weights and forward passes in it
    (a 7B model's probe in bf16 takes half the memory); the numbers are computed from the hidden states and
    logits in float32 whatever it is, and a record names a dtype other than fp32."""
    resolved = [resolve_target(t, against) for t in targets]  # every bad name fails before any model loads
    import torch

    from ..model import load_tokenizer
    from ..runtime import resolve_device
    from .runner import check_size, load_inputs
    shared = run_settings(resolved) if from_runs else {}
    taken = [key for key, given in (("probes", probes), ("texts_file", texts_file), ("pairs_file", pairs_file),
                                     ("choices_file", choices_file), ("num_texts", num_texts), ("num_pairs", num_pairs),
                                     ("max_length", max_length)) if given is None and shared.get(key) is not None]
    probes = probes if probes is not None else list(shared.get("probes") or DEFAULT_PROBES)
    texts_file, pairs_file = texts_file or shared.get("texts_file"), pairs_file or shared.get("pairs_file")
    choices_file = choices_file or shared.get("choices_file")
    # Not given, not shared by the targets' runs: a run's default, the one setting (ProbeConfig) every
    # probe of recall starts from. 0 asks for all (a recipe's null).
    num_texts, num_pairs, max_length = (
        given if given is not None else shared[key] if key in shared else _PROBE_DEFAULTS[key]
        for key, given in (("num_texts", num_texts), ("num_pairs", num_pairs), ("max_length", max_length)))
    num_texts, num_pairs = (None if n == 0 else n for n in (num_texts, num_pairs))
    check_size("--max-length", max_length, 8)
    check_size("--batch-size", batch_size, 1)
    inputs = load_inputs(probes, texts_file, pairs_file, num_texts, num_pairs, choices_file)
    dev = resolve_device(device, option="--device")
    weights = probe_dtype(dtype, dev)
    results: dict[str, dict[str, Any]] = {}
    for theta_star in dict.fromkeys(t.theta_star for t in resolved):
        prober, ref_model = theta_star_prober(theta_star, probes, inputs, load_tokenizer(theta_star), dev,
                                             max_length=max_length, batch_size=batch_size, dtype=weights)
        for target in (t for t in resolved if t.theta_star == theta_star):
            theta = ref_model if target.theta == theta_star else load_probed(target.theta, probes).to(dev, weights)
            _check_same_shapes(theta, ref_model, target)
            record = prober.measure(theta, may_be_reference=theta is ref_model)
            own = record.pop("notes", [])
            results[target.name] = {"target": target.name, "theta": target.theta, "reference": theta_star,
                                    "texts": prober.n_texts, "pairs": prober.n_pairs,
                                    **({"choices": prober.n_choices} if prober.n_choices else {}),
                                    **({"dtype": dtype} if weights != torch.float32 else {}), **record,
                                    "notes": list(prober.notes) + own + ([_taken_note(taken, shared)] if taken else [])}
            del theta
        del ref_model, prober
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return [results[t.name] for t in resolved]


def probe_dtype(name: str, device: torch.device) -> torch.dtype:
    """--dtype's torch dtype, refused (ProbeError, exit 2) where the device has none of it."""
    import torch

    from ..runtime import DTYPES

    if name not in DTYPES:
        raise ProbeError(f"--dtype {name}: use fp32, bf16 or fp16")
    if name == "fp16" and device.type != "cuda":
        raise ProbeError("--dtype fp16 needs a CUDA device (on a CPU use --dtype bf16 or fp32)")
    if name == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ProbeError(f"--dtype bf16: {torch.cuda.get_device_name(device)} has no bfloat16 (use --dtype fp16 or fp32)")
    return DTYPES[name]


def theta_star_prober(theta_star: str, probes: list[str], inputs, tokenizer, device: torch.device, *, max_length: int,
                     batch_size: int, option: str = "--max-length ", trust_remote_code: bool = False,
                     dtype: torch.dtype | None = None):
    """(the Prober holding θ*'s side, θ*'s encoder) for ``theta_star``: shared by `recall probe` and
    the library's probe(). ``option`` is how the length setting is named in the error ("--max-length "
    on the command line, "max_length=" from Python)."""
    from ..model import position_limit
    from .runner import Prober

    ref_model = load_probed(theta_star, probes, trust_remote_code).to(device, dtype)  # dtype None: as loaded (fp32)
    limit = position_limit(ref_model.config)
    if limit is not None and max_length > limit:
        shown = option.rstrip("= ")
        raise ProbeError(f"{shown} {max_length} is more than the {limit} positions of θ* {theta_star}: "
                         f"use {option}{limit} or less")
    prober = Prober(probes, inputs, tokenizer, ref_model, device, max_length=max_length, batch_size=batch_size,
                    source=(theta_star, trust_remote_code))
    return prober, ref_model


def load_probed(name: str, probes: list[str], trust_remote_code: bool = False) -> torch.nn.Module:
    """The model a probe reads: the bare encoder, or with a causal LM's probes (lm, kl, choice) the whole
    causal LM (its base model serves the encoder's probes)."""
    from ..model import load_checkpoint_model, load_encoder
    from ..names import custom_lm_task
    from ..plugins.probes import causal_probes
    from ..tasks import task_type_for

    if any(p in causal_probes() for p in probes):
        return load_checkpoint_model(name, task_type_for(custom_lm_task()), trust_remote_code)
    return load_encoder(name, trust_remote_code)


def _check_same_shapes(theta: torch.nn.Module, theta_star: torch.nn.Module, target: Target) -> None:
    """θ and θ* compared in one space (drift, the MLM head, CKA layer by layer) need one architecture:
    the same parameters of the same shapes (a model of another width is refused, not broadcast)."""
    mine = {n: tuple(p.shape) for n, p in theta.named_parameters()}
    theirs = {n: tuple(p.shape) for n, p in theta_star.named_parameters()}
    shared = [n for n in mine if n in theirs]
    fix = "give the model it was fine-tuned from as --against"
    if not shared:
        raise ProbeError(f"{target.name} and θ* {target.theta_star} share no parameter: {fix}")
    for n in shared:
        if mine[n] != theirs[n]:
            raise ProbeError(f"{target.name}: {n} has shape {list(mine[n])}, θ* {target.theta_star} {list(theirs[n])}: {fix}")


def _taken_note(taken: list[str], shared: dict[str, Any]) -> str:
    said = ", ".join(f"probe.{key}={','.join(shared[key]) if key == 'probes' else shared[key]}" for key in taken)
    return f"as the runs' recipes probe ({said}): a flag sets another"
