"""Planted bugs as data: a mutant is a textual patch of one model module.

Why: a simulation harness earns its place by finding bugs nobody wrote a
unit test for. The measure is a catalogue of realistic planted bugs
(``faults.mutant_catalogue``) and a sweep against each (``loomsim
mutants``): detected or survived. Detection comes from scenario runs alone.

A :class:`Mutant` names a model module, an ``old`` text that occurs in its
source exactly once and the ``new`` text that replaces it. Nothing on disk
changes. :func:`apply` compiles the patched source under the module's own
file name, finds the innermost function the edit lands in (by its
qualified name, with the ``ast`` of the clean source), takes that
function's new code object from the compiled module and assigns it to the
live function's ``__code__``. The function object stays the one every
reference holds, so ``from m import f`` copies, bound methods and instances
all run the mutant. An edit inside a nested function (or a lambda) swaps
its nearest enclosing function that the module can name, whose constants
carry the new inner code.

An edit that lands outside any function (a module constant, e.g. an SQL
string) is applied by executing the changed top-level statement(s) in the
module's namespace: functions that read the name at call time see it,
while a copy taken by ``from m import CONST`` elsewhere does not (a
mutant's ``doc`` says so where it matters).

Everything that can go wrong is refused loudly, before anything changes:
``old`` missing or ambiguous, a patch that does not compile, an edit that
spans two functions or lands in a class body, a new code object whose
closure differs from the live one, or one that reads a global the module
does not have (it would fail as a ``NameError`` and pass for a detection).
Each is a :class:`MutantError`, one line.

A process applies at most one mutant (:func:`apply` is idempotent for that
one); :func:`revert` puts the clean code back, for tests that apply
several in turn.

What a run needs for the mutant to fire is data on the mutant: ``adapter``
(the built-in store adapter whose code it patches, if any: ``sqlite`` or
``memory``) and ``scenarios``. :func:`store_problem` says why a run on a
given ``--store`` cannot execute the patched code (``loomsim run
--mutant`` refuses it up front). And a swapped function counts its calls
(:func:`executions`): a run whose mutant never executed tested nothing,
and says so rather than pass (a module constant cannot be counted: None).
"""
from __future__ import annotations

import ast
import builtins
import dis
import importlib
import inspect
import re
import types
from typing import Any, Callable, Iterator, Sequence

import attrs

__all__ = ["Mutant", "MutantError", "Patch", "applied", "apply", "catalogue", "current", "executions",
           "load_user_mutants", "prepare", "revert", "store_problem"]

NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{1,62}")
STORES = ("memory", "sqlite")
DOC_CHARS_MAX = 400
EQUIVALENT_CHARS_MAX = 600
MODULE_PREFIX = "model."  # mutants patch the system under test, nothing else
ADAPTERS = ("memory", "sqlite")
# The name a swapped function calls on entry to count its executions (bound
# in the patched module while the mutant is applied).
HIT_NAME = "__loomsim_mutant_hit__"


class MutantError(Exception):
    """A mutant that cannot be applied as written (one line, typed)."""

    name = "MutantError"


@attrs.frozen
class Mutant:
    """One planted bug: replace ``old`` (exactly once in ``module``'s
    source) by ``new``.

    ``doc``: one sentence, the realistic bug it stands for. ``scenarios``:
    the scenarios that exercise the code it patches (the sweep runs those).
    ``store``: the adapter the runs use (a bug in the SQLite adapter lives
    only under ``--store sqlite``). ``adapter``: the built-in store adapter
    whose code the mutant patches (``sqlite``, ``memory``), or None for
    model code every store runs; by default read from ``module``
    (``*.sqlite_store`` and ``model.sqlite_db``: sqlite, ``*.memory_store``:
    memory). A run on another store never executes the patch. ``ci_seed``/``ci_duration``: one seed
    and the shortest duration measured to detect it (the fast CI subset),
    in ``ci_scenario`` (default: the first of ``scenarios``); None for a
    mutant no seed is known to detect yet.

    ``equivalent``: for a mutant argued to be equivalent (no execution of
    the system can observe it), the argument, one line. It is still run:
    a seed that detects it refutes the argument (the table says so); one
    that survives is reported as equivalent, apart from the survivors, and
    left out of the detected share, as mutation testing does. Never a way
    to drop a survivor: the argument must say why no workload could reach
    a difference.
    """

    name: str
    doc: str
    module: str
    old: str
    new: str
    scenarios: tuple[str, ...]
    store: str = "memory"
    ci_seed: int | None = None
    ci_duration: str | None = None
    ci_scenario: str | None = None
    equivalent: str | None = None
    # The ci run is beyond the contract (``--beyond-contract``: a sweep's
    # beyond seed), where the clean run ends DETECTED: the mutant is caught
    # when the run ends FAIL instead (``ci_detects``).
    ci_beyond: bool = False
    adapter: str | None = attrs.field(default=attrs.Factory(lambda self: _adapter_of(self.module), takes_self=True))

    def __attrs_post_init__(self) -> None:
        problem = _problem(self)
        if problem is not None:
            raise MutantError(f"mutant {self.name!r}: {problem}")

    @property
    def ci_run(self) -> tuple[str, int, str] | None:
        """``(scenario, seed, duration)`` of the fast CI run, or None."""
        if self.ci_seed is None or self.ci_duration is None:
            return None
        return (self.ci_scenario or self.scenarios[0], self.ci_seed, self.ci_duration)


def _adapter_of(module: object) -> str | None:
    """The built-in adapter a module is (by its name), or None."""
    if type(module) is not str:
        return None
    last = module.rsplit(".", 1)[-1]
    if last == "sqlite_store" or module == "model.sqlite_db":
        return "sqlite"
    return "memory" if last == "memory_store" else None


def store_problem(mutant: Mutant, store: str) -> str | None:
    """Why a run on ``store`` (memory, sqlite, MODULE:FACTORY) can never
    execute ``mutant``'s patched code; None when it may."""
    if mutant.adapter == "sqlite" and store != "sqlite":
        return (f"mutant {mutant.name} patches the SQLite store adapter ({mutant.module}); this run uses "
                f"--store {store} (add --store sqlite)")
    if mutant.adapter == "memory" and store == "sqlite":
        return (f"mutant {mutant.name} patches an in-memory store adapter ({mutant.module}); this run uses "
                "--store sqlite, which never runs it (use --store memory)")
    return None


def _problem(m: Mutant) -> str | None:
    if type(m.name) is not str or NAME_RE.fullmatch(m.name) is None:
        return "name must be 2..63 characters of a-z, 0-9 and '-'"
    if type(m.doc) is not str or not m.doc.strip() or "\n" in m.doc or len(m.doc) > DOC_CHARS_MAX:
        return f"doc must be one sentence on one line (at most {DOC_CHARS_MAX} characters)"
    if type(m.module) is not str or not m.module.startswith(MODULE_PREFIX):
        return f"module must be a module of the system under test ({MODULE_PREFIX}...), got {m.module!r}"
    if type(m.old) is not str or not m.old.strip() or type(m.new) is not str:
        return "old must be non-empty text and new text"
    if m.old == m.new:
        return "new is the same as old: not a mutant"
    if (type(m.scenarios) is not tuple or not m.scenarios
            or not all(type(s) is str and s for s in m.scenarios) or len(set(m.scenarios)) != len(m.scenarios)):
        return "scenarios must be a non-empty tuple of distinct scenario names"
    if m.store not in STORES:
        return f"store must be one of {', '.join(STORES)}, got {m.store!r}"
    if m.adapter is not None and m.adapter not in ADAPTERS:
        return f"adapter must be one of {', '.join(ADAPTERS)} or None, got {m.adapter!r}"
    if m.adapter is not None and m.adapter != m.store:
        return f"it patches the {m.adapter} adapter: its store must be {m.adapter!r}, got {m.store!r}"
    if (m.ci_seed is None) != (m.ci_duration is None):
        return "ci_seed and ci_duration come together"
    if m.ci_seed is not None and (type(m.ci_seed) is not int or m.ci_seed < 0):
        return "ci_seed must be a whole number >= 0"
    if m.ci_scenario is not None and (m.ci_seed is None or m.ci_scenario not in m.scenarios):
        return "ci_scenario must be one of scenarios, with a ci_seed"
    if m.equivalent is not None and (type(m.equivalent) is not str or not m.equivalent.strip()
                                     or "\n" in m.equivalent or len(m.equivalent) > EQUIVALENT_CHARS_MAX):
        return f"equivalent must be the argument on one line (at most {EQUIVALENT_CHARS_MAX} characters)"
    if m.equivalent is not None and m.ci_seed is not None:
        return "a mutant with a detecting ci_seed is not equivalent"
    if type(m.ci_beyond) is not bool:
        return "ci_beyond must be True or False"
    return None


def ci_detects(mutant: Mutant, status: str) -> bool:
    """Whether a ci run of ``mutant`` that ended ``status`` caught it. Beyond
    the contract (``ci_beyond``) only a failure does: DETECTED is what the
    clean run at that seed ends in (a broken promise noticed as designed),
    and a pass means no promise broke (the run tested nothing). Otherwise
    any status but a pass (and DETECTED, which a run within the contract
    never ends in)."""
    if mutant.ci_beyond:
        return status == "fail"
    return status not in ("pass", "detected")


@attrs.frozen
class Patch:
    """What applying a mutant changes: code objects to swap into live
    functions (the patched code, counting its calls: ``HIT_NAME``), and
    module names to rebind (module-level edits)."""

    mutant: Mutant
    swaps: tuple[tuple[types.FunctionType, types.CodeType], ...]
    bindings: tuple[tuple[str, Any], ...]
    module: types.ModuleType

    @property
    def targets(self) -> tuple[str, ...]:
        """What the patch touches, by name (functions by qualname, then rebound module names)."""
        return tuple(f.__qualname__ for f, _ in self.swaps) + tuple(name for name, _ in self.bindings)


# -- preparing a patch (nothing changes yet) ----------------------------------------


def prepare(mutant: Mutant) -> Patch:
    """Compile ``mutant`` and find what it swaps, changing nothing.

    Raises ``MutantError`` for every way the mutant cannot apply."""
    fail = _failer(mutant)
    try:
        module = importlib.import_module(mutant.module)
    except Exception as error:  # noqa: BLE001 - any import failure is the mutant's to report
        raise fail(f"cannot import {mutant.module}: {type(error).__name__}: {error}") from None
    filename = inspect.getsourcefile(module)
    if filename is None:
        raise fail(f"{mutant.module} has no source file")
    with open(filename, encoding="utf-8") as handle:
        source = handle.read()
    count = source.count(mutant.old)
    if count == 0:
        raise fail(f"old text not found in {mutant.module} ({_excerpt(mutant.old)})")
    if count > 1:
        raise fail(f"old text occurs {count} times in {mutant.module}: make it unique ({_excerpt(mutant.old)})")
    start = source.index(mutant.old)
    patched = source[:start] + mutant.new + source[start + len(mutant.old):]
    try:
        compiled = compile(patched, filename, "exec", dont_inherit=True)
        patched_tree = ast.parse(patched, filename)
    except SyntaxError as error:
        raise fail(f"the patched {mutant.module} does not compile: {error.msg} (line {error.lineno})") from None
    tree = ast.parse(source, filename)
    first_line = source.count("\n", 0, start) + 1
    last_line = source.count("\n", 0, start + max(len(mutant.old) - 1, 0)) + 1
    scope = _enclosing(tree, first_line, last_line, fail)
    if scope is None:
        new_last = patched.count("\n", 0, start + max(len(mutant.new) - 1, 0)) + 1
        bindings = _module_bindings(module, patched, patched_tree, filename, first_line, new_last, fail)
        return Patch(mutant, (), bindings, module)
    qualname, lineno = scope
    live = _live_function(module, qualname, lineno, fail)
    new_code = _find_code(compiled, qualname, lineno, fail)
    if new_code.co_freevars != live.__code__.co_freevars:
        raise fail(f"the closure of {qualname} differs: {live.__code__.co_freevars} -> {new_code.co_freevars}")
    _check_globals(module, new_code, qualname, fail)
    counted = _find_code(_counting(patched_tree, qualname, lineno, filename), qualname, lineno, fail)
    return Patch(mutant, ((live, counted),), (), module)


def _counting(tree: ast.Module, qualname: str, lineno: int, filename: str) -> types.CodeType:
    """The patched module compiled with a call of ``HIT_NAME`` first in the
    body of function ``qualname`` (after its docstring): its code counts its
    executions, and does nothing else differently."""
    body = tree.body
    parts = qualname.split(".")
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        node = next(n for n in body if isinstance(n, _SCOPES) and n.name == part
                    and (not last or _lines(n)[0] == lineno))
        body = node.body
    first = body[0]
    at = 1 if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
               and isinstance(first.value.value, str) and len(body) > 1) else 0
    call = ast.Expr(ast.Call(ast.Name(HIT_NAME, ast.Load()), [], []))
    body.insert(at, ast.copy_location(call, body[at]))
    ast.fix_missing_locations(tree)
    return compile(tree, filename, "exec", dont_inherit=True)


def _failer(mutant: Mutant) -> Callable[[str], MutantError]:
    def fail(message: str) -> MutantError:
        return MutantError(f"mutant {mutant.name!r}: {message}")

    return fail


def _excerpt(text: str, limit: int = 60) -> str:
    one_line = " ".join(text.split())
    return repr(one_line if len(one_line) <= limit else one_line[: limit - 1] + "…")


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _lines(node: ast.stmt) -> tuple[int, int]:
    """All the lines of a statement, a definition's decorators included."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return first, node.end_lineno  # type: ignore[return-value]


def _enclosing(tree: ast.Module, first: int, last: int, fail: Callable[[str], MutantError]) -> tuple[str, int] | None:
    """(qualname, first line) of the outermost function the module can name
    whose body holds lines ``first..last``, or None for a module-level edit.

    Nested functions, lambdas and comprehensions are carried by their
    enclosing function's constants, so the nameable function is the one to
    swap. Refused: an edit in a class body outside its methods, across two
    definitions, or in a def's header (its defaults and decorators are
    evaluated once, at import: a code swap would not change them)."""
    prefix: list[str] = []
    body: list[ast.stmt] = list(tree.body)
    where = "the module"
    while True:
        touched = [node for node in body if not (_lines(node)[1] < first or _lines(node)[0] > last)]
        if prefix and (len(touched) != 1 or not isinstance(touched[0], _SCOPES)):
            raise fail(f"the edit lands in the body of class {'.'.join(prefix)}, outside one method")
        if not touched:
            return None
        if len(touched) > 1 or not isinstance(touched[0], _SCOPES):
            scopes = [node.name for node in touched if isinstance(node, _SCOPES)]
            if scopes:
                raise fail(f"the edit spans the definition of {scopes[0]} and what is around it in {where}")
            return None  # module-level statements
        node = touched[0]
        body_first = node.body[0].lineno
        if isinstance(node, _FUNCTIONS):
            if first < body_first:
                raise fail(f"the edit touches the header of {'.'.join([*prefix, node.name])} "
                           "(defaults and decorators are evaluated at import)")
            # A decorated function's code starts at its first decorator.
            return ".".join([*prefix, node.name]), _lines(node)[0]
        if first < body_first:
            raise fail(f"the edit touches the header of class {'.'.join([*prefix, node.name])}")
        prefix.append(node.name)
        where = f"class {'.'.join(prefix)}"
        body = list(node.body)


def _live_function(module: types.ModuleType, qualname: str, lineno: int,
                   fail: Callable[[str], MutantError]) -> types.FunctionType:
    """The live function object of ``qualname`` (first line ``lineno``):
    a module attribute or a class attribute, unwrapping decorators
    (``functools.wraps``), staticmethod, classmethod and property."""
    parts = qualname.split(".")
    owner: Any = module
    for part in parts[:-1]:
        owner = getattr(owner, part, None)
        if not isinstance(owner, type):
            raise fail(f"{module.__name__}.{qualname}: {part} is not a class the module defines")
    attr = parts[-1]
    raw = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    candidates: list[Any] = []
    if isinstance(raw, (staticmethod, classmethod)):
        candidates.append(raw.__func__)
    elif isinstance(raw, property):
        candidates.extend(f for f in (raw.fget, raw.fset, raw.fdel) if f is not None)
    elif raw is not None:
        candidates.append(raw)
    for candidate in candidates:
        function = candidate
        for _ in range(32):  # a decorator chain is short; this bounds a cyclic __wrapped__
            code = getattr(function, "__code__", None)
            if isinstance(function, types.FunctionType) and code is not None and (
                    code.co_qualname == qualname and code.co_firstlineno == lineno):
                return function
            function = getattr(function, "__wrapped__", None)
            if function is None:
                break
    raise fail(f"cannot find the live function {module.__name__}.{qualname} (line {lineno})")


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _find_code(compiled: types.CodeType, qualname: str, lineno: int,
               fail: Callable[[str], MutantError]) -> types.CodeType:
    found = [c for c in _code_objects(compiled) if c.co_qualname == qualname and c.co_firstlineno == lineno]
    if len(found) != 1:
        raise fail(f"the patched module has {len(found)} code objects for {qualname} at line {lineno}")
    return found[0]


def _check_globals(module: types.ModuleType, code: types.CodeType, qualname: str,
                   fail: Callable[[str], MutantError]) -> None:
    """Every global the new code reads exists: a misspelt name would fail
    at run time as a NameError, which a sweep would count as a detection."""
    namespace = vars(module)
    for inner in _code_objects(code):
        for instruction in dis.get_instructions(inner):
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                name = instruction.argval
                if name not in namespace and not hasattr(builtins, name):
                    raise fail(f"{qualname} would read the global {name!r}, which {module.__name__} does not have")


def _module_bindings(module: types.ModuleType, patched: str, patched_tree: ast.Module, filename: str,
                     first: int, last: int, fail: Callable[[str], MutantError]) -> tuple[tuple[str, Any], ...]:
    """The names a module-level edit rebinds, and their new values: the
    patched top-level statements the edit touches, executed in a copy of the
    module's namespace (the live module is not touched here)."""
    touched = [node for node in patched_tree.body
               if not (node.end_lineno < first or node.lineno > last)]  # type: ignore[operator]
    if not touched:
        raise fail("the edit touches no statement")
    names: list[str] = []
    for node in touched:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            raise fail(f"a module-level edit may change constants only, not a {type(node).__name__} "
                       f"(line {node.lineno})")
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if not isinstance(target, ast.Name):
                raise fail(f"a module-level edit may assign plain names only (line {node.lineno})")
            names.append(target.id)
    lines = patched.splitlines(keepends=True)
    text = "".join(lines[touched[0].lineno - 1: touched[-1].end_lineno])  # type: ignore[operator]
    scratch = dict(vars(module))
    try:
        exec(compile(text, filename, "exec", dont_inherit=True), scratch)  # noqa: S102 - the mutant's own constant
    except Exception as error:  # noqa: BLE001 - a constant that fails to evaluate is the mutant's to report
        raise fail(f"the changed statement fails: {type(error).__name__}: {error}") from None
    for name in names:
        if name not in vars(module):
            raise fail(f"the edit binds {name!r}, which {module.__name__} does not define")
    return tuple((name, scratch[name]) for name in dict.fromkeys(names))


# -- applying ----------------------------------------------------------------------

# The patch this process runs (at most one), and how to undo it.
_applied: Patch | None = None
_undo: tuple[tuple[types.FunctionType, types.CodeType], ...] = ()
_undo_bindings: tuple[tuple[str, Any], ...] = ()
_hits = [0]  # calls of the applied mutant's swapped functions


def _hit() -> None:
    _hits[0] += 1


def executions() -> int | None:
    """How many times the applied mutant's patched function(s) ran since it
    was applied; None without a mutant, or for a module-level edit (a
    constant: what reads it cannot be counted)."""
    if _applied is None or not _applied.swaps:
        return None
    return _hits[0]


def current() -> Mutant | None:
    """The mutant this process runs, if any."""
    return None if _applied is None else _applied.mutant


def apply(mutant: Mutant) -> Patch:
    """Swap ``mutant`` into the live model. Idempotent for the mutant
    already applied; a second, different mutant is refused (a run applies
    at most one). Raises ``MutantError``."""
    global _applied, _undo, _undo_bindings
    if _applied is not None:
        if _applied.mutant == mutant:
            return _applied
        raise MutantError(f"mutant {mutant.name!r}: mutant {_applied.mutant.name!r} is applied already "
                          "(a run applies at most one)")
    patch = prepare(mutant)
    _undo = tuple((function, function.__code__) for function, _ in patch.swaps)
    namespace = vars(patch.module)
    _undo_bindings = tuple((name, namespace[name]) for name, _ in patch.bindings)
    _hits[0] = 0
    if patch.swaps:
        namespace[HIT_NAME] = _hit
    for function, code in patch.swaps:
        function.__code__ = code
    for name, value in patch.bindings:
        namespace[name] = value
    _drop_memos(patch.module)
    _applied = patch
    return patch


def _drop_memos(module: types.ModuleType) -> None:
    """Empty the module's memos (``_MEMOS``: the dicts in which its code
    keeps what it worked out, e.g. ``model.canonical``'s member-order
    plans): what the clean code kept must not stand in for the mutant's
    code, nor the mutant's for the clean code after a revert."""
    for memo in getattr(module, "_MEMOS", ()):
        memo.clear()


def revert() -> None:
    """Put the clean code back (no-op when nothing is applied)."""
    global _applied, _undo, _undo_bindings
    if _applied is None:
        return
    for function, code in _undo:
        function.__code__ = code
    namespace = vars(_applied.module)
    for name, value in _undo_bindings:
        namespace[name] = value
    namespace.pop(HIT_NAME, None)
    _drop_memos(_applied.module)
    _applied, _undo, _undo_bindings = None, (), ()


class applied:
    """``with applied(mutant): ...`` runs the block with ``mutant`` in
    place and reverts it after (tests)."""

    def __init__(self, mutant: Mutant) -> None:
        self.mutant = mutant

    def __enter__(self) -> Patch:
        return apply(self.mutant)

    def __exit__(self, *exc: object) -> None:
        revert()


# -- the catalogue and users' mutants ------------------------------------------------


def _index(mutants: Sequence[Any], source: str) -> dict[str, Mutant]:
    found: dict[str, Mutant] = {}
    for mutant in mutants:
        if not isinstance(mutant, Mutant):
            raise MutantError(f"{source}: expected Mutant values, got {type(mutant).__name__}")
        if mutant.name in found:
            raise MutantError(f"{source}: mutant {mutant.name!r} is defined twice")
        found[mutant.name] = mutant
    return found


def catalogue() -> dict[str, Mutant]:
    """The built-in mutants by name, in catalogue order."""
    from faults.mutant_catalogue import MUTANTS

    return _index(MUTANTS, "faults.mutant_catalogue")


def load_user_mutants(module_name: str) -> tuple[Mutant, ...]:
    """A user's mutants: module ``module_name``'s ``MUTANTS`` sequence
    (users add their own mutants beside the catalogue). Raises ``MutantError``."""
    if type(module_name) is not str or not re.fullmatch(r"[A-Za-z_][\w.]*", module_name):
        raise MutantError(f"invalid mutants module {module_name!r}: expected a dotted module name")
    try:
        module = importlib.import_module(module_name)
    except MutantError:
        raise
    except Exception as error:  # noqa: BLE001 - a user's module: any failure is theirs to see, in one line
        raise MutantError(f"cannot load mutants module {module_name!r}: {type(error).__name__}: {error}") from None
    mutants = getattr(module, "MUTANTS", None)
    if not isinstance(mutants, (list, tuple)) or not mutants:
        raise MutantError(f"mutants module {module_name!r} has no MUTANTS: expected a non-empty list of Mutant")
    return tuple(_index(mutants, f"mutants module {module_name!r}").values())
