"""What the loop reads off the device only now and then: the steps' losses, loss parts and gradient
norms, summed where they were computed (training/loop.py reads them at a log, evaluation or save)."""

from __future__ import annotations

import torch


class Pending:
    """The steps' losses and gradient norms since the loop last read them, summed on the device.

    Reading a number off a GPU waits for every kernel queued before it; reading the loss at every step
    would keep the device idle between steps. The loop reads these at its next log, evaluation, probe
    or save (:meth:`read`), where it waits anyway. The first step whose loss was not finite is kept,
    so that divergence is reported at its own step, and found before any checkpoint could save it.
    Sums are float64: the same numbers whether a resumed run reads them at other steps or not."""

    def __init__(self, device: torch.device, scaler_enabled: bool):
        self.device, self.scaler_enabled = device, scaler_enabled
        self.reset()

    def reset(self) -> None:
        zero = lambda: torch.zeros((), dtype=torch.float64, device=self.device)  # noqa: E731
        self.loss, self.norm, self.stepped, self.skipped, self.bad_loss = (zero() for _ in range(5))
        self.first_bad = torch.full((), -1, dtype=torch.long, device=self.device)
        self.parts: dict[str, torch.Tensor] = {}  # the methods' loss parts (loss_task, loss_keep), summed

    def add(self, step: int, loss_sum: torch.Tensor, grad_norm: torch.Tensor,
            parts: dict[str, torch.Tensor] | None = None) -> None:
        loss = loss_sum.detach().double()
        self.loss += loss
        for name, value in (parts or {}).items():
            self.parts[name] = self.parts.get(name, 0.0) + value.detach().double()
        first = ~torch.isfinite(loss) & (self.first_bad < 0)
        self.first_bad = torch.where(first, step, self.first_bad)
        self.bad_loss = torch.where(first, loss, self.bad_loss)
        norm = grad_norm.detach().double()
        if self.scaler_enabled:  # a non-finite norm: the GradScaler skipped this update
            finite = torch.isfinite(norm)
            self.norm += torch.where(finite, norm, 0.0)
            self.stepped += finite
            self.skipped += ~finite
        else:
            self.norm += norm
            self.stepped += 1

    def read(self, ctx) -> tuple[dict[str, float], tuple[int, float] | None]:
        """(the sums, for the window; (first non-finite step, its loss) or None), one host read; under
        DDP the loss is summed over ranks (each rank's is weighted by its share x world_size)."""
        loss = self.loss
        bad_any = (self.first_bad >= 0).double()
        names = sorted(self.parts)
        parts = [self.parts[name] for name in names]
        if ctx.enabled:  # the parts are weighted by each rank's share x world_size, like the loss
            packed = torch.stack([loss, bad_any, *parts])
            ctx.all_reduce_sum(packed)
            loss, bad_any, parts = packed[0] / ctx.world_size, packed[1], list(packed[2:] / ctx.world_size)
        values = torch.stack([loss, self.norm, self.stepped, self.skipped, bad_any, *parts]).tolist()
        bad = None
        if values[4] > 0:
            mine = (int(self.first_bad), float(self.bad_loss)) if int(self.first_bad) >= 0 else None
            found = [b for b in ctx.all_gather_object(mine) if b is not None]
            bad = min(found)
        self.reset()
        sums = dict(zip(("loss", "grad_norm", "stepped", "skipped"), values[:4]))
        sums.update(zip(names, values[5:]))
        return sums, bad
