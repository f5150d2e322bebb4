"""A run's result never carries a secret: the runner's last step.

A workload that handles secrets declares their values
(``Workload.secret_values``: label -> value, every version it handed
out). Before the result leaves ``sim.runner.run``, ``Redactor`` walks
everything the result holds that an artifact prints (violation messages,
the failure's related trace events, stats, the fault script, the config,
coverage, the timeline) and replaces each value found by
``[secret: LABEL]``; the runner then fails the run with
``no-secret-in-verdict``, naming where each one was (never the value).

What counts as found: a text equal to the value; for a value of at least
``SUBSTRING_MIN`` characters, any occurrence inside a text (also in its
JSON-escaped form); for a shorter one (a 4-digit PIN), only a quoted token
inside a text (``"4821"`` as JSON writes it, ``'4821'`` as ``repr``
does), so that a short value never matches inside a digest, a hex id or
a timestamp. Numbers are never judged: a count is not a PIN.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

import attrs

NO_SECRET_IN_VERDICT = "no-secret-in-verdict"
SUBSTRING_MIN = 8  # a value this long may be matched inside any text
PLACES_SHOWN = 4  # places a violation names per secret before "and N more"


def collect_secret_values(workloads: Iterable[Any]) -> dict[str, str]:
    """Every workload's declared secrets, label -> value (only non-empty
    str values). A label two workloads give to different values keeps the
    first; the second is labelled with its workload's name too."""
    found: dict[str, str] = {}
    for workload in workloads:
        declared = workload.secret_values()
        for label, value in sorted(declared.items()):
            if type(label) is not str or type(value) is not str or not value:
                continue
            if found.get(label, value) != value:
                label = f"{label} [{workload.name}]"
            found[label] = value
    return found


class Redactor:
    """Replaces declared secret values in plain data; remembers where."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        # Longest first: a value that contains another is replaced whole.
        self._secrets = sorted(secrets.items(), key=lambda item: (-len(item[1]), item[0]))
        self.found: dict[str, list[str]] = {}  # label -> places, in walking order

    def _hit(self, label: str, where: str) -> None:
        places = self.found.setdefault(label, [])
        if where not in places:
            places.append(where)

    def text(self, text: str, where: str) -> str:
        for label, value in self._secrets:
            mark = f"[secret: {label}]"
            if text == value:
                self._hit(label, where)
                return mark
            if len(value) >= SUBSTRING_MIN:
                pairs = [(value, mark)]
                escaped = json.dumps(value)[1:-1]
                if escaped != value:
                    pairs.append((escaped, mark))
            else:
                pairs = [(json.dumps(value), json.dumps(mark)), (repr(value), repr(mark))]
            for needle, replacement in pairs:
                if needle in text:
                    self._hit(label, where)
                    text = text.replace(needle, replacement)
        return text

    def walk(self, value: Any, where: str) -> Any:
        """``value`` with every secret replaced; the same object when none was."""
        if type(value) is str:
            return self.text(value, where)
        if isinstance(value, dict):
            out, changed = {}, False
            for key, item in value.items():
                new_key = self.walk(key, f"{where} (a key)")
                new_item = self.walk(item, f"{where}.{new_key}")
                changed = changed or new_key is not key or new_item is not item
                out[new_key] = new_item
            return out if changed else value
        if isinstance(value, (list, tuple)):
            names = getattr(value, "_fields", None)  # a named tuple (a trace event): by its field names
            items = [self.walk(item, f"{where}.{names[i]}" if names else f"{where}[{i}]")
                     for i, item in enumerate(value)]
            if all(new is old for new, old in zip(items, value)):
                return value
            if names:
                return type(value)(*items)
            return items if isinstance(value, list) else type(value)(items)
        if attrs.has(type(value)):
            changes = {}
            for field in attrs.fields(type(value)):
                if not field.init:
                    continue
                old = getattr(value, field.name)
                new = self.walk(old, f"{where}.{field.name}")
                if new is not old:
                    changes[field.name] = new
            return attrs.evolve(value, **changes) if changes else value
        return value

    def summary(self) -> str:
        """One line naming each secret found and where (never its value)."""
        parts = []
        for label, places in self.found.items():
            more = f" and {len(places) - PLACES_SHOWN} more" if len(places) > PLACES_SHOWN else ""
            parts.append(f"{label} in {', '.join(places[:PLACES_SHOWN])}{more}")
        return ("the run's result carried a declared secret value (replaced by [secret: LABEL]): "
                + "; ".join(parts))
