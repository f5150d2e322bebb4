"""The scenario registry: ``@scenario(...)`` adds a scenario by name."""
from __future__ import annotations

from typing import Any, Callable

from sim.clock import parse_duration_ms
from sim.scenario import Param, Scenario

_SCENARIOS: dict[str, Scenario] = {}


class UnknownScenario(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.scenario = name
        self.known = tuple(sorted(_SCENARIOS))

    def __str__(self) -> str:
        return f"unknown scenario {self.scenario!r}; known scenarios: {', '.join(self.known)}"


def scenario(name: str, description: str, *, duration: str, params: tuple[Param, ...] = (),
             swarm: Any = None, sometimes: tuple[str, ...] = (), sweep: str | None = None) -> Callable:
    """Register a scenario. ``duration``: a run's default; ``sweep``: one
    sweep seed's (default: ``duration``)."""
    def register(build: Callable) -> Callable:
        assert name not in _SCENARIOS, f"scenario {name} registered twice"
        _SCENARIOS[name] = Scenario(name, description, build, parse_duration_ms(duration), params, swarm, sometimes,
                                    parse_duration_ms(sweep) if sweep is not None else None)
        return build

    return register


def _load_all() -> None:
    # Importing the scenario modules registers them.
    import scenarios.stacks.agent_conversations  # noqa: F401
    import scenarios.stacks.ledger_storm  # noqa: F401
    import scenarios.stacks.port_storm  # noqa: F401
    import scenarios.stacks.sentinel_year  # noqa: F401


def get(name: str) -> Scenario:
    _load_all()
    try:
        return _SCENARIOS[name]
    except KeyError:
        raise UnknownScenario(name) from None


def all_scenarios() -> list[Scenario]:
    _load_all()
    return [_SCENARIOS[name] for name in sorted(_SCENARIOS)]
