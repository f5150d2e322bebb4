"""The scenario registry: ``@scenario(...)`` adds a scenario by name.

``get`` is where every command resolves a scenario: a registered name, or
else a stack file (a name ending in ``.toml``, or an existing file), read
once per process by ``scenarios.stackfile``; ``adopt`` puts a stack file's
text (a repro file's embedded copy) under its name instead.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from sim.clock import parse_duration_ms
from sim.scenario import Param, Scenario

_SCENARIOS: dict[str, Scenario] = {}
_FILES: dict[str, Scenario] = {}  # stack files read in this process, by the name (path) they were given by


class UnknownScenario(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.scenario = name
        self.known = tuple(sorted(_SCENARIOS))

    def __str__(self) -> str:
        return f"unknown scenario {self.scenario!r}; known scenarios: {', '.join(self.known)}"


class StackFileError(UnknownScenario):
    """A stack file that cannot be read: one line, ``FILE: [workload 2]
    unknown key 'evry' (known: ...)``. A scenario name that does not
    resolve, so every command reports it where it reports an unknown one."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


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
    import scenarios.agent_conversations  # noqa: F401
    import scenarios.ledger_storm  # noqa: F401
    import scenarios.port_storm  # noqa: F401
    import scenarios.sentinel_year  # noqa: F401


def is_stack_file(name: str) -> bool:
    """Whether ``name`` names a stack file rather than a registered scenario."""
    return name not in _SCENARIOS and (name.endswith(".toml") or os.path.isfile(name))


def get(name: str) -> Scenario:
    _load_all()
    if name in _SCENARIOS:
        return _SCENARIOS[name]
    if name in _FILES:
        return _FILES[name]
    if is_stack_file(name):
        from scenarios import stackfile

        _FILES[name] = stackfile.load(name)
        return _FILES[name]
    raise UnknownScenario(name)


def adopt(name: str, text: str, *, where: str) -> Scenario:
    """The stack file text ``text`` as the scenario ``name`` in this process
    (errors name ``where``). Raises ``StackFileError``."""
    from scenarios import stackfile

    _load_all()
    _FILES[name] = stackfile.from_text(name, text, where=where)
    return _FILES[name]


def all_scenarios() -> list[Scenario]:
    _load_all()
    return [_SCENARIOS[name] for name in sorted(_SCENARIOS)]
