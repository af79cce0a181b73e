"""Per-step log rows whose numbers stay on the device until read in one batch.

Reading a loss, a gradient norm or a routing statistic on the host waits for the GPU to finish
the step, so the next step's kernels cannot be queued behind it.  `StepLog` keeps each step's
numbers as one small device tensor and its time as a pair of CUDA events (the CPU: the host
clock, which is synchronous there), and turns them into rows at `flush` (one host sync for all
the steps since the last one): at checkpoints, evaluations, the end, and every train.log_every
steps.
"""

from __future__ import annotations

import math
import time

from deamoe.errors import DeaMoEError

LOG_COLUMNS = [
    "step", "tokens", "loss", "aux_loss", "lr", "grad_norm", "tokens_per_s", "step_time_s",
    "mean_distinct_departments", "max_load_over_mean",
]
# The device-side numbers of one step, in this order.
VALUES = ("loss", "aux_loss", "grad_norm", "mean_distinct_departments", "max_load_over_mean")


def _cause(step: int, lr: float) -> str:
    """What to look at for a non-finite loss: before any update only the initialisation and the
    model's shape are involved; later the learning rate (the one this step ran at) comes first."""
    init = "model.init_std, model.expert_init_scale, model.rms_norm_eps"
    if step == 0:
        return f"before any update: the initialisation ({init}) or the data made it so"
    return (f"after {step} updates at learning rate {lr:.3g} at this step: lower train.lr (or the size's lr), "
            f"raise train.warmup_steps or set train.grad_clip; else check {init}, model.aux_loss_coef")


class StepLog:
    def __init__(self, run: str, device, tokens_per_step: int, rows: list[dict]):
        self.run, self.device, self.tokens_per_step = run, device, tokens_per_step
        self.rows = rows
        self.pending: list[tuple] = []
        self._start = None

    def _mark(self):
        import torch

        if self.device.type == "cuda":
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def begin(self) -> None:
        self._start = self._mark()

    def add(self, step: int, lr: float, values) -> None:
        """values: a float tensor [len(VALUES)] (NaN where a statistic does not apply)."""
        self.pending.append((step, lr, values.detach(), self._start, self._mark()))

    def flush(self) -> list[dict]:
        """Rows of the pending steps (appended to `rows`); raises on a non-finite loss."""
        if not self.pending:
            return []
        import torch

        if self.device.type == "cuda":
            self.pending[-1][4].synchronize()
        values = torch.stack([p[2] for p in self.pending]).double().cpu().tolist()
        new = []
        for (step, lr, _, start, end), v in zip(self.pending, values):
            dt = start.elapsed_time(end) / 1e3 if self.device.type == "cuda" else end - start
            num = dict(zip(VALUES, v))
            if not math.isfinite(num["loss"]):
                raise DeaMoEError(f"run {self.run}: loss became {num['loss']} at step {step + 1}, {_cause(step, lr)}")
            dd = num["mean_distinct_departments"]
            new.append({
                "step": step + 1, "tokens": (step + 1) * self.tokens_per_step, "loss": round(num["loss"], 6),
                "aux_loss": round(num["aux_loss"], 6), "lr": lr, "grad_norm": round(num["grad_norm"], 6),
                "tokens_per_s": round(self.tokens_per_step / max(dt, 1e-9), 1), "step_time_s": round(dt, 5),
                "mean_distinct_departments": round(dd, 4) if dd == dd else "",
                "max_load_over_mean": round(num["max_load_over_mean"], 4),
            })
        self.pending.clear()
        self.rows.extend(new)
        return new
