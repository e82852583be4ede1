"""Adapters: methods that train a few added weights while theta* stays frozen (LoRA is one; another peft
tuner is one more room with an :class:`Adapter` and an :class:`Adapted` of its own, and no edit elsewhere).

What the run asks of an adapter, and nothing more:

- ``wrap`` the freshly built classifier (its own library's model around it) -> an :class:`Adapted`;
- ``trained_parameters``: how many parameters train, counted on a meta-device model, for preflight's
  memory estimate before any weight is loaded;
- from the :class:`Adapted`: the base model (saved, evaluated and probed through it), the trainable and
  total counts, a plain copy with the update merged in (every checkpoint folder stays a plain
  ``from_pretrained`` folder), the adapter's own files saved beside it and loaded back on --resume,
  theta* by the wrapped model's parameter names, and ||theta - theta*|| as the merged update's norm.

Standard library only at import, like the registry: the rooms import their libraries when a run starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from .methods import Method


class Adapted:
    """One wrapped model in one run (the adapter's library object is ``wrapped``)."""

    # Parameter names that are the adapter's own or its library's copies: left out of the merged
    # checkpoint's size (what --dry-run's disk line counts).
    extra_markers: ClassVar[tuple[str, ...]] = ()

    def __init__(self, wrapped: Any):
        self.wrapped = wrapped

    @property
    def base_model(self) -> Any:
        """The model under the adapter, holding it: what the run trains, evaluates and probes."""
        raise NotImplementedError

    def trainable_counts(self) -> tuple[int, int]:
        """(trainable, all) parameters, as the adapter's library counts them."""
        raise NotImplementedError

    def merged_copy(self) -> Any:
        """A plain model with the update merged in (the training model is left as it is)."""
        raise NotImplementedError

    def save(self, folder: Any) -> None:
        """The adapter's own files inside a checkpoint folder (beside the merged weights)."""
        raise NotImplementedError

    def load(self, folder: Any) -> None:
        """A checkpoint's adapter back into the wrapped model: what --resume continues."""
        raise NotImplementedError

    def theta_star_names(self, theta_star: dict[str, Any]) -> dict[str, Any]:
        """theta* by the wrapped model's parameter names, with the adapter at a zero update: loaded into
        the model it computes theta*'s function (the probes, the embedding anchor)."""
        raise NotImplementedError

    def update_norm(self) -> float:
        """||theta - theta*||: the norm of the merged update."""
        raise NotImplementedError


class PeftAdapted(Adapted):
    """An :class:`Adapted` whose library is peft: the base model, the counts and the merged copy are peft's
    own calls, the same for every tuner (LoRA, OSF); a room adds saving, loading, theta* by name and the norm.
    Standard library only (peft's calls go through ``wrapped``), so it stands here beside the contract."""

    @property
    def base_model(self) -> Any:
        return self.wrapped.get_base_model()

    def trainable_counts(self) -> tuple[int, int]:
        return self.wrapped.get_nb_trainable_parameters()  # as peft's print_trainable_parameters counts them

    def merged_copy(self) -> Any:
        import copy

        return copy.deepcopy(self.wrapped).merge_and_unload()  # the training model is left as it is


class Adapter(Method):
    """A method that is an adapter: at most one per run (registry.check refuses two)."""

    is_adapter: ClassVar[bool] = True

    def wrap(self, model: Any, recipe: Any, task: Any) -> Adapted:
        """``task``: the run's task type (tasks.TaskType), whose model this is (its peft task type)."""
        raise NotImplementedError

    def trained_parameters(self, meta_model: Any, head: set[str], recipe: Any) -> int:
        """Parameters that train under this adapter, head included, on a model built on the meta device
        (``head``: the classification head's parameter names)."""
        raise NotImplementedError



# ---- what the peft-backed adapters share (LoRA's room and OSF's) -------------------------------------


def linear_names(model: Any) -> list[str]:
    """The last name part of every linear layer of ``model``: what a target_modules list may name."""
    import torch

    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})


def check_named_targets(model: Any, names: list[str], key: str) -> None:
    """Every name of a target_modules list must name a module of ``model``, as peft matches them (the whole
    name, or its last dotted parts): peft adapts what matches and drops the rest silently."""
    from ..errors import PreflightError

    modules = [name for name, _ in model.named_modules()]
    unknown = [n for n in names if not any(m == n or m.endswith("." + n) for m in modules)]
    if unknown:
        raise PreflightError(f"{key}: this model has no module named {', '.join(map(repr, unknown))} (its linear layers "
                             f"are named {', '.join(linear_names(model))}; or null for all of them)")


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread while peft takes its SVDs (PiSSA, CorDA, OSF): the frozen and trained parts come
    out the same bits whatever the process's thread count (MKL's SVD of a 384 x 384 weight differs between 1
    and 2 threads), so that --resume, a sweep's other --jobs or --nproc start from the same split."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
