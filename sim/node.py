"""Nodes: the unit of failure.

A node is a simulated worker process: it owns tasks and in-memory state.
``SimRuntime.crash_node`` kills every task of a node at one instant; from then
on ``alive`` is False, and every port bound to the node refuses calls
(``NodeDeadError``) — including calls from the dying tasks' ``finally``
blocks. A restart is a *new* ``Node`` (next incarnation) that knows only what
the durable stores hold.
"""
from __future__ import annotations


class NodeCrashed(BaseException):
    """Unwinds the task that was running when its node crashed.

    A ``BaseException`` on purpose: model code's ``except Exception`` must not
    be able to swallow a process death.
    """

    def __init__(self, node_name: str) -> None:
        super().__init__(node_name)
        self.node_name = node_name


class NodeDeadError(Exception):
    """A port call from a node that has crashed. Nothing reaches the store."""

    def __init__(self, node_name: str, port: str) -> None:
        super().__init__(f"{port}: refused call from dead node {node_name}")
        self.node_name = node_name
        self.port = port


class Node:
    __slots__ = ("name", "role", "incarnation", "alive", "tasks", "paused_until_ms")

    def __init__(self, name: str, role: str = "worker", incarnation: int = 1) -> None:
        assert incarnation >= 1
        self.name = name
        self.role = role
        self.incarnation = incarnation
        self.alive = True
        # Insertion-ordered (a dict used as an ordered set): a crash closes
        # tasks in spawn order, never in hash or id order.
        self.tasks: dict = {}
        self.paused_until_ms = 0

    @property
    def label(self) -> str:
        return self.name if self.incarnation == 1 else f"{self.name}#{self.incarnation}"

    def __repr__(self) -> str:
        state = "alive" if self.alive else "dead"
        return f"<Node {self.label} {state} tasks={len(self.tasks)}>"
