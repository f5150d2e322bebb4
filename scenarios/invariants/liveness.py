"""``liveness``: after the faults stop, every admitted submission settles
within the settle window — nothing is left nonterminal in the ledger."""
from __future__ import annotations

from typing import TYPE_CHECKING

from sim.invariants import Checker

if TYPE_CHECKING:
    from scenarios.system import AuditView


class Liveness(Checker):
    name = "liveness"
    kinds = ()

    def audit(self, view: AuditView) -> None:
        self.checks += 1
        stuck = view.nonterminal_submissions()
        if stuck:
            self.fail(f"{len(stuck)} submission(s) not settled after the faults stopped: "
                      f"{', '.join(stuck[:5])}", tuple(stuck[:5]))
