"""The secrets an application uses, the key service and a key rotator.

``Secrets`` owns, outside every process (they survive crashes, as the tool
service does):

- the secret store (``model.secrets.store.InMemorySecretStore``): the
  handles ``search-api-key`` and ``model-api-key`` (32 hex characters) and
  ``email-pin`` (4 digits: a low-entropy secret, what a digest over it must
  not make guessable), each value drawn from a stream of its own handle
  (``values/<handle>``). An operator puts a new version of one of them every
  ``secret_every_ms`` (drawn), so a run's records are written under several;
- the key service (``model.secrets.keys.SimulatedKeyService``), its root
  drawn per run.

Each process reaches them through ``BoundPort`` (traced, under the run's
port faults: the sites ``keys.<method>`` and ``secrets.<method>``). Their
describers record handles, key ids and lengths, never a resolved value or a
plaintext data key. The keyring is a store of the run (``System(keyring=True)``,
the sites ``keyring.<method>``).

A ``key-rotator`` process rotates the key-encryption key every
``rotate_every_ms`` (drawn per rotation): rotation ``rotation-N`` to
``kek-{N+1}`` (``model.secrets.rotation.rotate_keys``: the new key current,
every data key re-wrapped, the old key retired). The schedule is the
operator's (it outlives the process): a rotator killed half way resumes the
unfinished rotation first when it restarts, and one whose call failed
retryably resumes it after ``retry_ms``.

``agent_secrets(node, ports)`` is what an agent process gets: a sealer over
its bindings of the key service and the keyring, its binding of the secret
store, the deployment's digest key and the handles of its credentials.

Its checks (``scenarios.invariants.secrets``): ``no-secret-leak`` and
``sealed-under-live-key``, which learn the secret values, the key service's
root and its retirements from this workload, and ``credentials-accepted``.
"""
from __future__ import annotations

from typing import Any

from faults.events import OPTIONAL, KeyringGet, KeyringRewrap, LedgerAdmit, ProbeEvent
from faults.ports import BoundPort, PortStats
from model.retry import error_name, is_retryable
from model.secrets.keys import SimulatedKeyService
from model.secrets.rotation import rotate_keys
from model.secrets.envelope import Sealer
from model.secrets.store import InMemorySecretStore
from model.secrets.transcript import open_transcript
from sim.node import Node
from sim.workload import StackError, Workload
from sim.world import World

KEYS_PORT, SECRETS_PORT = "keys", "secrets"
SEARCH_KEY, MODEL_KEY, EMAIL_PIN = "search-api-key", "model-api-key", "email-pin"
HANDLES = (EMAIL_PIN, MODEL_KEY, SEARCH_KEY)
LOW_ENTROPY = (EMAIL_PIN,)
TOOL_CREDENTIALS = {"search": SEARCH_KEY, "send-email": EMAIL_PIN}
MODEL_CREDENTIAL = MODEL_KEY
ROTATOR = "key-rotator"
# A person reading a conversation back (a transcript shown, a run replayed)
# every few minutes: it opens fields sealed before the rotations since.
READER = "transcript-reader"
READ_EVERY_MS = (2 * 60_000, 15 * 60_000)
TRANSCRIPT_READS_MAX = 1_000_000
READABLE_MAX = 32  # the conversations a reader picks from: the latest admitted
ROTATIONS_MAX = 100_000  # a rotation every 20 minutes at least: a year is 26,280
SECRET_VERSIONS_MAX = 100_000


def _hex(stream: Any, n_bytes: int) -> str:
    words = [stream.next_u64().to_bytes(8, "big") for _ in range((n_bytes + 7) // 8)]
    return b"".join(words)[:n_bytes].hex()


def _bytes(stream: Any, n_bytes: int) -> bytes:
    return bytes.fromhex(_hex(stream, n_bytes))


# -- what the ports trace ----------------------------------------------------------

class KeysCurrent(ProbeEvent):
    """``keys.current``: the current key-encryption key's id."""

    kind = "keys.current"
    key_id: str = OPTIONAL
    error: str = OPTIONAL
    detail: str = OPTIONAL


class KeysGenerateDataKey(ProbeEvent):
    """``keys.generate_data_key``: a new data key under ``key_id``: its length
    and its wrapped text's, never the key."""

    kind = "keys.generate_data_key"
    key_id: str
    length: int = OPTIONAL
    wrapped_length: int = OPTIONAL
    error: str = OPTIONAL
    detail: str = OPTIONAL


class KeysUnwrap(ProbeEvent):
    """``keys.unwrap``: a data key unwrapped under ``key_id`` (lengths only)."""

    kind = "keys.unwrap"
    key_id: str
    wrapped_length: int
    length: int = OPTIONAL
    error: str = OPTIONAL
    detail: str = OPTIONAL


class KeysWrap(ProbeEvent):
    """``keys.wrap``: a data key wrapped under ``key_id`` (lengths only)."""

    kind = "keys.wrap"
    key_id: str
    length: int
    wrapped_length: int = OPTIONAL
    error: str = OPTIONAL
    detail: str = OPTIONAL


class KeysRotate(ProbeEvent):
    """``keys.rotate``: ``key_id`` made current."""

    kind = "keys.rotate"
    key_id: str
    error: str = OPTIONAL
    detail: str = OPTIONAL


class KeysRetire(ProbeEvent):
    """``keys.retire``: ``key_id`` retired."""

    kind = "keys.retire"
    key_id: str
    error: str = OPTIONAL
    detail: str = OPTIONAL


class KeysState(ProbeEvent):
    """``keys.state``: ``key_id``'s state."""

    kind = "keys.state"
    key_id: str
    state: str = OPTIONAL
    error: str = OPTIONAL
    detail: str = OPTIONAL


class SecretsResolve(ProbeEvent):
    """``secrets.resolve``: a secret resolved by handle: the value's length, never the value."""

    kind = "secrets.resolve"
    handle: str
    length: int = OPTIONAL
    error: str = OPTIONAL
    detail: str = OPTIONAL


class SecretsVersion(ProbeEvent):
    """``secrets.version``: a secret's current version number."""

    kind = "secrets.version"
    handle: str
    version: int = OPTIONAL
    error: str = OPTIONAL
    detail: str = OPTIONAL


class SecretPut(ProbeEvent):
    """``secrets.put``: the operator put a new version of a secret (its handle and number)."""

    kind = "secrets.put"
    handle: str
    version: int


class KeyRotation(ProbeEvent):
    """``keys.rotation``: the rotator began (``resumed``: again, after a kill or
    a failed call) or finished a rotation pass."""

    kind = "keys.rotation"
    rotation: str
    phase: str
    to_key_id: str = OPTIONAL
    error: str = OPTIONAL


def _arg(args: tuple, kwargs: dict, i: int, name: str) -> Any:
    return args[i] if len(args) > i else kwargs.get(name)


def _keys_describer(method: str) -> Any:
    def describe(args: tuple, kwargs: dict, result: Any) -> dict:
        fields: dict[str, Any] = {}
        if method == "rotate":
            fields["key_id"] = _arg(args, kwargs, 0, "new_key_id")
        elif method != "current":
            fields["key_id"] = _arg(args, kwargs, 0, "key_id")
        if method == "unwrap":
            wrapped = _arg(args, kwargs, 1, "wrapped")
            fields[KeysUnwrap.wrapped_length] = len(wrapped) if isinstance(wrapped, str) else -1
        elif method == "wrap":
            plaintext = _arg(args, kwargs, 1, "plaintext")
            fields[KeysWrap.length] = len(plaintext) if isinstance(plaintext, (bytes, bytearray)) else -1
        if result is None:
            return fields
        if method == "current":
            fields[KeysCurrent.key_id] = result
        elif method == "generate_data_key":
            fields[KeysGenerateDataKey.length] = len(result[0])
            fields[KeysGenerateDataKey.wrapped_length] = len(result[1])
        elif method == "unwrap":
            fields[KeysUnwrap.length] = len(result)
        elif method == "wrap":
            fields[KeysWrap.wrapped_length] = len(result)
        elif method == "state":
            fields[KeysState.state] = result
        return fields

    return describe


def _secrets_describer(method: str) -> Any:
    def describe(args: tuple, kwargs: dict, result: Any) -> dict:
        fields: dict[str, Any] = {SecretsResolve.handle: _arg(args, kwargs, 0, "handle")}
        if result is not None:
            if method == "resolve":
                fields[SecretsResolve.length] = len(result)
            else:
                fields[SecretsVersion.version] = result
        return fields

    return describe


KEYS_METHODS = ("current", "generate_data_key", "unwrap", "wrap", "rotate", "retire", "state")
SECRETS_METHODS = ("resolve", "version")
KEYS_DESCRIBERS = {method: _keys_describer(method) for method in KEYS_METHODS}
SECRETS_DESCRIBERS = {method: _secrets_describer(method) for method in SECRETS_METHODS}
PORT_SITES = tuple(f"{KEYS_PORT}.{m}" for m in KEYS_METHODS) + tuple(f"{SECRETS_PORT}.{m}" for m in SECRETS_METHODS)


class Secrets(Workload):
    """Secret values, the key service and the key rotator (see the module doc)."""

    name = "secrets"

    def __init__(self, *, rotate_every_ms: tuple[int, int] = (20 * 60_000, 3 * 3_600_000),
                 secret_every_ms: tuple[int, int] = (2 * 3_600_000, 6 * 3_600_000), page: int = 4,
                 retry_ms: int = 2_000) -> None:
        assert 0 < rotate_every_ms[0] <= rotate_every_ms[1], rotate_every_ms
        assert 0 < secret_every_ms[0] <= secret_every_ms[1], secret_every_ms
        assert page >= 1 and retry_ms > 0, (page, retry_ms)
        self.rotate_every_ms = rotate_every_ms
        self.secret_every_ms = secret_every_ms
        self.page = page  # rows a rotation page re-wraps: small, so a pass has several pages to be killed between
        self.retry_ms = retry_ms
        self.values_revision = 0  # grows with every version put (the leak oracle recompiles its search)
        self.rotations_started = 0  # the operator's schedule: rotation-1 .. rotation-N begun
        self.rotations_done = 0
        self.rotations_resumed = 0  # passes a restarted rotator resumed (it was killed in them) and finished
        self.rotation_retries = 0  # passes called again after a retryable failure
        self.rewraps = 0
        self.transcripts_read = 0
        self.transcript_fields_opened = 0
        self.transcript_retries = 0
        self.sealed_reads_across_rotation = 0  # data keys a reader got after a rotation re-wrapped them
        self._readable: list[str] = []  # the latest admitted conversations (bounded: READABLE_MAX)
        self.secret_versions = 0
        # Outside every process; empty until ``setup`` draws the values (the
        # services that check a credential are given it at build).
        self.store = InMemorySecretStore()

    # -- what the oracles read ------------------------------------------------

    def versions_by_handle(self) -> dict[str, tuple[str, ...]]:
        return {handle: self.store.versions_of(handle) for handle in self.store.handles()}

    def secret_values(self) -> dict[str, str]:
        """Every version of every secret, labelled ``{handle} v{n}``: what the
        runner keeps out of the verdict (``sim.redact``)."""
        return {f"{handle} v{n}": value for handle, versions in self.versions_by_handle().items()
                for n, value in enumerate(versions, 1)}

    def key_root(self) -> bytes:
        return self._root

    def retired_at_ms(self) -> dict[str, int]:
        return dict(self.keys.retired_at_ms)

    def checks(self) -> list[Any]:
        from scenarios.invariants.secrets import CredentialsAccepted, NoSecretLeak, SealedUnderLiveKey

        return [NoSecretLeak(self), SealedUnderLiveKey(self), CredentialsAccepted()]

    def nodes(self) -> tuple[str, ...]:
        return (self.node_name(ROTATOR), self.node_name(READER))

    def port_sites(self) -> tuple[str, ...]:
        """The fault sites of the ports this workload binds (``describe`` lists them)."""
        return PORT_SITES

    # -- phases ---------------------------------------------------------------

    def setup(self, world: World) -> None:
        if not world.system.with_keyring:
            raise StackError(f"workload {self.name!r} needs a system with a keyring: System(keyring=True)")
        self.world = world
        self._value_streams = {handle: self.stream_for(world, f"values/{handle}") for handle in HANDLES}
        for handle in HANDLES:
            self._put(handle)
        self._root = _bytes(self.stream_for(world, "key-root"), 32)
        self.digest_key = _bytes(self.stream_for(world, "digest-key"), 32)
        self.keys = SimulatedKeyService(self._root, world.runtime.now_ms)
        world.trace.subscribe((KeyringRewrap.kind,), self._on_rewrap)
        world.add_node(self.node_name(ROTATOR), self._start_rotator, role="client")
        world.trace.subscribe((LedgerAdmit.kind,), self._on_admit)
        world.trace.subscribe((KeyringGet.kind,), self._on_data_key_read)
        world.add_node(self.node_name(READER), self._start_reader, role="client")

    def start(self, world: World) -> None:
        world.spawn_harness(f"{self.name}/secret-versions", self._put_versions())

    def metrics(self) -> dict[str, Any]:
        return {"key_rotations_started": self.rotations_started, "key_rotations_done": self.rotations_done,
                "key_rotations_resumed": self.rotations_resumed, "key_rotation_retries": self.rotation_retries,
                "data_keys_rewrapped": self.rewraps, "keys_retired": len(self.keys.retired_at_ms),
                "secret_versions": self.secret_versions, "transcripts_read": self.transcripts_read,
                "transcript_fields_opened": self.transcript_fields_opened,
                "transcript_retries": self.transcript_retries,
                "sealed_reads_across_rotation": self.sealed_reads_across_rotation}

    # -- the secret store -----------------------------------------------------

    def _put(self, handle: str) -> None:
        stream = self._value_streams[handle]
        value = f"{stream.below(10_000):04d}" if handle in LOW_ENTROPY else _hex(stream, 16)
        version = self.store.put(handle, value)
        self.values_revision += 1
        self.secret_versions += 1
        self.world.trace.emit(self.world.harness.label, SecretPut.kind, {SecretPut.handle: handle,
                                                                          SecretPut.version: version})

    async def _put_versions(self) -> None:
        runtime = self.world.runtime
        rng = self.stream_for(self.world, "secret-versions")
        for _ in range(SECRET_VERSIONS_MAX):
            await runtime.sleep_ms(rng.between(*self.secret_every_ms))
            self._put(rng.choice(HANDLES))

    def bind_keys(self, node: Node) -> Any:
        """The key service as ``node``'s process reaches it: traced, under the port faults."""
        return BoundPort(self.world, node, KEYS_PORT, self.keys, self.world.plan,
                         KEYS_DESCRIBERS, PortStats(), self.world.system.restart_delay_ms)

    def bind_secrets(self, node: Node) -> Any:
        """The secret store as ``node``'s process reaches it: traced, under the port faults."""
        return BoundPort(self.world, node, SECRETS_PORT, self.store, self.world.plan, SECRETS_DESCRIBERS,
                         PortStats(), self.world.system.restart_delay_ms)

    def agent_secrets(self, node: Node, ports: Any) -> Any:
        """What an agent process on ``node`` gets (``model.agent.AgentSecrets``)."""
        from model.secrets import AgentSecrets
        from model.secrets.envelope import Sealer

        return AgentSecrets(sealer=Sealer(self.bind_keys(node), ports.keyring), secret_store=self.bind_secrets(node),
                            digest_key=self.digest_key, tool_credentials=dict(TOOL_CREDENTIALS),
                            model_credential=MODEL_CREDENTIAL)

    # -- the key rotator --------------------------------------------------------

    def _start_rotator(self, node: Node) -> None:
        ports = self.world.system.ports_for(node)
        self.world.runtime.spawn_on(node, ROTATOR, self._rotate(node, self.bind_keys(node), ports.keyring,
                                                                ports.failpoints))

    async def _rotate(self, node: Node, keys: Any, keyring: Any, failpoints: Any) -> None:
        runtime = self.world.runtime
        probe = self.world.probe_for(node)
        # A rotation begun and not finished (the process died in it): resumed first.
        resume = after_kill = self.rotations_started > self.rotations_done
        while self.rotations_started < ROTATIONS_MAX:  # else: the process's loop ends when it dies
            if not resume:
                rng = self.stream_for(self.world, f"rotate-every/{self.rotations_started + 1}")
                await runtime.sleep_ms(rng.between(*self.rotate_every_ms))
                self.rotations_started += 1
            n = self.rotations_started
            rotation_id, to_key_id = f"rotation-{n}", f"kek-{n + 1}"
            probe.emit(KeyRotation.kind, rotation=rotation_id, phase="resumed" if resume else "begun",
                       to_key_id=to_key_id)
            try:
                await rotate_keys(keys, keyring, rotation_id, to_key_id, page=self.page, failpoints=failpoints)
            except Exception as error:
                if not is_retryable(error, reread=True):
                    raise
                probe.emit(KeyRotation.kind, rotation=rotation_id, phase="retry", error=error_name(error))
                self.rotation_retries += 1
                resume = True
                await runtime.sleep_ms(self.retry_ms)
                continue
            self.rotations_done += 1
            if after_kill:
                self.rotations_resumed += 1
            resume = after_kill = False
            probe.emit(KeyRotation.kind, rotation=rotation_id, phase="done")

    # -- the transcript reader ------------------------------------------------------

    def _on_admit(self, event: Any) -> None:
        fields = event.fields
        if LedgerAdmit.error in fields or fields[LedgerAdmit.replayed]:
            return
        conversation_id = fields[LedgerAdmit.conversation]
        if conversation_id not in self._readable:
            self._readable.append(conversation_id)
            del self._readable[:-READABLE_MAX]

    def _on_data_key_read(self, event: Any) -> None:
        """The reader got a data key a rotation re-wrapped since it was made
        (its id names the key it was first wrapped under): a field sealed
        before a rotation, opened after it."""
        fields = event.fields
        if KeyringGet.error in fields or not fields[KeyringGet.found] or \
                not event.node.startswith(self.node_name(READER)):
            return
        if fields[KeyringGet.key] != fields[KeyringGet.dek].rpartition("/")[2]:
            self.sealed_reads_across_rotation += 1

    def _start_reader(self, node: Node) -> None:
        ports = self.world.system.ports_for(node)
        self.world.runtime.spawn_on(node, READER, self._read_transcripts(ports.log, self.bind_keys(node), ports.keyring))

    async def _read_transcripts(self, log: Any, keys: Any, keyring: Any) -> None:
        """Every few minutes, one of the latest conversations read back whole,
        each sealed field opened, in a session of its own (a fresh sealer:
        nothing cached from an earlier read). A field that does not open
        fails the process: typed, never silent (the run's uncaught error)."""
        runtime = self.world.runtime
        while self.transcripts_read + self.transcript_retries < TRANSCRIPT_READS_MAX:
            rng = self.stream_for(self.world, f"transcript/{self.transcripts_read + self.transcript_retries}")
            await runtime.sleep_ms(rng.between(*READ_EVERY_MS))
            if not self._readable:
                continue
            conversation_id = rng.choice(self._readable)
            try:
                records = await open_transcript(log, Sealer(keys, keyring), conversation_id)
            except Exception as error:
                if not (is_retryable(error, reread=True) or error_name(error) == "NotMaterialized"):
                    raise
                self.transcript_retries += 1
                continue
            self.transcripts_read += 1
            self.transcript_fields_opened += len(records)

    def _on_rewrap(self, event: Any) -> None:
        if KeyringRewrap.error not in event.fields:
            self.rewraps += 1
