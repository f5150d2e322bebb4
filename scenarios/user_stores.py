"""A user's store adapters: ``--store MODULE:FACTORY``.

``FACTORY()`` returns a mapping with any subset of ``ledger`` (a submission
ledger), ``log`` (a conversation store) and ``ds`` (a durable-state store);
every other store of the run is in memory. Each port the factory returns
is checked, before the run starts, against the method set of its protocol
in ``model/`` (``PORT_PROTOCOLS``): a store that lacks one, or an object
that is no store at all, is a ``SetupError`` naming what is missing (the
CLI's usage error), never a traceback halfway through a run.
"""
from __future__ import annotations

import importlib
import re
from typing import Any, Mapping

from model.conversation.port import ConversationLogPort
from model.durable_state.store import DurableStateStore
from model.ledger.port import SubmissionLedgerPort
from sim.scenario import SetupError

_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# The ports a user may provide: key -> (what it is, its protocol).
PORT_PROTOCOLS: dict[str, tuple[str, type]] = {
    "ledger": ("a submission ledger", SubmissionLedgerPort),
    "log": ("a conversation log", ConversationLogPort),
    "ds": ("a durable-state store", DurableStateStore),
}
USER_STORES = tuple(PORT_PROTOCOLS)
MISSING_SHOWN = 4  # missing methods a message names before "and N more"


def required_methods(protocol: type) -> tuple[str, ...]:
    """The public methods ``protocol`` declares, in declaration order."""
    return tuple(name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_"))


def missing_methods(store: object, protocol: type) -> tuple[str, ...]:
    """The methods of ``protocol`` that ``store`` lacks (or has but cannot call)."""
    return tuple(name for name in required_methods(protocol) if not callable(getattr(store, name, None)))


def port_problem(key: str, store: object) -> str | None:
    """What is wrong with ``store`` given as port ``key``; None if nothing."""
    what, protocol = PORT_PROTOCOLS[key]
    missing = missing_methods(store, protocol)
    if not missing:
        return None
    needs = ", ".join(required_methods(protocol))
    shown = ", ".join(f"{name}()" for name in missing[:MISSING_SHOWN])
    more = f" and {len(missing) - MISSING_SHOWN} more" if len(missing) > MISSING_SHOWN else ""
    subject = f'the "{key}" store ({type(store).__name__})'
    if len(missing) == len(required_methods(protocol)):
        problem = f"{subject} has none of the methods {what} needs ({shown}{more})"
    else:
        problem = f"{subject} lacks {shown}{more} ({what} needs {needs})"
    fits = [other for other, (_, theirs) in PORT_PROTOCOLS.items() if other != key and not missing_methods(store, theirs)]
    if fits:
        problem += f'; it is {PORT_PROTOCOLS[fits[0]][0]}: give it as "{fits[0]}"'
    return problem


def load_store_factory(spec: str) -> dict[str, Any]:
    """``MODULE:FACTORY`` -> the user's stores (any subset of USER_STORES),
    each checked against its protocol. Raises ``SetupError`` (one line,
    starting ``--store SPEC:``)."""
    if not _FACTORY.match(spec):
        raise SetupError(f"invalid --store {spec!r}: expected memory, sqlite or MODULE:FACTORY")
    module_name, _, attr = spec.partition(":")

    def fail(problem: str) -> SetupError:
        return SetupError(f"--store {spec}: {problem}")

    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - a user's module: any failure is a usage error
        raise fail(f"cannot load store module {module_name!r}: {type(error).__name__}: {error}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise fail(f"{module_name} has no callable {attr!r}")
    try:
        stores = factory()
    except Exception as error:  # noqa: BLE001
        raise fail(f"the factory failed: {type(error).__name__}: {error}") from None
    if not isinstance(stores, Mapping) or not stores or set(stores) - set(USER_STORES):
        raise fail(f"the factory must return a mapping with any of {', '.join(USER_STORES)}; got {stores!r:.80}")
    for key, store in stores.items():
        problem = port_problem(key, store)
        if problem is not None:
            raise fail(problem)
    return dict(stores)
