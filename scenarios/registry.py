"""The scenario registry: ``@scenario(...)`` adds a scenario by name.

``get`` is where every command resolves a scenario: a registered name, or
else a stack file (a name ending in ``.toml``, or an existing file), read
by ``scenarios.stackfile`` as it is at each lookup; ``adopt`` puts a stack
file's text (a repro file's embedded copy) under its name instead.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from sim.clock import parse_duration_ms
from sim.scenario import Param, Scenario

_SCENARIOS: dict[str, Scenario] = {}
# Stack files read in this process, by the name (path) they were given by,
# and whether the entry is a repro file's embedded copy (``adopt``).
_FILES: dict[str, tuple[Scenario, bool]] = {}


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
    import scenarios.stacks.agent_conversations  # noqa: F401
    import scenarios.stacks.ledger_storm  # noqa: F401
    import scenarios.stacks.port_storm  # noqa: F401
    import scenarios.stacks.secret_agents  # noqa: F401
    import scenarios.stacks.sentinel_year  # noqa: F401


def is_stack_file(name: str) -> bool:
    """Whether ``name`` names a stack file rather than a registered scenario."""
    return name not in _SCENARIOS and (name.endswith(".toml") or os.path.isfile(name))


def get(name: str) -> Scenario:
    _load_all()
    if name in _SCENARIOS:
        return _SCENARIOS[name]
    if name in _FILES and _FILES[name][1]:
        return _FILES[name][0]  # a repro file's embedded copy, while it replays
    if is_stack_file(name):
        from scenarios import stackfile

        # Read each time (a stack file is small): a long-lived process (the
        # pytest plugin) runs the file as it is now, and the same relative
        # name in another directory is another file.
        loaded = stackfile.load(name)
        cached = _FILES.get(name)
        if cached is None or cached[0].sha256 != loaded.sha256:  # type: ignore[attr-defined]
            _FILES[name] = (loaded, False)
        return _FILES[name][0]
    raise UnknownScenario(name)


def loaded_file(name: str) -> Scenario | None:
    """The stack file read (or adopted) in this process under ``name``, if any."""
    return _FILES[name][0] if name in _FILES else None


def adopted_file(name: str) -> str | None:
    """The sha256 of the embedded copy adopted under ``name``, if one is."""
    entry = _FILES.get(name)
    return entry[0].sha256 if entry is not None and entry[1] else None  # type: ignore[attr-defined]


def adopt(name: str, text: str, *, where: str) -> Any:
    """The stack file text ``text`` as the scenario ``name`` in this process,
    whatever the file at that path holds (errors name ``where``); return
    what it replaced (for ``restore``). Raises ``StackFileError``."""
    from scenarios import stackfile

    _load_all()
    adopted = stackfile.from_text(name, text, where=where)
    previous = _FILES.get(name)
    _FILES[name] = (adopted, True)
    return previous


def restore(name: str, previous: Any) -> None:
    """Undo ``adopt``: ``name`` resolves as before it."""
    if previous is None:
        _FILES.pop(name, None)
    else:
        _FILES[name] = previous


def all_scenarios() -> list[Scenario]:
    _load_all()
    return [_SCENARIOS[name] for name in sorted(_SCENARIOS)]
