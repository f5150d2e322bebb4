"""``loomsim list [--faults [SCENARIO]]``: the scenarios, or what each one's seeds choose from."""
from __future__ import annotations

import argparse
from typing import Any

from sim.clock import format_duration_ms
from sim.face.describe import swarm_lines  # shared with loomsim describe
from sim.face.options import UsageError, wrap_names

EXIT_PASS = 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``loomsim list``'s arguments."""
    list_p = sub.add_parser("list", help="list the scenarios (--faults: their fault kinds, failpoints, knobs)")
    list_p.add_argument("scenario", nargs="?", default=None, help="only this scenario (with --faults)")
    list_p.add_argument("--faults", action="store_true",
                        help="per scenario: the fault kinds, failpoints, workload switches and knobs a seed's "
                             "swarm chooses from")
    return list_p


def command(args: argparse.Namespace) -> int:
    """``loomsim list``: every scenario with its description and default
    duration; with ``--faults`` or a SCENARIO, what their seeds choose from."""
    from scenarios import registry

    if args.faults or args.scenario is not None:
        return _list_faults(args.scenario)
    for scenario in registry.all_scenarios():
        print(f"{scenario.name:<16} {scenario.description} (default {format_duration_ms(scenario.default_duration_ms)})")
    return EXIT_PASS


def _list_faults(only: str | None) -> int:
    """``loomsim list --faults [SCENARIO]``: what each scenario's seeds choose from."""
    from faults.kinds import ALL_FAULT_KINDS
    from scenarios import registry

    if only is None:
        scenarios = registry.all_scenarios()
    else:
        try:
            scenarios = [registry.get(only)]
        except registry.UnknownScenario as error:
            raise UsageError(str(error)) from None
    print(f"fault kinds: {wrap_names(ALL_FAULT_KINDS, '  ', head='fault kinds: ')}")
    for scenario in scenarios:
        print(f"\n{scenario.name}: {scenario.description}")
        print("\n".join(swarm_lines(scenario)))
    return EXIT_PASS
