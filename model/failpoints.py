"""Named crash points. A no-op outside simulation.

Model code calls ``failpoints.hit("name")`` exactly where a process could die
with the interesting partial state (DESIGN §5's crash-point matrix). In
simulation the fault layer may crash the calling node there (the call then
raises and never returns); outside simulation nothing happens.
"""
from __future__ import annotations

from typing import Protocol


class Failpoints(Protocol):
    def hit(self, name: str) -> None: ...


class NoFailpoints:
    __slots__ = ()

    def hit(self, name: str) -> None:
        return None


NO_FAILPOINTS = NoFailpoints()

# The failpoint names the model declares. Faults and coverage reports read
# this tuple, so a point that never fires in a sweep shows up as a gap.
DURABLE_STATE_SAVE_AFTER_STORE_WRITE = "durable_state.save.after_store_write"
KERNEL_EFFECT_DONE_BEFORE_RECORD = "kernel.effect_done.before_record"

ALL_FAILPOINTS: tuple[str, ...] = (
    DURABLE_STATE_SAVE_AFTER_STORE_WRITE,
    KERNEL_EFFECT_DONE_BEFORE_RECORD,
)
