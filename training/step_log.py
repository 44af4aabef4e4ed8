"""One record per optimizer step: `log.jsonl` (always), TensorBoard (when installed) and a
progress phase, written by rank 0 only.

On resume the log is cut back to the checkpoint's step first, so the steps a killed run did
after its last checkpoint (and will redo) are not listed twice.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import TracebackType

from lake import Phase, phase


class StepLog:
    """`with StepLog(...) as log: log.write({"step": 1, "loss": ...})`; the steps are also a
    progress phase (`lake.progress`) showing `bar_field`."""

    def __init__(
        self,
        stage_dir: Path,
        stage_name: str,
        total_steps: int,
        start_step: int,
        rank: int,
        bar_field: str = "loss",
    ) -> None:
        self.path = stage_dir / "log.jsonl"
        self.stage_name = stage_name
        self.total_steps = total_steps
        self.start_step = start_step
        self.enabled = rank == 0
        self.bar_field = bar_field
        self._tensorboard: object | None = None
        self._phase = contextlib.ExitStack()
        self._shown: Phase | None = None

    def __enter__(self) -> StepLog:
        if not self.enabled:
            return self
        self._truncate(self.start_step)
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tensorboard = SummaryWriter(str(self.path.parent / "tensorboard"))
        except ImportError:  # tensorboard is optional; jsonl is always written
            self._tensorboard = None
        self._shown = self._phase.enter_context(
            phase(f"train {self.stage_name}", self.total_steps, "steps")
        )
        self._shown.update(self.start_step)
        return self

    def write(self, record: dict) -> None:
        """Append one step's record (it must carry `step`)."""
        if not self.enabled:
            return
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        step = record["step"]
        if self._tensorboard is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                    self._tensorboard.add_scalar(f"{self.stage_name}/{key}", value, step)  # type: ignore[attr-defined]
        if self._shown is not None:
            value = record.get(self.bar_field)
            shown = f"{self.bar_field} {value:.4f}" if isinstance(value, float) else None
            self._shown.update(step, shown)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._phase.close()
        if self._tensorboard is not None:
            self._tensorboard.close()  # type: ignore[attr-defined]

    def _truncate(self, keep_through_step: int) -> None:
        if not self.path.exists():
            return
        kept = [
            line
            for line in self.path.read_text().splitlines()
            if line.strip() and json.loads(line)["step"] <= keep_through_step
        ]
        self.path.write_text("".join(line + "\n" for line in kept))


def read_log(stage_dir: Path) -> list[dict]:
    """The records of a stage's `log.jsonl`, in order."""
    return [json.loads(line) for line in (stage_dir / "log.jsonl").read_text().splitlines()]
