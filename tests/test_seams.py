"""The engine's world holds the layers above it in typed slots, and each
slot's protocol (``sim/seams.py``) declares every call made through it.

Read from the source (there is no type checker in the loop): the world's
slots, the protocols' members, and every attribute the code reads through
a slot — ``world.system.ports_for``, ``self.world.plan.drive``, a local
bound to a slot (``plan = world.plan if faults else None``), a parameter
annotated with a protocol and the ``self`` attribute it is kept in.
"""
from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where calls through the world's slots are made (every module below them).
CALLERS = ("sim", "faults", "scenarios")
SEAMS = os.path.join(ROOT, "sim", "seams.py")
WORLD = os.path.join(ROOT, "sim", "world.py")


def _parse(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def protocol_members() -> dict[str, set[str]]:
    """Each protocol of ``sim/seams.py`` -> the names it declares."""
    members = {}
    for cls in (n for n in _parse(SEAMS).body if isinstance(n, ast.ClassDef)):
        names = set()
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(item.name)
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names.add(item.target.id)
        members[cls.name] = names
    return members


def _world_slots() -> dict[str, ast.expr | None]:
    """World's instance slots (``self.x = ...`` in ``__init__``) -> annotation (None: unannotated;
    the string ``"None"``: unannotated and set to None, a slot whose type nothing says)."""
    init = next(n for n in _class(_parse(WORLD), "World").body
                if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    slots: dict[str, ast.expr | None] = {}
    for node in ast.walk(init):
        if isinstance(node, ast.AnnAssign):
            target, annotation = node.target, node.annotation
            targets = [target]
        elif isinstance(node, ast.Assign):
            targets, annotation = node.targets, None
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                if annotation is not None or target.attr not in slots:
                    slots[target.attr] = annotation
                if annotation is None and isinstance(node.value, ast.Constant) and node.value.value is None:
                    slots[target.attr] = ast.Constant("None")
    return slots


def _protocol_of(annotation: ast.expr | None, protocols: set[str]) -> str | None:
    """``P`` or ``P | None`` with ``P`` a seam protocol -> ``P``."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = [annotation.left, annotation.right]
        sides = [s for s in sides if not (isinstance(s, ast.Constant) and s.value is None)]
        annotation = sides[0] if len(sides) == 1 else None
    if isinstance(annotation, ast.Name) and annotation.id in protocols:
        return annotation.id
    return None


def seam_slots() -> dict[str, str]:
    """World's slots typed by a seam protocol -> that protocol."""
    protocols = set(protocol_members())
    found = {}
    for slot, annotation in _world_slots().items():
        protocol = _protocol_of(annotation, protocols)
        if protocol is not None:
            found[slot] = protocol
    return found


def _is_world(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "world") or (
        isinstance(node, ast.Attribute) and node.attr in ("world", "_world"))


class _Calls:
    """The attributes read through the world's seam slots in one module."""

    def __init__(self, slots: dict[str, str], protocols: set[str]) -> None:
        self.slots = slots
        self.protocols = protocols
        self.found: set[tuple[str, str, int]] = set()  # (protocol, attribute, line)

    def module(self, tree: ast.Module) -> None:
        self._scope(tree, {}, {})

    def _tracked(self, node: ast.expr, names: dict[str, str], kept: dict[str, str]) -> str | None:
        """The protocol an expression's value has, if it comes through a slot."""
        if isinstance(node, ast.Attribute):
            if node.attr in self.slots and _is_world(node.value):
                return self.slots[node.attr]
            if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in kept:
                return kept[node.attr]
        if isinstance(node, ast.Name):
            return names.get(node.id)
        if isinstance(node, ast.IfExp):
            return self._tracked(node.body, names, kept) or self._tracked(node.orelse, names, kept)
        return None

    def _scope(self, scope: ast.AST, outer: dict[str, str], kept: dict[str, str]) -> None:
        names = dict(outer)
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = scope.args
            for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
                protocol = _protocol_of(arg.annotation, self.protocols)
                if protocol is not None:
                    names[arg.arg] = protocol
        if isinstance(scope, ast.ClassDef):
            kept = dict(kept)
            kept.update(self._kept_by(scope))
        body = list(ast.iter_child_nodes(scope))
        # Bindings first (in source order), then the reads they make tracked.
        for node in self._walk_local(body):
            if isinstance(node, ast.Assign):
                protocol = self._tracked(node.value, names, kept) or next(
                    (self._tracked(t, names, kept) for t in node.targets if self._tracked(t, names, kept)), None)
                if protocol is not None:
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            names[target.id] = protocol
        for node in self._walk_local(body):
            if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
                protocol = self._tracked(node.value, names, kept)
                if protocol is not None:
                    self.found.add((protocol, node.attr, node.lineno))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                  and isinstance(node.args[1], ast.Constant)):
                protocol = self._tracked(node.args[0], names, kept)
                if protocol is not None:
                    self.found.add((protocol, node.args[1].value, node.lineno))
        for node in self._walk_local(body, scopes=True):
            self._scope(node, names, kept)

    def _kept_by(self, cls: ast.ClassDef) -> dict[str, str]:
        """``self.x = param`` in a method, the parameter annotated with a protocol."""
        kept = {}
        for method in cls.body:
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = method.args
            params = {a.arg: p for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
                      if (p := _protocol_of(a.annotation, self.protocols)) is not None}
            for node in ast.walk(method):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in params:
                    for target in node.targets:
                        if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                                and target.value.id == "self"):
                            kept[target.attr] = params[node.value.id]
        return kept

    @staticmethod
    def _walk_local(nodes, *, scopes: bool = False):
        """The nodes of one scope (a nested def or class is its own scope;
        a lambda or comprehension reads its enclosing scope's names)."""
        stack = list(reversed(nodes))
        while stack:
            node = stack.pop()
            nested = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            if nested:
                if scopes:
                    yield node
                continue
            if not scopes:
                yield node
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def calls_through_slots(source: str, slots: dict[str, str] | None = None) -> set[tuple[str, str, int]]:
    members = protocol_members()
    calls = _Calls(seam_slots() if slots is None else slots, set(members))
    calls.module(ast.parse(source))
    return calls.found


def _callers():
    for folder in CALLERS:
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in sorted(files):
                path = os.path.join(directory, name)
                if name.endswith(".py") and path != SEAMS:
                    yield os.path.relpath(path, ROOT), path


def test_no_slot_of_the_world_is_untyped():
    untyped = []
    for slot, annotation in _world_slots().items():
        if annotation is None:
            continue  # a slot given a value its type follows from (0, a Node, a dict literal...)
        if isinstance(annotation, ast.Constant) and annotation.value == "None":
            untyped.append(f"{slot} = None, unannotated")
        elif any(isinstance(n, ast.Name) and n.id == "Any" for n in ast.walk(annotation)):
            untyped.append(f"{slot}: {ast.unparse(annotation)}")
    assert not untyped, untyped


def test_the_layers_above_the_engine_sit_in_slots_typed_by_their_protocols():
    assert seam_slots() == {"plan": "PlanSeam", "system": "SystemSeam", "boundaries": "BoundariesSeam",
                            "clocks": "ClocksSeam"}


def test_every_call_through_a_slot_is_declared_by_its_protocol():
    members = protocol_members()
    slots = seam_slots()
    undeclared = []
    seen = set()
    for rel, path in _callers():
        with open(path, encoding="utf-8") as f:
            found = calls_through_slots(f.read(), slots)
        for protocol, attribute, line in sorted(found):
            seen.add((protocol, attribute))
            if attribute not in members[protocol]:
                undeclared.append(f"{rel}:{line}: {protocol}.{attribute}")
    assert not undeclared, undeclared
    # The scan reaches the calls it is there for (a scan that finds nothing passes nothing).
    assert {("SystemSeam", "ports_for"), ("PlanSeam", "drive"), ("PlanSeam", "draw"),
            ("BoundariesSeam", "delay_ms"), ("SystemSeam", "open")} <= seen, sorted(seen)


def test_the_scan_finds_a_call_however_the_slot_is_reached():
    source = '''
def direct(world):
    world.system.frobnicate()
    getattr(world.plan, "unheard_of", None)

class W:
    def via_alias(self):
        plan = self.world.plan if self.on else None
        plan.sideways()
        system = world.system = make()
        system.opened()

class Port:
    def __init__(self, plan: PlanSeam | None) -> None:
        self._plan = plan

    def call(self):
        plan = self._plan
        return lambda: plan.kept_and_aliased()
'''
    found = {(p, a) for p, a, _ in calls_through_slots(source, {"plan": "PlanSeam", "system": "SystemSeam"})}
    assert found == {("SystemSeam", "frobnicate"), ("PlanSeam", "unheard_of"), ("PlanSeam", "sideways"),
                     ("SystemSeam", "opened"), ("PlanSeam", "kept_and_aliased")}
