"""Secrets by handle and sealed fields: what the stores and the trace hold of a secret.

``no-secret-leak``: no secret value reaches the trace or the stores, and no
digest over a secret can be recomputed by guessing it. The secret values
(every version of every handle) are the secrets workload's own (it owns the
secret store, as the tool service owns its history); the stores are read
through the audit view only.

- Online, every trace event (every kind: a describer that records a
  resolved value, a tool that echoes its credential) is searched in its
  JSON text. A value of 16 characters or more is searched as a substring;
  a shorter one (a 4-digit PIN) only as a whole string value, quoted,
  since its digits occur inside any long number.
- At the audit, for every conversation: each log record's text and the
  plaintext of each of its sealed fields (opened by the reference,
  ``scenarios.reference.envelope``), the latest checkpoint and the ledger
  rows. A prepared tool call's ``fingerprint`` must not be the plain sha256
  of its arguments with each secret reference replaced by a value of that
  secret (any version): such a digest is guessable, a low-entropy secret in
  a few thousand tries; it must be keyed.

``credentials-accepted``: online, every call that reached a tool or the
model provider carried the credential the service expects (the secret's
current value, or the one a rotation just replaced): a refusal
(``CredentialRejected``) is a caller that sent a reference unresolved, a
stale value or none.

``sealed-under-live-key``: at the audit, every sensitive field of every
record (the families and fields below, this module's own copy of the
schema's table) is a sealed envelope; the data key it names has a row in
the keyring store (read from the store); that row's key-encryption key is
not retired in the key service; and the field opens, under the data key
unwrapped from the row, to JSON. A field under a retired key would fail
closed on the next read: the rotation that retired the key left it behind.

Memory: the compiled pattern of the secret values (rebuilt when a secret
gets a new version) and, at the audit, the unwrapped data keys.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable, Iterator, Protocol

import attrs

from faults.events import ToolInvoke
from scenarios.reference.envelope import (SealedFieldUnopenable, field_aad, is_sealed, kek_material, open_field,
                                          open_field_text, unkeyed_digest, unwrap_data_key)
from scenarios.reference.jcs import JcsError
from sim.invariants import Checker

# The schema's sensitive fields, by (family, payload phase or None): what is
# sealed in a record. Written here apart from the model's table.
SENSITIVE_FIELDS: dict[tuple[str, str | None], tuple[str, ...]] = {
    ("tool-call", "requested"): ("args",),
    ("tool-call", "prepared"): ("args",),
    ("tool-call", "settled"): ("output",),
    ("model-delta", None): ("text",),
    ("model-completed", None): ("text",),
}
SECRET_REF = "$secret"
# A value at least this long is searched as a substring; a shorter one only
# as a whole quoted string.
SUBSTRING_MIN = 16


def sensitive_fields(family: str, payload: Any) -> tuple[str, ...]:
    phase = payload.get("phase") if type(payload) is dict else None
    return SENSITIVE_FIELDS.get((family, phase if type(phase) is str else None), ())


class SecretsWitness(Protocol):
    """What the oracles read of the secrets workload: the values it put in
    the secret store, the key service's root and when each key was retired."""

    values_revision: int

    def versions_by_handle(self) -> dict[str, tuple[str, ...]]: ...

    def key_root(self) -> bytes: ...

    def retired_at_ms(self) -> dict[str, int]: ...


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr)


def _plain(value: Any) -> Any:
    return attrs.asdict(value, recurse=True) if attrs.has(type(value)) else value


class _SecretPattern:
    """The secret values as one search, rebuilt when one gets a new version."""

    def __init__(self, witness: SecretsWitness) -> None:
        self._witness = witness
        self._revision = -1
        self._regex: re.Pattern | None = None
        self._names: dict[str, str] = {}  # value -> "handle (version n)"

    def _compile(self) -> None:
        self._revision = self._witness.values_revision
        names, alternatives = {}, []
        for handle, versions in sorted(self._witness.versions_by_handle().items()):
            for n, value in enumerate(versions, 1):
                names[value] = f"{handle!r} (version {n})"
                escaped = re.escape(value)
                alternatives.append(escaped if len(value) >= SUBSTRING_MIN else f"(?<=[\"']){escaped}(?=[\"'])")
        self._names = names
        # Longest first: a value inside another is named as the longer one.
        alternatives.sort(key=len, reverse=True)
        self._regex = re.compile("|".join(alternatives)) if alternatives else None

    def find(self, text: str) -> str | None:
        """The secret (by handle and version, never its value) ``text`` holds, or None."""
        if self._revision != self._witness.values_revision:
            self._compile()
        if self._regex is None:
            return None
        found = self._regex.search(text)
        return None if found is None else self._names[found.group(0)]


class _KeyringReader:
    """Opens sealed fields with the data keys the keyring store holds,
    unwrapped by the reference under key-encryption keys derived from the
    key service's root."""

    def __init__(self, view: Any, witness: SecretsWitness) -> None:
        self.rows = {row.dek_id: row for row in view.keyring_rows()}
        self._root = witness.key_root()
        self._data_keys: dict[str, bytes] = {}

    def data_key(self, dek_id: Any, where: str) -> bytes:
        row = self.rows.get(dek_id) if type(dek_id) is str else None
        if row is None:
            raise SealedFieldUnopenable(where, f"its data key {dek_id!r} has no row in the keyring")
        key = self._data_keys.get(dek_id)
        if key is None:
            key = self._data_keys[dek_id] = unwrap_data_key(kek_material(self._root, row.key_id), row.key_id,
                                                            row.wrapped)
        return key


def records_with_index(view: Any, conversation_id: str) -> Iterator[tuple[Any, int]]:
    """Each log record of the conversation with its index in its batch."""
    previous, index = None, 0
    for record in view.log_records(conversation_id):
        index = index + 1 if record.batch_id == previous else 0
        previous = record.batch_id
        yield record, index


def _where(record: Any, field: str) -> str:
    return f"{record.conversation_id} seq {record.seq} ({record.envelope.family} {record.envelope.record_id!r}).{field}"


def _resolved(value: Any, choose: dict[str, str]) -> Any:
    """``value`` with each secret reference replaced by ``choose[handle]``."""
    if type(value) is dict:
        if set(value) == {SECRET_REF} and value[SECRET_REF] in choose:
            return choose[value[SECRET_REF]]
        return {k: _resolved(v, choose) for k, v in value.items()}
    if type(value) is list:
        return [_resolved(v, choose) for v in value]
    return value


def _handles(value: Any) -> list[str]:
    found: set[str] = set()

    def walk(v: Any) -> None:
        if type(v) is dict:
            if set(v) == {SECRET_REF} and type(v[SECRET_REF]) is str:
                found.add(v[SECRET_REF])
            for item in v.values():
                walk(item)
        elif type(v) is list:
            for item in v:
                walk(item)

    walk(value)
    return sorted(found)


def _choices(handles: list[str], values: dict[str, tuple[str, ...]]) -> Iterable[dict[str, str]]:
    """Every assignment of a version to each handle (a call names one or two secrets)."""
    choices: list[dict[str, str]] = [{}]
    for handle in handles:
        choices = [{**c, handle: v} for c in choices for v in values.get(handle, ())]
    return choices


class NoSecretLeak(Checker):
    """``no-secret-leak``: no secret value (any version) is in a traced event,
    a log record (its sealed fields opened), a checkpoint or a ledger row, and
    no prepared tool call's fingerprint is the plain digest of its arguments
    with the secret resolved."""

    name = "no-secret-leak"

    def __init__(self, secrets: SecretsWitness) -> None:
        super().__init__()
        self.secrets = secrets
        self._pattern = _SecretPattern(secrets)
        self._failed_kinds: set[str] = set()  # one violation per event kind (a leak repeats)
        self.fingerprints_checked = 0

    def attach(self, trace: Any, clock: Any, sink: Any, view: Any = None) -> None:
        super().attach(trace, clock, sink, view)
        trace.subscribe(None, self.on_event)  # every kind: a leak can be in any event

    def metrics(self) -> dict[str, Any]:
        return {"secret_fingerprints_checked": self.fingerprints_checked}

    def on_event(self, event: Any) -> None:
        self.checks += 1
        found = self._pattern.find(_text(event.fields))
        if found is not None and event.kind not in self._failed_kinds:
            self._failed_kinds.add(event.kind)
            self.fail(f"the value of secret {found} is in a traced {event.kind} event (seq {event.seq})",
                      (event.kind,))

    def audit(self, view: Any) -> None:
        reader = _KeyringReader(view, self.secrets)
        values = self.secrets.versions_by_handle()
        for conversation_id in view.conversation_ids():
            for record, index in records_with_index(view, conversation_id):
                self._judge_text(_text(record.envelope.to_json()), f"{_where(record, 'envelope')}")
                payload = record.envelope.payload
                for field in sensitive_fields(record.envelope.family, payload):
                    self._judge_sealed(reader, record, index, field, payload, values)
            checkpoint = view.latest_checkpoint(conversation_id)
            if checkpoint is not None:
                self._judge_text(_text(_plain(checkpoint)), f"{conversation_id}'s latest checkpoint")
            for row in view.submissions(conversation_id):
                self._judge_text(_text(_plain(row)), f"the ledger row of {row.submission_id}")

    audit_retiring = audit

    def _judge_text(self, text: str, where: str) -> None:
        self.checks += 1
        found = self._pattern.find(text)
        if found is not None:
            self.fail(f"the value of secret {found} is in {where}", (where,))

    def _judge_sealed(self, reader: _KeyringReader, record: Any, index: int, field: str, payload: dict,
                      values: dict[str, tuple[str, ...]]) -> None:
        sealed = payload.get(field)
        if not is_sealed(sealed):
            return  # sealed-under-live-key's finding; its text was searched with the record's
        where = _where(record, field)
        envelope = record.envelope
        aad = field_aad(record.conversation_id, record.batch_id, index, envelope.family, field)
        try:
            text = open_field_text(reader.data_key(sealed["dataKeyId"], where), sealed, aad, where=where)
        except SealedFieldUnopenable:
            return  # sealed-under-live-key's finding
        self._judge_text(text, f"the sealed {where}")
        fingerprint = payload.get("fingerprint")
        if envelope.family != "tool-call" or payload.get("phase") != "prepared" or type(fingerprint) is not str:
            return
        self.checks += 1
        self.fingerprints_checked += 1
        try:
            args = json.loads(text)
            for choice in _choices(_handles(args), values):
                if choice and unkeyed_digest(_resolved(args, choice)) in fingerprint:
                    self.fail(f"{where}: its fingerprint is the plain sha256 of the arguments with the secret "
                              f"{sorted(choice)} resolved (guessable: it must be keyed)", (where,))
                    return
        except (ValueError, JcsError):
            return


class CredentialsAccepted(Checker):
    """``credentials-accepted``: no tool or model call was refused for its
    credential (sent unresolved, stale or missing)."""

    name = "credentials-accepted"
    REFUSAL = "CredentialRejected"

    def __init__(self) -> None:
        super().__init__()
        # Imported here: the agents' workload module imports the invariants.
        from scenarios.workloads.agents import ModelStream

        self.kinds = (ToolInvoke.kind, ModelStream.kind)

    def on_event(self, event: Any) -> None:
        # ``tools.invoke`` and ``model.stream`` name the call and the error alike.
        self.checks += 1
        fields = event.fields
        if fields.get(ToolInvoke.error) == self.REFUSAL:
            self.fail(f"{fields.get(ToolInvoke.call)}: {fields.get(ToolInvoke.detail)}",
                      (str(fields.get(ToolInvoke.call)),))


class SealedUnderLiveKey(Checker):
    """``sealed-under-live-key``: every sensitive field of every record is
    sealed, names a data key the keyring holds under a key-encryption key
    that is not retired, and opens under it."""

    name = "sealed-under-live-key"

    def __init__(self, secrets: SecretsWitness) -> None:
        super().__init__()
        self.secrets = secrets
        self.fields_opened = 0

    def metrics(self) -> dict[str, Any]:
        return {"sealed_fields_opened": self.fields_opened}

    def audit(self, view: Any) -> None:
        reader = _KeyringReader(view, self.secrets)
        retired = self.secrets.retired_at_ms()
        for conversation_id in view.conversation_ids():
            for record, index in records_with_index(view, conversation_id):
                payload = record.envelope.payload
                for field in sensitive_fields(record.envelope.family, payload):
                    if field in payload:
                        self._judge(reader, retired, record, index, field, payload[field])

    audit_retiring = audit

    def _judge(self, reader: _KeyringReader, retired: dict[str, int], record: Any, index: int, field: str,
               sealed: Any) -> None:
        self.checks += 1
        where = _where(record, field)
        if not is_sealed(sealed):
            self.fail(f"{where}: a sensitive field stored unsealed", (record.conversation_id,))
            return
        row = reader.rows.get(sealed["dataKeyId"])
        if row is None:
            self.fail(f"{where}: its data key {sealed['dataKeyId']!r} has no row in the keyring",
                      (record.conversation_id,))
            return
        if row.key_id in retired:
            self.fail(f"{where}: its data key {row.dek_id!r} is wrapped under {row.key_id}, retired at "
                      f"{retired[row.key_id]} ms (the rotation left it behind: it no longer opens)",
                      (record.conversation_id, row.dek_id))
            return
        aad = field_aad(record.conversation_id, record.batch_id, index, record.envelope.family, field)
        try:
            open_field(reader.data_key(row.dek_id, where), sealed, aad, where=where)
        except SealedFieldUnopenable as error:
            self.fail(f"{where}: does not open ({error.problem})", (record.conversation_id,))
            return
        self.fields_opened += 1


class SealedFieldOpener:
    """Opens a sealed field an oracle meets online, in a traced append (the
    oracles that compare what a record holds, such as the tool's result in
    a settled call): ``opener(view, conversation, batch, index, family,
    field, value)`` is the value, opened by the reference when it is sealed,
    else as it is. The data key comes from the keyring store read through
    the audit view; unwrapped keys are kept (the oldest dropped past
    ``KEYS_MAX``: a re-read is all it costs). ``SealedFieldUnopenable`` when
    it does not open (``sealed-under-live-key`` says why at the audit)."""

    KEYS_MAX = 256

    def __init__(self, secrets: SecretsWitness) -> None:
        self.secrets = secrets
        self._keys: dict[str, bytes] = {}

    def __call__(self, view: Any, conversation_id: str, batch_id: str, index: int, family: str, field: str,
                 value: Any) -> Any:
        if not is_sealed(value):
            return value
        where = f"{conversation_id} {batch_id}[{index}].{field}"
        dek_id = value["dataKeyId"]
        key = self._keys.get(dek_id)
        if key is None:
            row = next((row for row in view.keyring_rows() if row.dek_id == dek_id), None)
            if row is None:
                raise SealedFieldUnopenable(where, f"its data key {dek_id!r} has no row in the keyring")
            key = unwrap_data_key(kek_material(self.secrets.key_root(), row.key_id), row.key_id, row.wrapped)
            self._keys[dek_id] = key
            if len(self._keys) > self.KEYS_MAX:
                del self._keys[next(iter(self._keys))]
        return open_field(key, value, field_aad(conversation_id, batch_id, index, family, field), where=where)
