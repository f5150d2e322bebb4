"""The mutant catalogue: realistic planted bugs over every port, rule and
invariant of the model (``faults.mutants`` applies them; ``loomsim
mutants`` sweeps each).

Each entry is the smallest edit that a tired person could have written:
an inverted flag, a dropped guard, two lines in the wrong order, an
off-by-one, a lookup with its arguments swapped. None is shaped to be easy
to catch: a mutant the sweep misses is a finding about the sweep (which
workload, fault or oracle is missing), never a reason to make the bug
louder. Keep ``old`` short and local, so a change elsewhere in a module
does not break it; the tests apply every entry.

``scenarios``: the built-in workloads that run the patched code, in the
order the sweep tries them; port-level mutants (a store adapter or a rule
under one) end with ``port-storm``, whose adversarial clients call the
stores directly.

``ci_seed``/``ci_duration`` (in ``ci_scenario``, default the first
scenario): a seed measured to detect the mutant, whose clean run passes,
at the shortest duration that showed it (the fast CI subset,
tests/test_mutants.py). A mutant without them had no detecting seed when
the catalogue was measured (``loomsim mutants --seeds 0:8``): a survivor,
and what the sweep lacks to catch it is a finding, not a reason to change
the mutant.
"""
from __future__ import annotations

from faults.mutants import Mutant

SY = ("sentinel-year",)
LS = ("ledger-storm",)
BOTH = ("sentinel-year", "ledger-storm")
# port-storm's adversarial clients call the stores directly: the port-level
# mutants run there too (last: the built-in workloads are judged first).
SY_PS = ("sentinel-year", "port-storm")
LS_PS = ("ledger-storm", "port-storm")
ALL = ("sentinel-year", "ledger-storm", "port-storm")
AC = ("agent-conversations",)
SA = ("secret-agents",)

MUTANTS: tuple[Mutant, ...] = (
    # -- canonical JSON (RFC 8785) --------------------------------------------------
    Mutant(
        "canonical-insertion-order",
        "Canonical JSON writes object members in insertion order instead of sorting them, so equal values "
        "built in different orders get different bytes and digests.",
        "model.canonical", "        keys = sorted(d)\n", "        keys = list(d)\n", ALL,
        ci_seed=0, ci_duration="6h"),
    Mutant(
        "canonical-code-point-order",
        "Non-ASCII member names are sorted by their UTF-8 bytes (code points) instead of UTF-16 code units, "
        "disagreeing with every ECMAScript peer on supplementary-plane names.",
        "model.canonical", '    return name.encode("utf-16-be", "surrogatepass")\n',
        '    return name.encode("utf-8", "surrogatepass")\n', ALL,
        ci_seed=0, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "canonical-float-repr",
        "Floats are written with Python's repr (1.0, 1e+16, 5e-07) instead of the ECMAScript number form "
        "(1, 10000000000000000, 5e-7).",
        "model.canonical", "    if t is float:\n        return _encode_float(value)\n",
        "    if t is float:\n        return repr(value)\n", ALL,
        ci_seed=0, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "canonical-negative-zero",
        "-0.0 is written as -0 instead of 0, so a value and its negated zero digest differently.",
        "model.canonical", '            if r == "-0":\n                return "0"\n', "", ALL,
        ci_seed=0, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "canonical-ascii-escapes",
        "Strings are escaped ensure_ascii style (non-ASCII as \\uXXXX) instead of raw UTF-8 (module constant: "
        "the encoder's functions read it at call time).",
        "model.canonical", "_encode_basestring = json.encoder.encode_basestring\n",
        "_encode_basestring = json.encoder.encode_basestring_ascii\n", ALL,
        ci_seed=0, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "log-nodes-bound-dropped",
        "The log bounds an envelope's depth but not its values, so an envelope of over a million values is "
        "stored, and no reader within the decode caps reads it back.",
        "model.conversation.rules",
        '                                      nodes=ENVELOPE_DECODE_CAPS["max_items"] + 1)\n',
        "                                      nodes=None)\n", ("port-storm",), ci_seed=2, ci_duration="30s"),
    Mutant(
        "log-nodes-bound-off-by-one",
        "The envelope's nodes bound is the decode cap's 1,000,000 elements and members, forgetting the "
        "envelope itself, so an envelope of exactly 1,000,001 values (one that reads back) is refused.",
        "model.conversation.rules",
        '                                      nodes=ENVELOPE_DECODE_CAPS["max_items"] + 1)\n',
        '                                      nodes=ENVELOPE_DECODE_CAPS["max_items"])\n', ("port-storm",),
        ci_seed=2, ci_duration="30s"),
    Mutant(
        "log-observe-foreign-offset-accepted",
        "An offset is parsed for its seq without checking the conversation it was handed out for, so "
        "another conversation's offset is accepted instead of MalformedOffset.",
        "model.conversation.rules",
        "    if record_offset(adapter, conversation_id, int(seq_text)) != offset:\n"
        "        raise MalformedOffset(conversation_id, offset)\n",
        "", ("port-storm",), ci_seed=2, ci_duration="30s"),
    Mutant(
        "log-observe-page-skip",
        "Observation pages on from one past the last record of a full page, so a stream over a log longer "
        "than a page loses the record after each page boundary.",
        "model.conversation.rules", "        after_seq = page[-1].seq\n",
        "        after_seq = page[-1].seq + 1\n", ("port-storm",), ci_seed=2, ci_duration="30s"),
    Mutant(
        "log-observe-resumes-at-offset",
        "Observation resumes at the record whose offset it was given instead of after it, so a resumed "
        "stream delivers that record a second time.",
        "model.conversation.rules",
        "        raise MalformedOffset(conversation_id, offset)\n    return seq\n",
        "        raise MalformedOffset(conversation_id, offset)\n    return seq - 1\n", ("port-storm",),
        ci_seed=2, ci_duration="30s"),
    Mutant(
        "log-observe-skips-after-offset",
        "Observation from an offset skips the first record after it (an off-by-one in the seq the offset "
        "names), so a resumed stream silently loses a record.",
        "model.conversation.rules",
        "        raise MalformedOffset(conversation_id, offset)\n    return seq\n",
        "        raise MalformedOffset(conversation_id, offset)\n    return seq + 1\n", ("port-storm",),
        ci_seed=2, ci_duration="30s"),
    Mutant(
        "canonical-text-units-code-points",
        "The text bound counts code points instead of UTF-16 code units, so a string of astral characters "
        "passes a bound it is twice over for an ECMAScript peer.",
        "model.canonical", "    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)\n",
        "    return len(text)\n", ("port-storm",), ci_seed=0, ci_duration="2m"),
    Mutant(
        "canonical-collection-bound-inclusive",
        "The collection bound refuses a collection of exactly its length (>= instead of >).",
        "model.canonical", "    if max_length is not None and longest > max_length:\n",
        "    if max_length is not None and longest >= max_length:\n", ("port-storm",), ci_seed=0, ci_duration="2m"),
    Mutant(
        "canonical-equal-by-value",
        "canonical_equal compares Python values instead of canonical texts, so True equals 1 and a bool payload "
        "is adopted as an int one.",
        "model.canonical", "    return canonical_json(a) == canonical_json(b)\n", "    return a == b\n", SY_PS,
        ci_seed=0, ci_duration="2m", ci_scenario="port-storm"),

    # -- durable state: the CAS store, adopt-own-write, contracts ---------------------
    Mutant(
        "ds-cas-accepts-stale",
        "The CAS rule only refuses an expected revision ahead of the store, so a stale writer's save lands "
        "(a lost update) instead of conflicting.",
        "model.durable_state.store", "    if expected_revision != actual_revision:\n",
        "    if expected_revision > actual_revision:\n", SY_PS, ci_seed=0, ci_duration="6h", ci_scenario="port-storm"),
    Mutant(
        "ds-sqlite-cas-unguarded",
        "The SQLite CAS update guards on revision >= expected instead of =, so a stale save overwrites a newer "
        "record (module constant).",
        "model.durable_state.sqlite_store", '    "WHERE key = ? AND revision = ?"\n',
        '    "WHERE key = ? AND revision >= ?"\n', SY_PS, store="sqlite", ci_seed=0, ci_duration="6h", ci_scenario="port-storm"),
    Mutant(
        "ds-adopt-without-content-check",
        "Adopt-own-write adopts any conflict at expected + 1 without comparing the stored envelope with the "
        "attempted write, silencing the two-writers tripwire.",
        "model.durable_state.handle",
        "        if not canonical_equal(stored.payload, write.payload):\n            return None\n", "", SY,
        ci_seed=4, ci_duration="1d"),
    Mutant(
        "ds-adopt-any-revision",
        "Adopt-own-write adopts an equal envelope at whatever revision the store holds, not only at exactly "
        "expected + 1.",
        "model.durable_state.handle",
        '        if getattr(conflict, "actual", None) != expected_revision + 1:\n            return None\n'
        "        stored = await self.store.load(self.key)\n"
        "        if stored is None or stored.revision != expected_revision + 1:\n",
        "        stored = await self.store.load(self.key)\n        if stored is None:\n", SY_PS,
        ci_seed=1, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "ds-adopt-ignores-version",
        "Adopt-own-write adopts an equal payload stored under another contract version.",
        "model.durable_state.handle",
        "        if stored.contract_version != write.contract_version:\n            return None\n", "", SY_PS,
        ci_seed=1, ci_duration="2m", ci_scenario="port-storm"),
    Mutant(
        "ds-migration-result-dropped",
        "Load runs each migration but drops its result (as if migrations mutated in place), validating the "
        "unmigrated payload.",
        "model.durable_state.contracts", "                payload = migration(payload)\n",
        "                migration(payload)\n", SY, ci_seed=0, ci_duration="6h"),
    Mutant(
        "ds-load-unvalidated",
        "Load returns the stored payload as it is: no migration chain, no validation (the run proceeds on "
        "old-version state).",
        "model.durable_state.contracts",
        "        if stored_version > self.version:\n            raise mismatch(FUTURE_VERSION)\n"
        "        version = stored_version\n",
        "        return payload\n        version = stored_version\n", SY, ci_seed=0, ci_duration="6h"),
    Mutant(
        "ds-load-skips-validation",
        "Load validates only a payload it migrated; one stored at the current version is trusted unvalidated.",
        "model.durable_state.contracts",
        "        problem = self.validate(payload)\n        if problem is not None:\n"
        "            raise mismatch(VALIDATION_FAILED, problem)\n",
        "        problem = self.validate(payload) if version != stored_version else None\n"
        "        if problem is not None:\n            raise mismatch(VALIDATION_FAILED, problem)\n", SY_PS,
        ci_seed=2, ci_duration="3m", ci_scenario="port-storm"),
    Mutant(
        "ds-future-version-accepted",
        "Load has no future-version check: state written by newer code is validated by the old contract "
        "instead of refused as future-version.",
        "model.durable_state.contracts",
        "        if stored_version > self.version:\n            raise mismatch(FUTURE_VERSION)\n", "", SY,
        ci_seed=1, ci_duration="6h"),
    Mutant(
        "ds-migration-never-persisted",
        "The in-memory store keeps a row's first contract version on update, so a migrated payload saved at "
        "the current version is still labelled with the old one.",
        "model.durable_state.memory_store", "        contract_version = write.contract_version\n",
        "        contract_version = write.contract_version if row is None else row[0]\n", SY_PS,
        ci_seed=0, ci_duration="6h"),

    # -- typed ledger errors and checkpoint loads (issue 13) --
    Mutant(
        "ledger-sqlite-claim-bare-contention",
        "The SQLite ledger's claim opens its transaction with write_transaction directly instead of the typed "
        "wrapper, so a busy write lock crosses the port as a bare SqliteWriteContention, not a LedgerStoreError.",
        "model.ledger.sqlite_store", '        with self._writing("claim") as conn:\n',
        "        with write_transaction(self._conn) as conn:\n", LS_PS, store="sqlite",
        ci_seed=1, ci_duration="30m", ci_scenario="port-storm"),
    Mutant(
        "checkpoint-load-digest-unchecked",
        "load_latest only checks that the log still has a digest at the checkpoint's position, not that it is "
        "the checkpoint's, so a log deleted and written again hands back the old checkpoint.",
        "model.conversation.checkpoints", "    if log_digest != checkpoint.tail_digest:\n",
        "    if log_digest is None:\n", LS_PS,
        ci_seed=0, ci_duration="30s", ci_scenario="port-storm"),
    Mutant(
        "checkpoint-load-unknown-none",
        "The in-memory checkpoint store's load_latest no longer asks the log whether the conversation exists, so "
        "a conversation never created (or deleted) answers None instead of NotMaterialized.",
        "model.conversation.checkpoints",
        "        await self._log.inspect_tail(conversation_id)  # NotMaterialized for a conversation the log lacks\n",
        "", LS_PS, ci_seed=0, ci_duration="1m", ci_scenario="port-storm"),
    Mutant(
        "envelope-created-at-ms-key",
        "A record envelope is written with the old createdAtMs key instead of the peer's createdAt, so its "
        "canonical text and digest are not the ones the peer implementation computes for the same record.",
        "model.conversation.records", '            "createdAt": self.created_at_ms,\n',
        '            "createdAtMs": self.created_at_ms,\n', ALL, ci_seed=0, ci_duration="1s"),
    Mutant(
        "checkpoint-created-at-ms-key",
        "A checkpoint is stored with the old createdAtMs key instead of the peer's createdAt.",
        "model.conversation.checkpoints", '            "createdAt": self.created_at_ms,\n',
        '            "createdAtMs": self.created_at_ms,\n', LS_PS,
        ci_seed=9, ci_duration="5s", ci_scenario="port-storm"),

    # -- the submission ledger: admission, claims, leases, settlement ------------------
    Mutant(
        "ledger-admit-key-swapped",
        "Admission looks the idempotency key up with principal and key swapped, so every retry (and every "
        "duplicate alarm) admits a second submission.",
        "model.ledger.memory_store", "        existing_id = self._by_key.get(key)\n",
        "        existing_id = self._by_key.get((conversation_id, idempotency_key, principal_id))\n", ALL,
        ci_seed=0, ci_duration="1d", ci_scenario="ledger-storm"),
    Mutant(
        "ds-load-records-unmigrated",
        "A load records the stored payload as its step output while it reports the migrated one: the migration "
        "reaches the load's report but not the record, so the run (and every replay of it) goes on with state "
        "its contract version never accepted.",
        "model.durable_state.handle",
        '        result: dict[str, Any] = {"revision": record.revision, "contractVersion": current, "payload": payload}\n',
        '        result: dict[str, Any] = {"revision": record.revision, "contractVersion": current,\n'
        '                                  "payload": record.payload}\n', SY_PS,
        ci_seed=0, ci_duration="30m", ci_scenario="sentinel-year"),
    Mutant(
        "ledger-admit-key-ignores-principal",
        "Admission looks an earlier admission up by conversation and idempotency key, whichever principal made "
        "it: another principal's request under a key already used replays the first principal's submission.",
        "model.ledger.memory_store", "        existing_id = self._by_key.get(key)\n",
        "        existing_id = next((sid for (c, _p, k), sid in self._by_key.items()\n"
        "                            if (c, k) == (conversation_id, idempotency_key)), None)\n", LS_PS,
        ci_seed=2, ci_duration="5m", ci_scenario="ledger-storm"),
    Mutant(
        "ledger-admit-new-receipt",
        "An idempotent admission replay answers with a receipt minted for this request (salted with its time) "
        "instead of the one the ledger issued.",
        "model.ledger.rules",
        "            AdmissionResult(existing.submission_id, existing.receipt, existing.queue_seq, True, input_digest,\n",
        "            AdmissionResult(existing.submission_id, receipt_for(existing.submission_id, f\"{input_digest}@{now_ms}\"),\n"
        "                            existing.queue_seq, True, input_digest,\n", ALL, ci_seed=0, ci_duration="1d", ci_scenario="ledger-storm"),
    Mutant(
        "ledger-admit-retry-readmits",
        "An admission retried after it stopped before ready is admitted anew (dedupe only of ready rows): a "
        "second submission under one idempotency key.",
        "model.ledger.rules", "    if existing is not None:\n        if existing.input_digest != input_digest:\n",
        "    if existing is not None and existing.ready:\n        if existing.input_digest != input_digest:\n", ALL,
        ci_seed=1, ci_duration="15m", ci_scenario="ledger-storm"),
    Mutant(
        "ledger-admit-policy-before-replay",
        "Admission checks its policies (fence, group occupancy) before it looks for an earlier admission, so an "
        "exact retry of the submission holding its group is refused as occupied (and a retry after its fence "
        "moved as stale) instead of replaying.",
        "model.ledger.rules", "    if existing is not None:\n        if existing.input_digest != input_digest:\n",
        "    if check_admission_policy(fence, fence_revision, admission_group, group_rows) or existing is not None:\n"
        "        if existing.input_digest != input_digest:\n", LS_PS,
        ci_seed=0, ci_duration="1m", ci_scenario="port-storm"),
    Mutant(
        "ledger-group-freed-at-reserve",
        "An admission group counts only submissions without a reserved settlement as occupying it: the group is "
        "freed at reserve instead of at finalize, so a successor is admitted while the original is terminalizing.",
        "model.ledger.rules", "    return any(row.settled_at_ms is None for row in rows)\n",
        "    return any(row.settled_at_ms is None and row.reserved_digest is None for row in rows)\n", LS_PS,
        ci_seed=0, ci_duration="1m", ci_scenario="port-storm"),
    Mutant(
        "ledger-fence-stale-accepted",
        "The admission fence refuses only a revision newer than the one it stands at: an admission under a stale "
        "revision is taken.",
        "model.ledger.rules", "        if fence.revision != fence_revision:\n",
        "        if fence.revision > fence_revision:\n", LS_PS,
        ci_seed=0, ci_duration="1m", ci_scenario="port-storm"),
    Mutant(
        "ledger-worker-on-ordinary-lane",
        "Only a worker lane checks what is admitted to it: a worker admission on a lane holding ordinary work is "
        "taken, and the lane now mixes both.",
        "model.ledger.rules", "    if held is None or held == lane:\n",
        "    if held is None or held == lane or held == ORDINARY_LANE:\n", LS_PS,
        ci_seed=0, ci_duration="1m", ci_scenario="port-storm"),
    Mutant(
        "ledger-worker-message-id-unchecked",
        "A worker admission is taken whatever its messageId, so one message can be admitted under many keys.",
        "model.ledger.rules", '    if metadata.get("messageId") != idempotency_key:\n', "    if False:\n", LS_PS,
        ci_seed=0, ci_duration="1m", ci_scenario="port-storm"),
    Mutant(
        "ledger-worker-origin-unchecked",
        "A worker admission on a fresh lane is taken without an origin or its expiry: the lane is nobody's.",
        "model.ledger.rules",
        '    if type(origin) is not dict or type(origin.get("expiresAtMillis")) is not int:\n',
        "    if False:\n", LS_PS, ci_seed=0, ci_duration="1m", ci_scenario="port-storm"),
    Mutant(
        "ledger-claim-ignores-live-lease",
        "A claim compares another owner's lease expiry with now + lease_ms (the lease counted twice), so a "
        "live lease never blocks it.",
        "model.ledger.rules",
        "        and head.lease_expires_ms is not None\n        and head.lease_expires_ms > now_ms\n",
        "        and head.lease_expires_ms is not None\n        and head.lease_expires_ms > now_ms + lease_ms\n",
        ALL, ci_seed=0, ci_duration="6h"),
    Mutant(
        "ledger-renew-shortens",
        "Renewal sets the lease to now + lease_ms even when that is earlier than the lease already granted.",
        "model.ledger.rules", "    lease_expires_ms = max(row.lease_expires_ms, now_ms + lease_ms)  # never shortens\n",
        "    lease_expires_ms = now_ms + lease_ms\n", LS_PS,
        ci_seed=0, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "ledger-renew-after-expiry",
        "Renewal refuses a lapsed lease (OwnershipLost) though nobody claimed since, so the owner must claim "
        "anew at a new epoch instead of renewing.",
        "model.ledger.rules", "    row = check_token(row, token)  # a lapsed lease renews until another owner claims\n",
        "    row = check_token(row, token, now_ms)\n", LS_PS,
        ci_seed=1, ci_duration="2m", ci_scenario="port-storm"),
    Mutant(
        "ledger-epoch-per-submission",
        "A claim allocates the next epoch from the submission's own epoch instead of the conversation's "
        "counter, so a new submission's owner reuses epoch 1.",
        "model.ledger.rules", "    epoch = conversation.epoch + 1\n", "    epoch = (row.epoch or 0) + 1\n", ALL,
        ci_seed=0, ci_duration="15m", ci_scenario="ledger-storm"),
    Mutant(
        "ledger-claim-newest-first",
        "The in-memory ledger hands out the newest open submission instead of the FIFO head.",
        "model.ledger.memory_store", "            nonterminal[0] if nonterminal else None,\n",
        "            nonterminal[-1] if nonterminal else None,\n", LS_PS, ci_seed=0, ci_duration="15m",
        ci_scenario="port-storm"),
    Mutant(
        "ledger-sqlite-head-desc",
        "The SQLite ledger's head query orders by queue_seq DESC: the newest open submission is claimed "
        "first (module constant).",
        "model.ledger.sqlite_store", '_SELECT_HEAD = _SELECT_NONTERMINAL_OF + " LIMIT 1"\n',
        '_SELECT_HEAD = _SELECT_NONTERMINAL_OF + " DESC LIMIT 1"\n', LS_PS, store="sqlite",
        ci_seed=0, ci_duration="15m", ci_scenario="port-storm"),
    Mutant(
        "ledger-unready-head-claimable",
        "The claim refuses only a settled head instead of every state the table does not let a claim "
        "grant: an unready (unknown) head is claimed and run before its receipt ever went out.",
        "model.ledger.rules",
        "    if not claimable(state_of(head), head.abort_author is not None):\n",
        "    if state_of(head) == SETTLED:\n", ALL,
        ci_seed=1, ci_duration="15m", ci_scenario="ledger-storm"),
    Mutant(
        "ledger-handoff-over-a-gap",
        "A cooperative handoff takes as many leading rows as the handoff names deferred instead of every row "
        "up to the named one, so it grants the named submission over an admitted-only or another ready row "
        "between them.",
        "model.ledger.rules", "    deferred = lane[:at]\n",
        "    deferred = lane[:len(handoff.deferred_submission_ids)]\n", ("port-storm",),
        ci_seed=8, ci_duration="2m"),
    Mutant(
        "ledger-handoff-stale-epoch",
        "A cooperative handoff checks the deferred head's epoch against the lane's but never against the "
        "producer's epoch the handoff names, so a producer superseded by an intervening claim still hands off.",
        "model.ledger.rules", "    if not conversation.epoch == deferred[-1].epoch == handoff.producer_epoch:\n",
        "    if not conversation.epoch == deferred[-1].epoch:\n", ("port-storm",),
        ci_seed=0, ci_duration="5m"),
    Mutant(
        "ledger-handoff-over-a-live-head",
        "A cooperative handoff checks that the deferred head's input is applied but not that its producer "
        "released it, so a head still owned under a live lease is handed over: two owners run the lane.",
        "model.ledger.rules",
        "        if (state_of(row) != INPUT_APPLIED or row.owner_id is not None or row.abort_author is not None\n",
        "        if (state_of(row) != INPUT_APPLIED or row.abort_author is not None\n", ("port-storm",),
        ci_seed=12, ci_duration="2m"),
    Mutant(
        "ledger-reserve-overwrites",
        "A second reservation with other content replaces the first instead of conflicting (last writer "
        "wins over the exact reserved record).",
        "model.ledger.rules", "    if row.reserved_digest is None:\n",
        "    if row.reserved_digest is None or row.reserved_digest != record_digest:\n", ALL,
        ci_seed=0, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "ledger-finalize-trusts-reservation",
        "Finalize trusts the stored reservation without re-checking it against its reserved digest.",
        "model.ledger.rules",
        "    if digest(record) != row.reserved_digest:\n"
        '        raise InvalidSettlement(submission_id, "stored record does not match its reserved digest")\n',
        "", ALL,
        equivalent="within the contract a stored reservation never differs from its digest (reserve writes both "
                   "at once and nothing rewrites a reserved row); only the beyond-contract rot (another record "
                   "of the same outcome) makes them differ, and the reference ledger refuses that reservation "
                   "at the reserve, before any finalize: DETECTED either way (ledger-storm seed 0, 1h, beyond "
                   "the contract, with the mutant); the mutants sweep runs within the contract"),
    Mutant(
        "ledger-finalize-restamps",
        "Finalize is an upsert: repeating it re-stamps the settlement with the new time instead of returning "
        "the original settlement.",
        "model.ledger.rules",
        "    if row.settled_at_ms is not None:\n        assert row.outcome == outcome, (row.outcome, outcome)\n"
        "        return Settlement(submission_id, outcome, row.reserved_digest, row.settled_at_ms, diagnostic,\n"
        "                          row.settlement_id, True, row.receipt), None, []\n",
        "", ALL,
        ci_seed=0, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "ledger-abort-overwrites-intent",
        "A second abort request replaces the first intent's author and reason instead of returning it.",
        "model.ledger.rules",
        "    if row.abort_author is not None:\n        return AbortIntent(submission_id, row.abort_author,",
        "    if row.abort_author is not None and row.settled_at_ms is not None:\n"
        "        return AbortIntent(submission_id, row.abort_author,", LS_PS,
        ci_seed=1, ci_duration="15m", ci_scenario="port-storm"),
    Mutant(
        "ledger-settlement-id-digest",
        "Settlement ids are made as before the peer's format was adopted: \"stl-\" + the digest of "
        "{submissionId, recordDigest} instead of \"settlement:{submissionId}\".",
        "model.ledger.rules",
        '    return f"settlement:{submission_id}"\n',
        '    return "stl-" + digest({"recordDigest": record_digest, "submissionId": submission_id})\n', LS_PS,
        ci_seed=0, ci_duration="30s", ci_scenario="port-storm"),
    # -- aborts and the claim's fence on the log (issue 13) --------------------------
    Mutant(
        "ledger-reserve-ignores-abort",
        "Reserving a settlement never looks at the abort intent, so a run aborted while it ran still "
        "settles completed (or failed) next to its stored intent.",
        "model.ledger.rules",
        "        if row.abort_author is not None and outcome != ABORTED:\n"
        "            raise AbortRequested(row.submission_id, row.abort_author, row.abort_reason, outcome)\n",
        "", LS_PS, ci_seed=0, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "ledger-unknown-head-claimable",
        "A head whose tool call's outcome is unknown is claimable like any other, so its next owner replays "
        "the uncertain tool instead of waiting for a resolution.",
        "model.ledger.states", "CLAIMABLE_ONLY_TO_ABORT = frozenset({UNKNOWN, SUSPENDED})\n",
        "CLAIMABLE_ONLY_TO_ABORT = frozenset({SUSPENDED})\n", LS_PS, ci_seed=1, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "ledger-resolution-last-wins",
        "A second, contrary resolution of an unknown tool call replaces the first instead of conflicting.",
        "model.ledger.rules", "    if existing is not None:\n        same = ",
        "    if existing is not None and existing[\"resolution\"] == resolution:\n        same = ", ("port-storm",),
        ci_seed=1, ci_duration="5m"),
    Mutant(
        "ledger-approval-last-wins",
        "A contrary decision on a tool call's approval replaces the first instead of conflicting.",
        "model.ledger.rules",
        "    if existing is not None:\n        if existing[\"decision\"] != decision:\n",
        "    if existing is not None and existing[\"decision\"] == decision:\n"
        "        if existing[\"decision\"] != decision:\n", ("port-storm",), ci_seed=1, ci_duration="5m"),
    Mutant(
        "ledger-any-decision-resumes",
        "The first approval decision resumes a submission suspended on several, so it runs while an approval "
        "is still pending.",
        "model.ledger.rules",
        "        attrs.evolve(row, approvals_json=canonical_json(approvals), approvals_pending=pending)\n",
        "        attrs.evolve(row, approvals_json=canonical_json(approvals), approvals_pending=0)\n",
        ("port-storm",), ci_seed=1, ci_duration="5m"),
    Mutant(
        "ledger-join-skips-a-gap",
        "A host joining the submissions behind it steps over one that is not ready and takes the ready ones "
        "after it, out of queue order.",
        "model.ledger.rules", "            break\n        taken.append(row)\n",
        "            continue\n        taken.append(row)\n", ("port-storm",), ci_seed=2, ci_duration="5m"),
    Mutant(
        "ledger-join-answers-held-followers",
        "A host's join answers every follower it holds, those earlier calls took included, instead of only the "
        "rows this call took.",
        "model.ledger.rules",
        "    answer = tuple(JoiningFollower(row.submission_id, row.queue_seq, decode(row.input_json)) for row in taken)\n",
        "    answer = tuple(JoiningFollower(row.submission_id, row.queue_seq, decode(row.input_json))\n"
        "                   for row in mine + taken)\n", ("agent-conversations", "port-storm"),
        ci_seed=3, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "ledger-revert-joined-refused",
        "Reverting a joined follower is refused (TransitionRefused) instead of a no-op that leaves it joined.",
        "model.ledger.rules",
        "    if follower.join_host == host.submission_id and state == JOINED:\n"
        "        return None, None  # joined: it settles with its host\n",
        "", ("port-storm",), ci_seed=0, ci_duration="5m"),
    Mutant(
        "ledger-lone-follower-left-open",
        "The host's finalize settles its joined followers only when it holds more than one: a lone joined "
        "follower stays open forever.",
        "model.ledger.rules", "    if row.joined_count:\n        for other in behind:",
        "    if row.joined_count > 1:\n        for other in behind:", ("port-storm",), ci_seed=2, ci_duration="5m"),
    Mutant(
        "ledger-child-allocation-as-sent",
        "A child reservation is identified by the allocation as the caller built it (its member order "
        "included) instead of its canonical digest: an identical retry with reordered keys conflicts.",
        "model.ledger.rules", "    return decode(text), digest_text(text)\n",
        "    return decode(text), digest_text(repr(value))\n", ("port-storm",), ci_seed=1, ci_duration="5m"),
    Mutant(
        "ledger-child-reserve-needs-input",
        "A child reservation (and attachment) by the running owner is refused until its input is applied, "
        "though the owner reserves whenever it runs.",
        "model.ledger.states", "              RESERVE_CHILD: RUNNING, ATTACH_CHILD: RUNNING, RELEASE_CHILD: RUNNING},\n",
        "              },\n", ("port-storm",), ci_seed=0, ci_duration="4m"),
    Mutant(
        "ledger-child-replay-after-fence",
        "The token is checked before an existing child reservation is looked up, so a fenced owner's identical "
        "replay is OwnershipLost instead of the replay.",
        "model.ledger.rules",
        "    if row is not None:\n        entry = _children(row).get(tool_call_id)\n        if entry is not None:\n",
        "    row = check_token(row, token)\n    if row is not None:\n        entry = _children(row).get(tool_call_id)\n"
        "        if entry is not None:\n", ("port-storm",), ci_seed=0, ci_duration="4m"),
    Mutant(
        "ledger-suspend-settled-refused",
        "suspend of a settled submission is checked like any other (token, then state): TransitionRefused, "
        "not SettlementConflict naming the outcome.",
        "model.ledger.rules",
        "    refuse_settled(row)\n    if row is not None and row.owner_id is None and row.epoch == token.epoch:\n"
        "        approvals",
        "    if row is not None and row.owner_id is None and row.epoch == token.epoch:\n        approvals",
        ("port-storm",), ci_seed=0, ci_duration="4m"),
    Mutant(
        "ledger-abort-settled-replays",
        "An abort of a settled submission replays its earlier intent (or, with none, is AbortConflict) instead "
        "of SettlementConflict naming the settled outcome.",
        "model.ledger.rules",
        "    if not settled_by_abort(row):  # settled by its own intent: that intent replays\n"
        "        refuse_settled(row)\n    if row.abort_author is not None:\n",
        "    if row.settled_at_ms is not None and row.abort_author is None:\n"
        "        raise AbortConflict(submission_id, row.outcome)\n    if row.abort_author is not None:\n",
        ("port-storm",),
        ci_seed=5, ci_duration="30s"),
    Mutant(
        "ledger-abort-queued-repeat-conflicts",
        "A repeated abort of a submission its first abort settled before it was ever ready is "
        "SettlementConflict instead of that first intent.",
        "model.ledger.rules",
        "    if not settled_by_abort(row):  # settled by its own intent: that intent replays\n"
        "        refuse_settled(row)\n",
        "    refuse_settled(row)\n", ("port-storm",),
        ci_seed=0, ci_duration="1m"),
    Mutant(
        "ledger-queued-abort-settles-alone",
        "An abort of a queued (ready, never claimed) submission settles it aborted in the ledger alone, at "
        "once, as one never ready: no abort or settlement record ever reaches its log.",
        "model.ledger.rules",
        "    if after == SETTLED:\n        # Admitted, never ready:",
        "    if after == SETTLED or row.epoch is None:\n        # Admitted, never ready:",
        ("ledger-storm", "agent-conversations", "port-storm"), ci_seed=3, ci_duration="30s", ci_scenario="port-storm"),
    Mutant(
        "ledger-queued-abort-needs-ownership",
        "A queued submission's aborted reservation is fenced like any other (the QueuedAbort authority is "
        "gone): its aborter is refused and it waits for a claim behind its lane's head.",
        "model.ledger.rules",
        "    if row is None or outcome != ABORTED or not queued_abort(row):\n        row = check_token(row, token)\n",
        "    row = check_token(row, token)\n",
        ("ledger-storm", "agent-conversations", "port-storm"), ci_seed=3, ci_duration="30s", ci_scenario="port-storm"),
    Mutant(
        "ledger-resolve-settled-recorded",
        "A resolution of an unknown call after its submission settled is recorded instead of "
        "SettlementConflict naming the settled outcome.",
        "model.ledger.rules",
        "    refuse_settled(row)\n    calls = _unknown_calls(row)\n    if tool_call_id not in calls:\n",
        "    calls = _unknown_calls(row)\n    if tool_call_id not in calls:\n", ("port-storm",),
        ci_seed=0, ci_duration="30s"),
    Mutant(
        "ledger-approval-settled-replays",
        "A decision on a settled submission replays an earlier decision (a new call: UnknownApproval) instead "
        "of SettlementConflict naming the settled outcome.",
        "model.ledger.rules",
        "    refuse_settled(row)\n    approvals = _approvals(row)\n    if tool_call_id not in approvals:\n",
        "    approvals = _approvals(row)\n    if tool_call_id not in approvals:\n", ("port-storm",),
        ci_seed=0, ci_duration="30s"),
    Mutant(
        "ledger-snapshot-without-decisions",
        "The recovery snapshot leaves out the approval decisions, so a recovering producer cannot tell which "
        "calls were approved without a token.",
        "model.ledger.rules",
        "        approvals=None if row.approvals_json is None else decode_column(row.approvals_json),\n"
        "        unknown_calls=",
        "        approvals=None,\n        unknown_calls=", ("port-storm",),
        ci_seed=0, ci_duration="1m"),
    Mutant(
        "ledger-snapshot-children-pending-all",
        "The recovery snapshot names every awaited child as pending, released or not.",
        "model.ledger.rules",
        "                                      if entry[\"awaited\"] and entry[\"releasedAtMs\"] is None)),\n",
        "                                      if entry[\"awaited\"])),\n", ("port-storm",),
        ci_seed=0, ci_duration="2m"),
    Mutant(
        "ledger-reserve-answer-bare",
        "A reservation answers only its record digest, without the settlement id and outcome it will finalize as.",
        "model.ledger.rules",
        "    reserved = ReservedSettlement(row.submission_id, record_digest, False,\n"
        "                                  settlement_id_for(row.submission_id, record_digest), outcome)\n",
        "    reserved = ReservedSettlement(row.submission_id, record_digest)\n", LS_PS, ci_seed=0, ci_duration="30s", ci_scenario="port-storm"),
    Mutant(
        "settlement-digest-over-payload",
        "The settlement's record digest is over its outcome record alone, not over the record envelope the "
        "log appends (as the peer implementation has it: recordDigest = digestJson(encode(RecordEnvelope))).",
        "model.ledger.rules",
        "    return text, digest_text(text), settlement_of(record)[\"outcome\"]\n",
        "    return text, digest_text(canonical_json(settlement_of(record))), settlement_of(record)[\"outcome\"]\n",
        LS_PS, ci_seed=0, ci_duration="30s", ci_scenario="port-storm"),
    Mutant(
        "settlement-receipt-dropped",
        "The settlement payload leaves out receiptId, the admission's receipt the peer implementation's "
        "SubmissionSettled payload carries.",
        "model.ledger.records",
        '    payload = {"submissionId": submission_id, "settlementId": f"settlement:{submission_id}", '
        '"receiptId": receipt,\n',
        '    payload = {"submissionId": submission_id, "settlementId": f"settlement:{submission_id}",\n', ALL,
        ci_seed=0, ci_duration="1s"),
    Mutant(
        "settlement-payload-nested",
        "The settlement payload nests the outcome record under record (the old shape) instead of carrying its "
        "outcome, result or diagnostic at the top level, as the peer implementation's payload does.",
        "model.ledger.records", "               **record}\n", '               "record": record}\n', ALL,
        ci_seed=0, ci_duration="1s"),
    Mutant(
        "settlement-shape-receipt-unchecked",
        "The ledger reserves a settlement whose payload has no receiptId (or an empty one).",
        "model.ledger.rules",
        '            or type(payload.get("receiptId")) is not str or not payload["receiptId"]\n', "", LS_PS,
        ci_seed=4, ci_duration="10s", ci_scenario="port-storm"),
    Mutant(
        "joined-follower-hosts-receipt",
        "A joined follower's settlement record names its host's receipt instead of its own admission's.",
        "model.agent", "            entries.append(joined_envelope(entry, follower.submission_id, follower.receipt))\n",
        "            entries.append(joined_envelope(entry, follower.submission_id, host.receipt))\n", AC,
        ci_seed=1, ci_duration="1m"),
    Mutant(
        "settlement-receipt-is-the-key",
        "A worker's settlement names the submission's idempotency key as its receiptId instead of the "
        "admission's receipt: the ledger reserves and the log appends the same wrong record.",
        "model.submissions",
        "                run_id=self.settlement_run_id(submission_id), receipt=record.receipt)\n",
        "                run_id=self.settlement_run_id(submission_id), receipt=record.idempotency_key)\n",
        ("ledger-storm", "agent-conversations"), ci_seed=2, ci_duration="10s"),
    Mutant(
        "settlement-restamped-on-append",
        "The settlement record is stamped again when it is appended: its createdAt is the appender's clock, "
        "not the reservation's, so the log's record is not byte-equal to the reserved one (as the peer implementation requires).",
        "model.lifecycle",
        "                              schema_version=entry[\"schemaVersion\"], created_at_ms=entry[\"createdAt\"],\n",
        "                              schema_version=entry[\"schemaVersion\"], created_at_ms=created_at_ms,\n",
        BOTH, ci_seed=0, ci_duration="30m", ci_scenario="ledger-storm"),
    # A race of a client's materialize with a recovery that completed its
    # admission and claimed meanwhile: ledger-storm's ``held_admissions``
    # (one seed in eight) pauses the client between its look at the log and
    # its materialize until a worker took the conversation over.
    Mutant(
        "admission-materialize-stale-fails",
        "A client whose conversation a recovering owner materialized and claimed between its look at the log and "
        "its own materialize at epoch 0 fails on the stale-epoch refusal instead of marking the submission ready.",
        "model.lifecycle", '            if error_name(error) != "FenceRejected":\n',
        "            if True:\n", ("ledger-storm", "agent-conversations"), ci_seed=50, ci_duration="5m",
        ci_scenario="ledger-storm"),
    Mutant(
        "settlement-retry-conflicts-with-itself",
        "A settlement retried after its reservation's reply was lost builds a new envelope (created later) and "
        "fails on a conflict with its own reservation instead of adopting it.",
        "model.lifecycle", '            if held is None or held["payload"] != envelope["payload"]:\n',
        "            if True:\n", ("sentinel-year", "ledger-storm", "agent-conversations"), ci_seed=10, ci_duration="1d"),
    Mutant(
        "ledger-settlement-without-receipt",
        "A first finalize answers the settlement without the admission's receipt.",
        "model.ledger.rules",
        "    settlement = Settlement(submission_id, outcome, row.reserved_digest, now_ms, diagnostic, settlement_id,\n"
        "                            receipt=row.receipt)\n",
        "    settlement = Settlement(submission_id, outcome, row.reserved_digest, now_ms, diagnostic, settlement_id)\n",
        LS_PS, ci_seed=0, ci_duration="30s", ci_scenario="port-storm"),
    Mutant(
        "ledger-snapshot-child-outcome-dropped",
        "The recovery snapshot names an attached child's state but not the outcome it settled with.",
        "model.ledger.rules", "    return state_of(child), child.outcome\n", "    return state_of(child), None\n",
        ("port-storm",),
        ci_seed=0, ci_duration="2m"),
    Mutant(
        "ledger-snapshot-state-stale",
        "The recovery snapshot names a claimed submission's state as ready until its input is applied.",
        "model.ledger.rules", "        state=state_of(row),\n",
        "        state=\"ready\" if state_of(row) == \"running\" else state_of(row),\n", ("port-storm",),
        ci_seed=1, ci_duration="1m"),
    # A survivor: no scenario asks a store for its capabilities (the fault
    # layer does not wrap the call, so neither the adversary nor the
    # reference ledger sees it); the conformance kit holds the declaration.
    Mutant(
        "ledger-durability-undeclared",
        "The capabilities leave out the peer's durability declaration.",
        "model.ledger.rules",
        "        \"durability\": \"durable-node\" if durable else \"non-durable\",  # the peer's declaration\n", "",
        ("port-storm",), ci_seed=0, ci_duration="30s"),
    Mutant(
        "sqlite-ledger-claims-encryption-at-rest",
        "The SQLite adapter declares encryption at rest over a plain database file.",
        "model.ledger.sqlite_store", "adapter=\"sqlite\", encryption_at_rest=False)",
        "adapter=\"sqlite\", encryption_at_rest=True)", LS, store="sqlite", ci_seed=2, ci_duration="10s"),
    Mutant(
        "ledger-scan-answers-payloads",
        "The scan of open work answers whole records, the input and the admission metadata included, instead "
        "of the control fields only.",
        "model.ledger.rules", "            found.append(row_to_scan_row(row, own=own is not None and own(row)))\n",
        "            found.append(row_to_record(row, own=own is not None and own(row)))\n", LS_PS,
        ci_seed=1, ci_duration="30s", ci_scenario="port-storm"),
    Mutant(
        "ledger-empty-receipt-readable",
        "A stored row with an empty receipt is scanned as readable instead of failing the scan typed.",
        "model.ledger.rules", "        if type(row.receipt) is not str or not row.receipt:\n",
        "        if type(row.receipt) is not str:\n", LS_PS,
        equivalent="only a broken promise stores an empty receipt (the beyond-contract row rot empties one), and "
                   "the reference ledger refuses a scan answer carrying it as it refuses any damaged row: the "
                   "run is DETECTED either way (40 seeds of 2h, both scenarios, survived); the typed refusal "
                   "itself is held on both adapters by the ledger typed-error tests"),
    Mutant(
        "ledger-child-release-last-wins",
        "A second release of a child reservation with other accounting replaces the frozen accounting "
        "instead of conflicting.",
        "model.ledger.rules",
        "    if entry[\"releasedAtMs\"] is not None:\n        if digest(entry[\"accounting\"]) != accounting_digest:\n",
        "    if entry[\"releasedAtMs\"] is not None and digest(entry[\"accounting\"]) == accounting_digest:\n"
        "        if digest(entry[\"accounting\"]) != accounting_digest:\n", ("port-storm",), ci_seed=1, ci_duration="5m"),
    Mutant(
        "ledger-release-child-no-wake",
        "The release of a child a suspended parent awaits freezes the accounting but never counts it off the "
        "parent's awaited children, so the parent stays suspended after its last child settled.",
        "model.ledger.rules",
        "    awaited = row.children_awaited - 1 if entry[\"awaited\"] else row.children_awaited\n",
        "    awaited = row.children_awaited\n", ("port-storm",), ci_seed=0, ci_duration="4m"),
    Mutant(
        "ledger-input-marker-position-ignored",
        "A repeat of the input marker replays whatever log position it names, so a marker pointing elsewhere "
        "than the input record is accepted instead of conflicting.",
        "model.ledger.rules",
        "        if (row.input_record_id, row.input_seq) != (record_id, seq):\n"
        "            raise InputMarkerConflict(row.submission_id, row.input_record_id, row.input_seq, record_id, seq)\n",
        "", ("port-storm",), ci_seed=0, ci_duration="4m"),
    Mutant(
        "ledger-decision-ignores-children",
        "An approval decision counts only the undecided approvals as still pending, not the awaited children, "
        "so a decision with a child still awaited answers as the one that resumed the submission.",
        "model.ledger.rules", "                            pending + row.children_awaited), \\\n",
        "                            pending), \\\n", ("port-storm",), ci_seed=0, ci_duration="4m"),
    Mutant(
        "worker-abort-read-once",
        "The worker reads the abort intent once, when it claims, so an abort requested while the submission "
        "runs is not honoured at its next step.",
        "model.submissions", "            if aborted or await self._abort_requested(submission_id):\n",
        "            if aborted:\n", LS, ci_seed=3, ci_duration="30m"),
    Mutant(
        "worker-input-despite-abort",
        "The worker appends the input record of a submission whose abort intent was already durable when it "
        "claimed it (aborted before its input ever reached the log).",
        "model.submissions", "        if not record.input_applied and not aborted:\n",
        "        if not record.input_applied:\n", LS, ci_seed=31, ci_duration="30m"),
    Mutant(
        "worker-skips-takeover",
        "The worker never takes the log over at its claim's epoch (its first append would), so until then a "
        "stale owner's appends still land and the new owner reads a history that can still change.",
        "model.submissions", "        await self.lifecycle.take_over(conversation_id, claim)\n", "", LS,
        ci_seed=0, ci_duration="5m"),
    Mutant(
        "worker-acts-past-lease",
        "A worker trusts its renew once it is answered: it does the step's effect however late the answer came "
        "(held by a partition, delayed by a slow store) or however long it stalled after, its lease over by "
        "its own clock and the lane perhaps another owner's.",
        "model.submissions", "            self.require_lease(claim, renewal.lease_expires_ms, asked_ms)\n", "", LS,
        ci_seed=1, ci_duration="30m"),
    # Shown only with the stores on their own clock ahead of the worker's,
    # when a step's effect lands between the lease's end as the worker
    # measures it and the expiry the store granted: the workers aim one step
    # in 32 there (``scenarios.workloads.submissions.LEASE_EDGE_ONE_IN``).
    Mutant(
        "worker-trusts-the-stores-expiry",
        "A worker checks its lease against the expiry the ledger granted only, read on its own clock: a ledger "
        "on its own clock, ahead of the worker's, granted it from a later reading, so the worker believes its "
        "lease lasts longer than it does and acts after the lane may be another owner's.",
        "model.submissions", "            self.require_lease(claim, renewal.lease_expires_ms, asked_ms)\n",
        "            self.require_lease(claim, renewal.lease_expires_ms)\n", LS, ci_seed=6, ci_duration="5m"),
    Mutant(
        "worker-defers-before-marking-input",
        "A worker asked to defer its head releases it and hands the lane over right after appending its input, "
        "before it marks the input applied: it hands over a head whose input it never applied.",
        "model.submissions",
        "            await self.ledger.mark_input_applied(claim, input_record_id(submission_id), at.first_seq)\n"
        "            if self.defers(record):\n",
        "            if self.defers(record):\n"
        "                return await self._defer(conversation_id, claim)\n"
        "            await self.ledger.mark_input_applied(claim, input_record_id(submission_id), at.first_seq)\n"
        "            if self.defers(record):\n", LS, ci_seed=2, ci_duration="30s"),
    Mutant(
        "worker-hands-over-naming-only-its-head",
        "A worker that defers its head names only that head as deferred in its handoff, forgetting the heads "
        "deferred before it that are still unsettled ahead of the submission it hands the lane to.",
        "model.submissions", "            handoff = ClaimHandoff(claim.epoch, tuple(deferred), row.submission_id)\n",
        "            handoff = ClaimHandoff(claim.epoch, (claim.submission_id,), row.submission_id)\n", LS,
        ci_seed=11, ci_duration="5m"),
    Mutant(
        "worker-resume-reapplies-input",
        "A deferred head's resumed claim applies its input again (the append finds its batch, the marker "
        "replays) instead of taking it from the log, and so defers it once more, every time it resumes.",
        "model.submissions", "        if not record.input_applied and not aborted:\n", "        if not aborted:\n", LS,
        ci_seed=2, ci_duration="30s"),
    Mutant(
        "runs-takeover-after-read",
        "A sentinel run's new owner inspects the log's tail before taking the log over at its claim's epoch.",
        "model.runs",
        "        await self.lifecycle.take_over(run_id, claim)\n        self._claims[run_id] = claim\n",
        "        await self.log.inspect_tail(run_id)\n        await self.lifecycle.take_over(run_id, claim)\n"
        "        self._claims[run_id] = claim\n", SY, ci_seed=0, ci_duration="5m"),
    Mutant(
        "sqlite-deferred-begin",
        "SQLite write transactions start with a deferred BEGIN instead of BEGIN IMMEDIATE, so a read-then-write "
        "can fail with SQLITE_BUSY_SNAPSHOT that the busy timeout never retries.",
        "model.sqlite_db", '        conn.execute("BEGIN IMMEDIATE")\n', '        conn.execute("BEGIN")\n', LS,
        store="sqlite", ci_seed=0, ci_duration="1h"),
    Mutant(
        "sqlite-busy-untyped",
        "A busy database (SQLITE_BUSY at BEGIN IMMEDIATE) is not recognised as write contention: the caller "
        "gets a bare OperationalError, which no retry rule retries.",
        "model.sqlite_db", "    if code is not None and (code & 0xFF) in _CONTENTION_CODES:\n        return True\n"
        "    message = str(exc).lower()\n"
        '    return "database is locked" in message or "database is busy" in message\n',
        "    return False\n", ALL, store="sqlite", ci_seed=1, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "sqlite-corruption-untyped",
        "The adapters' cursor skips its corruption check and hands SQLite's bare DatabaseError on, so a page a "
        "latent sector error damaged is a storage failure like any other, not StorageCorrupted.",
        "model.sqlite_db",
        "    corrupted = corruption_of(error)\n    if corrupted is None:\n        return error\n",
        "    corrupted = None\n    if corrupted is None:\n        return error\n",
        LS, store="sqlite", ci_beyond=True, ci_seed=47, ci_duration="5m"),
    Mutant(
        "log-verify-page-cursor",
        "Verifying the log on open pages by the count of rows a page returned instead of the last sequence "
        "number it reached, so a log longer than one page is re-read and refused as corrupt.",
        "model.conversation.sqlite_store", "                after = rows[-1][0]\n",
        "                after = len(rows)\n", LS_PS, store="sqlite", ci_seed=0, ci_duration="5m",
        ci_scenario="port-storm"),

    # -- the conversation log: fenced appends, the chain, recovery reads -------------------
    Mutant(
        "log-append-skips-epoch",
        "Append skips the stale-epoch check: a fenced-out producer's batch lands when its expected tail "
        "still matches.",
        "model.conversation.rules",
        "    if request.epoch != conversation.epoch:\n        raise FenceRejected(cid, request.epoch, conversation.epoch)\n",
        "", ALL, ci_seed=1, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "log-append-higher-epoch-takes-over",
        "An append at an epoch above the conversation's takes the log over (as materialize does) instead of "
        "being fenced: the old rule, not the peer's exact-epoch rule.",
        "model.conversation.rules",
        "    if request.epoch != conversation.epoch:\n        raise FenceRejected(cid, request.epoch, conversation.epoch)\n",
        "    if request.epoch < conversation.epoch:\n        raise FenceRejected(cid, request.epoch, conversation.epoch)\n",
        ("port-storm",),
        ci_seed=2, ci_duration="1m"),
    Mutant(
        "log-replay-before-fence",
        "A committed batch id is answered (replay or batch-digest) before the epoch check, so a fenced-out "
        "producer's retry still gets its replay: the old order, not the peer's.",
        "model.conversation.rules",
        "    if request.epoch != conversation.epoch:\n        raise FenceRejected(cid, request.epoch, conversation.epoch)\n",
        "    if existing_batch is not None and existing_batch.tail_digest == chain_digest(\n"
        "            request.expected_tail_digest, prepared.batch_digest, request.expected_tail_seq + 1):\n"
        "        return replay_result(existing_batch)\n"
        "    if request.epoch != conversation.epoch:\n        raise FenceRejected(cid, request.epoch, conversation.epoch)\n",
        ("port-storm",), ci_seed=2, ci_duration="1m"),
    Mutant(
        "log-replay-ignores-expected-tail",
        "A committed batch id with the same content is a replay whatever expected tail the request names "
        "(batch digests compared, not the chain step from the request's tail): the old rule.",
        "model.conversation.rules",
        "        if existing_batch.tail_digest == from_request:\n",
        "        if existing_batch.batch_digest == prepared.batch_digest:\n", ("port-storm",),
        ci_seed=2, ci_duration="1m"),
    Mutant(
        "log-identity-before-tail",
        "Record identity is checked before the expected tail, so a stale request reusing a record id is "
        "told record-identity, not tail with the actual tail: the old order.",
        "model.conversation.rules",
        "    if request.expected_tail_seq != conversation.tail_seq or request.expected_tail_digest != conversation.tail_digest:\n"
        "        raise AppendConflict(\n",
        "    if set(reused_record_ids) or len(set(prepared.record_ids)) != len(prepared.record_ids):\n"
        "        pass\n"
        "    elif request.expected_tail_seq != conversation.tail_seq or request.expected_tail_digest != conversation.tail_digest:\n"
        "        raise AppendConflict(\n", ("port-storm",),
        ci_seed=2, ci_duration="1m"),
    Mutant(
        "log-batch-too-large-untyped",
        "A batch over 256 records is refused with a bare ValueError, not the typed BatchTooLarge naming the "
        "operation and the limit.",
        "model.conversation.rules",
        '        raise BatchTooLarge("append", BATCH_RECORDS_MAX, len(records))\n',
        '        raise ValueError(f"a batch holds 1..{BATCH_RECORDS_MAX} records, got {len(records)}")\n',
        ("port-storm",), ci_seed=2, ci_duration="1m"),
    Mutant(
        "log-read-limit-untyped",
        "A read limit outside 1..1024 is a bare ValueError, not the typed ReadLimitOutOfRange.",
        "model.conversation.rules",
        '        raise ReadLimitOutOfRange("read", limit, PAGE_SIZE_MAX)\n',
        '        raise ValueError(f"limit must be in 1..{PAGE_SIZE_MAX}, got {limit}")\n',
        ("port-storm",), ci_seed=2, ci_duration="1m"),
    Mutant(
        "log-append-refuses-administrative-producer",
        "Append fences another producer at the conversation's current epoch (the producer's identity checked "
        "as well as its epoch), so a queued abort's administrative append is refused.",
        "model.conversation.rules",
        "    if request.epoch != conversation.epoch:\n        raise FenceRejected(cid, request.epoch, conversation.epoch)\n",
        "    if request.epoch != conversation.epoch:\n        raise FenceRejected(cid, request.epoch, conversation.epoch)\n"
        "    if request.producer_id != conversation.producer_id:\n"
        "        raise FenceRejected(cid, request.epoch, conversation.epoch)\n",
        ("ledger-storm", "agent-conversations", "port-storm"), ci_seed=9, ci_duration="1m", ci_scenario="agent-conversations"),
    Mutant(
        "lifecycle-administrative-append-takes-over",
        "A queued abort's aborter takes the log over at the next epoch before its append instead of appending "
        "at the current one, fencing the lane's running owner.",
        "model.lifecycle",
        "            try:\n                if tail.tail_seq == 0:",
        "            await self.log.materialize(conversation_id, producer_id, tail.epoch + 1)\n"
        "            tail = ConversationTail(tail.tail_seq, tail.tail_digest, tail.epoch + 1)\n"
        "            try:\n                if tail.tail_seq == 0:",
        ("ledger-storm", "agent-conversations"), ci_seed=15, ci_duration="30s"),
    Mutant(
        "log-materialize-epoch-back",
        "Materialize lets any other epoch take the conversation over, a lower one included, so a stale owner "
        "moves the log's epoch back.",
        "model.conversation.rules", "    if epoch > current_epoch:\n        return MATERIALIZE_TAKEOVER\n",
        "    if epoch != current_epoch:\n        return MATERIALIZE_TAKEOVER\n", ALL,
        ci_seed=0, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "log-replay-without-digest",
        "A batch id already committed is always answered as an exact retry, without comparing batch digests "
        "(different content under a reused id is silently dropped).",
        "model.conversation.rules",
        "        if existing_batch.tail_digest == from_request:\n            return replay_result(existing_batch)\n"
        '        raise AppendConflict(cid, "batch-digest", request.batch_id)\n',
        "        return replay_result(existing_batch)\n", ALL,
        ci_seed=0, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "log-tail-seq-only",
        "Append checks the expected tail sequence but not the expected tail digest.",
        "model.conversation.rules",
        "    if request.expected_tail_seq != conversation.tail_seq or request.expected_tail_digest != conversation.tail_digest:\n",
        "    if request.expected_tail_seq != conversation.tail_seq:\n", ALL,
        ci_seed=2, ci_duration="2m", ci_scenario="port-storm"),
    Mutant(
        "log-batch-cap-1024",
        "Append takes a batch of up to 1,024 records, four times the peer's limit of 256 on one canonical "
        "batch: a history written here has batches no peer store accepts.",
        "model.conversation.rules",
        "    if len(records) > BATCH_RECORDS_MAX:\n",
        "    if len(records) > 1024:\n", ("port-storm",), ci_seed=2, ci_duration="30s"),
    Mutant(
        "log-bounds-untyped",
        "An envelope over the store's canonical-JSON bounds (nested past 64 containers, or over 1,000,000 "
        "elements and members) is refused with a bare ValueError from a trial decode, not the typed "
        "CanonicalJsonBoundsError naming the traversal bound.",
        "model.conversation.rules",
        "            check_bounds(record.to_json(), ENVELOPE_BOUNDS)  # CanonicalJsonBoundsError (a ValueError)\n",
        "            try:\n                decode(text, **ENVELOPE_DECODE_CAPS)\n"
        "            except CanonicalDecodeError as exc:\n"
        '                raise ValueError(f"records[{index}] exceeds the decode caps: {exc}") from None\n',
        ("port-storm",), ci_seed=1, ci_duration="30s"),
    Mutant(
        "log-chain-unlinked",
        "Each batch's tail digest is chained from zeros instead of the previous tail digest, so the chain no "
        "longer commits to earlier batches.",
        "model.conversation.rules",
        '        ("previousTailDigest", scalar(previous_tail_digest)),\n    ]))\n',
        '        ("previousTailDigest", scalar(ZERO_DIGEST)),\n    ]))\n', ALL, ci_seed=0, ci_duration="6h"),
    Mutant(
        "log-short-page-end",
        "The recovery read takes a short page as the end of history and checks the digest chain only when "
        "it read up to the captured tail.",
        "model.conversation.recovery",
        "        if len(got) != want:\n            expected = after_seq + len(got) + 1\n"
        "            raise HistoryCorrupted(\n                conversation_id, expected if len(got) < want else after_seq + want + 1,\n"
        "                None if len(got) < want else got[want].seq,\n"
        '                f"page after seq {after_seq} returned {len(got)} records, expected {want}",\n'
        "                HistoryCorrupted.SHORT_PAGE if len(got) < want else HistoryCorrupted.LONG_PAGE, after_seq,\n"
        "            )\n        records.extend(got)\n"
        "    recomputed = recompute_chain(conversation_id, records, start_seq + 1, after_digest)\n"
        "    if recomputed != tail.tail_digest:\n",
        "        records.extend(got)\n        if len(got) < want:\n            break  # a short page: the end of history\n"
        "    recomputed = recompute_chain(conversation_id, records, start_seq + 1, after_digest)\n"
        "    if len(records) == total - start_seq and recomputed != tail.tail_digest:\n", LS_PS,
        ci_seed=4, ci_duration="30m", ci_scenario="port-storm"),
    Mutant(
        "log-short-last-page-accepted",
        "The recovery read takes a short last page for the log's end (only an earlier page must be full), so a "
        "damaged last page is not refused at the page: the read fails later, at the chain check, for another "
        "reason.",
        "model.conversation.recovery",
        "        if len(got) != want:\n            expected = after_seq + len(got) + 1\n",
        "        if len(got) > want or (len(got) < want and after_seq + want < total):\n"
        "            expected = after_seq + len(got) + 1\n", LS_PS,
        ci_seed=11, ci_duration="5m", ci_scenario="ledger-storm"),
    Mutant(
        "log-gap-accepted",
        "The recovery read's page check looks only at the last sequence number a page reaches, so a page "
        "missing a record in the middle passes it.",
        "model.conversation.recovery",
        "        for offset, record in enumerate(got[:want]):\n            expected = after_seq + offset + 1\n"
        "            if record.seq != expected:\n"
        '                raise HistoryCorrupted(conversation_id, expected, record.seq, "non-contiguous page",\n'
        "                                       HistoryCorrupted.GAP, after_seq)\n"
        "        if len(got) != want:\n",
        "        if not got or got[-1].seq != after_seq + want:\n", LS_PS,
        ci_seed=2, ci_duration="1h"),
    Mutant(
        "log-chain-gap-regrouped",
        "Recomputing the digest chain regroups records by batch id alone and ignores their sequence numbers, "
        "so a gap is not a corruption.",
        "model.conversation.rules",
        "        if record.seq != expected:\n"
        '            raise HistoryCorrupted(conversation_id, expected, record.seq, "sequence gap")\n', "", LS_PS,
        equivalent="a recovery read checks each page is contiguous before the chain is recomputed (a gap is "
                   "HistoryCorrupted there first), and where the chain is recomputed over stored rows (SQLite "
                   "verify on open) a gap changes the digest too (firstSeq, the records): only the error's text "
                   "differs"),

    # -- the lifecycle: reserve -> append -> finalize, the canonical record wins ---------------
    Mutant(
        "lifecycle-record-ids-by-place",
        "Every record is named by its place in its batch ({batch}#{index}), as before the peer's formats: "
        "the input, settlement and abort records are no longer input:{sid}, settlement:{sid}, abort:{sid}.",
        "model.lifecycle",
        '    if type(payload) is dict and type(payload.get("submissionId")) is str:\n',
        "    if False:\n", BOTH,
        ci_seed=0, ci_duration="1m"),
    Mutant(
        "lifecycle-settle-batch-id-old",
        "The settlement batch is named settle:{sid}, the model's old format, not the peer's "
        "submission-settlement:{sid}.",
        "model.lifecycle",
        '    return f"submission-settlement:{submission_id}"\n',
        '    return f"settle:{submission_id}"\n', BOTH,
        ci_seed=0, ci_duration="1m"),
    Mutant(
        "lifecycle-finalize-before-append",
        "Terminalization finalizes the ledger before appending the canonical settlement record to the log.",
        "model.lifecycle",
        "        self.failpoints.hit(RESERVED_BEFORE_APPEND)\n        if logged is None or append_if_logged:\n"
        "            await append(settle_batch_id(submission_id), envelope)\n"
        "        self.failpoints.hit(APPENDED_BEFORE_FINALIZE)\n"
        "        settlement = await self.ledger.finalize_settlement(\n"
        "            submission_id, self.now_ms() if finalized_at_ms is None else finalized_at_ms)\n",
        "        self.failpoints.hit(RESERVED_BEFORE_APPEND)\n"
        "        settlement = await self.ledger.finalize_settlement(\n"
        "            submission_id, self.now_ms() if finalized_at_ms is None else finalized_at_ms)\n"
        "        self.failpoints.hit(APPENDED_BEFORE_FINALIZE)\n        if logged is None or append_if_logged:\n"
        "            await append(settle_batch_id(submission_id), envelope)\n", BOTH,
        ci_seed=0, ci_duration="6h"),
    Mutant(
        "lifecycle-ledger-over-log",
        "Repair trusts the ledger over the log: the reserved record wins over the settlement record the log "
        "already holds.",
        "model.lifecycle",
        "    if logged is not None:\n        return logged\n    if reserved is not None:\n        return reserved\n",
        "    if reserved is not None:\n        return reserved\n    if logged is not None:\n        return logged\n",
        BOTH,
        equivalent="within the contract the two cannot differ: a reservation never changes once made, and the "
                   "settlement is appended to the log (fenced) only after reserving that exact record, so which "
                   "one wins never shows (a lost or rotten write is beyond the contract)"),
    Mutant(
        "lifecycle-fresh-over-reserved",
        "A successor settles with a freshly computed record instead of the one its predecessor reserved.",
        "model.lifecycle", "    if reserved is not None:\n        return reserved\n    return fresh()\n",
        "    return fresh()\n", BOTH,
        ci_seed=5, ci_duration="2h", ci_scenario="ledger-storm"),
    Mutant(
        "repair-drops-parent-link",
        "A ledger rebuilt from the log admits every submission without the parent link its input record "
        "carries: a rebuilt child is no longer its parent's.",
        "model.repair", '        link = payload.get("parentLink")\n', "        link = None\n", AC,
        ci_seed=0, ci_duration="5m"),
    Mutant(
        "repair-drops-admission-policy",
        "A ledger rebuilt from the log admits every submission without the admission group and metadata its "
        "input record carries: a rebuilt group is free, a rebuilt worker lane ordinary.",
        "model.repair", '                                       payload.get("admissionGroup"), None, '
        'payload.get("metadata"))\n',
        "                                       None, None, None)\n", BOTH + AC,
        ci_seed=9, ci_duration="30s", ci_scenario="ledger-storm"),
    Mutant(
        "rebuild-admits-group-member-before-settlements",
        "A ledger rebuilt from the log admits every input of a conversation before it replays any settlement, so "
        "a second member of an admission group there is refused: the group's first member is not settled yet.",
        "model.repair", '        if canonical is not None and canonical.envelope.payload.get("admissionGroup") is not None:\n',
        "        if False:\n", BOTH + AC, ci_seed=0, ci_duration="7m", ci_scenario="ledger-storm"),
    Mutant(
        "input-record-drops-parent-link",
        "The input record leaves out the admission's parent link, so nothing in the log says whose child it is.",
        "model.lifecycle", '        payload["parentLink"] = {"submissionId": parent.submission_id, '
        '"toolCallId": parent.tool_call_id}\n', "        pass\n", AC,
        ci_seed=0, ci_duration="5m"),
    Mutant(
        "runs-resume-settled",
        "A restarted worker resumes a run whose log already holds its settlement instead of only finalizing it "
        "(it looks for the logged settlement only once the ledger says the run settled).",
        "model.runs", "        settlement = await self.lifecycle.adopt_logged(run_id, record)\n",
        "        settlement = None if record.outcome is None else await self.lifecycle.adopt_logged(run_id, record)\n",
        SY, ci_seed=10, ci_duration="6h"),

    Mutant(
        "runs-parked-claim-kept",
        "A worker keeps its claim on a run while the run is parked in doubt; when the on-call operator has "
        "resolved it under a newer claim, the worker resumes it under its old one (fenced, and its driver crashes). "
        "No swarm seed of 0:16 reaches it within 7d (tests/test_indoubt.py holds it on the full mix).",
        "model.runs", "                self._forget(record.conversation_id)\n", "                pass\n", SY),

    Mutant(
        "runs-settlement-drops-findings",
        "A run's settlement record leaves its findings out of the result (they were emitted as events "
        "already), so what the ledger retains is not what the run returned.",
        "model.runs", '        return {"outcome": "completed", "result": output}\n',
        '        return {"outcome": "completed", "result": {k: v for k, v in output.items() if k != "findings"}}\n',
        SY,
        ci_seed=0, ci_duration="6h"),

    # -- schedules: one live occurrence, the high-water mark, retired occurrences --------------
    Mutant(
        "runs-duplicate-wake-runs",
        "A replayed admission (a duplicate alarm) is reported as a fresh start, so the driver runs the "
        "occurrence a second time.",
        "model.runs", "        if admission.replayed:\n            return StartOutcome(await self.load_execution(run_id), True)\n",
        "        if admission.replayed:\n            return StartOutcome(await self.load_execution(run_id), False)\n",
        SY, ci_seed=8, ci_duration="1d"),
    Mutant(
        "sched-parked-forgotten",
        "A driver resuming its schedule forgets a run that parked in doubt, so the next occurrence starts "
        "beside it (two live occurrences, one of them waiting on an operator).",
        "model.schedules", '                self._parked = outcome.status == "parked"\n',
        "                self._parked = False\n", SY, ci_seed=1, ci_duration="1d"),
    Mutant(
        "sched-busy-ignored",
        "A wake delivered while the schedule's run is in progress starts the next occurrence anyway (only a "
        "parked run blocks): two live occurrences.",
        "model.schedules", "        if self._busy or self._parked:\n", "        if self._parked:\n", SY,
        ci_seed=14, ci_duration="3h"),
    Mutant(
        "sched-high-water-cursor-only",
        "The schedule's high-water mark is read from the cursor alone, ignoring a live run admitted before "
        "the cursor advanced.",
        "model.runs",
        "        high = cursor.high_water_ms\n        for record in await self.live_executions(schedule_id):\n",
        "        high = cursor.high_water_ms\n        for record in ():\n", SY,
        equivalent="recover resumes every live run before it reads the mark, and resuming a half-admitted run "
                   "advances the cursor (admission advances it before marking the run ready), so the cursor is "
                   "never behind a live run when the mark is read"),
    Mutant(
        "runs-retired-off-by-one",
        "A start refuses occurrences strictly below the archive watermark, so the last retired occurrence "
        "can start again once its ledger row is gone.",
        "model.runs", "occurrence_ms <= cursor.archived_through_ms:\n", "occurrence_ms < cursor.archived_through_ms:\n",
        SY, equivalent="the start's next guard refuses every occurrence at or below the high-water mark without a "
                       "ledger row, and retention retires only at or below the mark, so the last retired occurrence "
                       "(its row deleted) is refused either way; a held one keeps its row and replays its receipt"),

    # -- the kernel: step records, replay, migration markers ---------------------------
    Mutant(
        "kernel-writes-unflushed",
        "The group-commit flag is inverted: earlier step records are flushed before read-only effects instead "
        "of before writing ones, so a re-run after a crash re-reads state its own write changed.",
        "model.kernel.kernel", "        elif writes and pending:\n", "        elif not writes and pending:\n", SY_PS,
        ci_seed=0, ci_duration="5m", ci_scenario="port-storm"),
    Mutant(
        "kernel-no-intent",
        "A non-idempotent effect runs without its intent (STEP_STARTED) recorded first, so a crash after it "
        "re-runs it on resume instead of parking the run in doubt.",
        "model.kernel.kernel", "        if not idempotent:\n            pending.append(",
        "        if False:\n            pending.append(", SY_PS, ci_seed=0, ci_duration="2m",
        ci_scenario="port-storm"),
    Mutant(
        "kernel-replay-rereads",
        "Resuming a run re-runs its recorded read-only effects (to refresh them) before folding the recorded "
        "value, so replay touches the stores.",
        "model.kernel.kernel",
        "        if self._cursor < len(log):\n            return await self._fold(step_id)\n",
        "        if self._cursor < len(log):\n            if not writes:\n                await effect()\n"
        "            return await self._fold(step_id)\n", SY_PS, ci_seed=0, ci_duration="2m",
        ci_scenario="port-storm"),
    Mutant(
        "kernel-replay-resolves-ref",
        "A resumed run folds a claim-checked step by fetching its bytes back from the content store instead of "
        "folding the recorded reference.",
        "model.kernel.kernel",
        "        if step.kind == STEP_COMPLETED:\n            self._cursor += 1\n            self.replayed += 1\n"
        "            return step.output\n",
        "        if step.kind == STEP_COMPLETED:\n            self._cursor += 1\n            self.replayed += 1\n"
        "            output = step.output\n            if self._kernel is not None:\n"
        "                from model.claimcheck import ClaimCheck, is_claim_ref, resolve_ref\n"
        "                for layer in self._kernel.middleware:\n"
        "                    if isinstance(layer, ClaimCheck) and is_claim_ref(output):\n"
        "                        output = await resolve_ref(layer._content_store, output)\n"
        "            return output\n", SY, ci_seed=5, ci_duration="7d"),
    Mutant(
        "kernel-migration-unrecorded",
        "A run resumed on new code is migrated in memory only: the EXECUTION_MIGRATED marker is never made "
        "durable.",
        "model.kernel.kernel",
        "        marker = await self.store.append_step(\n            run_id, len(log) + 1,",
        "        marker = StepRecord(\n            run_id, len(log) + 1,", SY_PS, ci_seed=0, ci_duration="2m",
        ci_scenario="port-storm"),

    # -- claim-check, the content store, pins, findings, retention ---------------------------
    Mutant(
        "claimcheck-keeps-bytes",
        "Claim-check stores the blob of a tool without a declared digest but records the payload itself, so "
        "those outputs stay inline over the cap.",
        "model.claimcheck", '        if digest_fn is None:\n            return {"ref": ref, "size": size}\n',
        "        if digest_fn is None:\n            return output\n", SY_PS, ci_seed=0, ci_duration="1d", ci_scenario="port-storm"),
    Mutant(
        "claimcheck-blob-unindexed",
        "Claim-checked blobs are stored but never recorded in the pin index, so retention never sees (or "
        "reclaims) them.",
        "model.claimcheck", "        await self._index.record_blob(ref, size, stored_at_ms=self._now_ms())\n", "", SY_PS,
        ci_seed=1, ci_duration="1m", ci_scenario="port-storm"),
    Mutant(
        "content-unverified",
        "The in-memory content store returns a blob without checking that its bytes still hash to its ref.",
        "model.conversation.content_store",
        "    actual = content_ref(data)\n    if actual != ref:\n        raise ContentCorrupted(ref, actual)\n", "", SY_PS,
        ci_seed=1, ci_duration="6m", ci_scenario="port-storm"),
    Mutant(
        "retention-drops-pins",
        "Retention keeps a pin only if its holder is a live run id, but holders are finding ids: every pin is "
        "dropped each pass and cited evidence is reclaimed.",
        "model.retention", "        live_ids = {f.finding_id for f in await self.findings.live_findings()}\n",
        "        live_ids = {f.run_id for f in await self.findings.live_findings()}\n", SY,
        ci_seed=5, ci_duration="3d"),
    Mutant(
        "projector-pins-after-apply",
        "The projector applies a run's findings before pinning their evidence, so a crash in between leaves "
        "cited blobs unpinned for good.",
        "model.findings",
        "                for finding in found:\n                    for ref in finding[\"evidence\"]:\n"
        "                        await pins.pin(ref, finding[\"id\"])\n"
        "                await findings.apply_run(schedule_id, occurrence_ms, run_id, found,\n"
        "                                         settled_at_ms=record.settled_at_ms)\n",
        "                await findings.apply_run(schedule_id, occurrence_ms, run_id, found,\n"
        "                                         settled_at_ms=record.settled_at_ms)\n"
        "                for finding in found:\n                    for ref in finding[\"evidence\"]:\n"
        "                        await pins.pin(ref, finding[\"id\"])\n", SY,
        ci_seed=14, ci_duration="9d"),
    Mutant(
        "retention-closes-findings-early",
        "Retention closes findings at half their TTL: evidence a finding cites loses its pin while the finding "
        "should still be live.",
        "model.retention",
        "        closed = await self.findings.close_expired(max(0, now_ms - policy.finding_ttl_ms), now_ms=now_ms,\n",
        "        closed = await self.findings.close_expired(max(0, now_ms - policy.finding_ttl_ms // 2), now_ms=now_ms,\n",
        SY, ci_seed=0, ci_duration="2d"),
    Mutant(
        "findings-drops-first",
        "The in-memory projection skips a run's first finding when applying it (an off-by-one slice).",
        "model.findings", "        opened = 0\n        for row in rows:\n            if row.finding_id in self._live:\n",
        "        opened = 0\n        for row in rows[1:]:\n            if row.finding_id in self._live:\n", SY,
        ci_seed=0, ci_duration="1d"),
    Mutant(
        "projector-skips-unadmitted",
        "The projector moves its checkpoint past the latest due occurrence before it is admitted, so that "
        "run's findings are never projected.",
        "model.findings",
        "                if occurrence_ms + schedule.every_ms > high_ms:\n"
        "                    break  # the latest occurrence may not be admitted yet\n", "", SY,
        ci_seed=15, ci_duration="14d"),
    Mutant(
        "retention-passes-open-work",
        "Retention skips over a run with open work and retires the settled runs behind it.",
        "model.retention", "                return  # open work: nothing behind it is retired before it\n",
        "                pass  # open work: retired later\n", SY,
        equivalent="retention never passes min(TTL, the cursor's high water, the findings checkpoint); the "
                   "projector stops at the first unsettled run and a schedule has one live occurrence (a parked "
                   "run blocks its driver), so no settled run ever lies behind open work"),
    Mutant(
        "retention-delete-before-retire",
        "Retention deletes a run's rows before moving the archive watermark past it, so a crash in between "
        "leaves a run deleted but not archived: the next pass finds no ledger row and archives the occurrence "
        "as one that never ran.",
        "model.retention",
        "                await store.retire(schedule_id, occurrence_ms, run_id, summary)\n"
        "                await self._delete(run_id)\n",
        "                await self._delete(run_id)\n"
        "                await store.retire(schedule_id, occurrence_ms, run_id, summary)\n", SY,
        ci_seed=1, ci_duration="3d"),

    # -- checkpoints (persistence §8) ------------------------------------------------------
    Mutant(
        "checkpoint-digest-unchecked",
        "A recovery uses the latest checkpoint without checking the log's digest at its position still "
        "matches.",
        "model.conversation.checkpoints",
        "    if await log.digest_at(conversation_id, checkpoint.covered_seq) != checkpoint.tail_digest:\n"
        '        return CheckpointDecision(None, "digest-mismatch")\n', "", LS_PS,
        equivalent="both built-in stores' load_latest refuse a checkpoint whose digest the log no longer has "
                   "(CheckpointUnusable digest-mismatch, in the same snapshot as the row; issue 13), so this "
                   "re-check of the log never sees a mismatch: it guards third-party stores only"),
    Mutant(
        "checkpoint-definition-unchecked",
        "A recovery uses the latest checkpoint whatever configuration made it: after a deploy of a new agent "
        "configuration, a checkpoint of the old one is trusted.",
        "model.conversation.checkpoints", "    if checkpoint.definition_digest != definition_digest:\n",
        "    if checkpoint.definition_digest != checkpoint.definition_digest:\n", AC,
        ci_seed=9, ci_duration="6h"),
    Mutant(
        "checkpoint-model-unchecked",
        "A recovery uses the latest checkpoint whatever model configuration made it: after a deploy that "
        "changes the agent's model, a checkpoint written under the old one is trusted.",
        "model.conversation.checkpoints", "    if checkpoint.model_digest != model_digest:\n",
        "    if checkpoint.model_digest != checkpoint.model_digest:\n", AC,
        ci_seed=6, ci_duration="1h"),
    Mutant(
        "checkpoint-tools-unchecked",
        "A recovery uses the latest checkpoint whatever tool set made it: after a deploy that changes the "
        "agent's tools, a checkpoint written under the old ones is trusted.",
        "model.conversation.checkpoints", "    if checkpoint.tool_digest != tool_digest:\n",
        "    if checkpoint.tool_digest != checkpoint.tool_digest:\n", AC,
        ci_seed=12, ci_duration="2h"),
    Mutant(
        "checkpoint-save-unchecked",
        "Saving a checkpoint no longer checks its tail digest against the log's digest at its position.",
        "model.conversation.checkpoints",
        "    if digest_at_covered != checkpoint.tail_digest:\n",
        "    if digest_at_covered is None:\n", LS_PS,
        ci_seed=0, ci_duration="5m", ci_scenario="port-storm"),

    # -- an agent's steps that wait for the world (model.agent) --------------------------
    Mutant(
        "agent-tool-replays-prepared",
        "A successor that finds a tool call prepared but not settled takes the idempotent one for the one in "
        "doubt: it calls a non-idempotent tool again on a guess (and marks an idempotent one unknown).",
        "model.agent", "            if prepared is not None and not idempotent:\n",
        "            if prepared is not None and idempotent:\n", AC,
        ci_seed=1, ci_duration="2h"),
    Mutant(
        "agent-settles-over-doubt",
        "A successor takes a run past its deadline to settlement without first marking a call in doubt unknown: "
        "the run settles failed while its call may still land (and does).",
        "model.agent", "        if plan_of(record)[index] == TOOL_ONCE:\n", "        if False:\n", AC,
        ci_seed=1, ci_duration="90m"),
    # Reached since requests that must answer within seconds send an email on the way (a quarter of those
    # that wait for no person or subagent: a kill or lost reply at the call leaves it in doubt right before
    # the deadline), and caught since unknown-never-replayed fails a run settled over a call in doubt whether
    # or not the call lands (seed 3 is the first of 0:16 at 90m). Seeds 0-2, 4 and 5 of the system before
    # this change pass at 6h (5 on SQLite): the failure at 6h once noted here no longer reproduces.
    Mutant(
        "agent-tool-call-without-deadline",
        "The tool is called without the deadline its preparation recorded: a paused owner's call lands after the "
        "reconciler, waiting out that deadline, resolved it as never happened (and a new attempt acts again).",
        "model.agent",
        "            result = await self.tools.invoke(call, tool, args, call if idempotent else None, deadline_ms)\n",
        "            result = await self.tools.invoke(call, tool, args, call if idempotent else None)\n", AC,
        ci_seed=1, ci_duration="30m"),
    Mutant(
        "agent-run-clock-reset",
        "A resumed run measures its duration allowance from its own claim, not from the logged start: a run "
        "suspended past its deadline goes on running.",
        "model.agent", "            started_at_ms = start.envelope.created_at_ms\n",
        "            started_at_ms = self.now_ms()\n", AC,
        ci_seed=6, ci_duration="10m"),
    Mutant(
        "agent-run-start-per-attempt",
        "Each attempt starts the run afresh under its own attempt id: a resumed run has a second RunStarted.",
        "model.agent", "            batch_id = run_start_batch_id(sid)\n",
        "            batch_id = run_start_batch_id(attempt)\n", AC,
        ci_seed=0, ci_duration="10m"),
    Mutant(
        "agent-logs-tool-argument-deltas",
        "Partial tool-argument deltas of the model's stream are logged as model deltas (never canonical).",
        "model.agent", "                    continue  # never canonical: the completed tool call is\n",
        "                    pass\n", AC,
        ci_seed=0, ci_duration="2m"),
    Mutant(
        "agent-usage-last-turn-only",
        "A run's aggregate usage counts only its last step's model call.",
        "model.agent", "    for output in outputs:\n", "    for output in outputs[-1:]:\n", AC,
        ci_seed=0, ci_duration="2m"),
    Mutant(
        "agent-approval-decision-unlogged",
        "The resumed attempt acts on the ledger's approval decision without appending it to the log first.",
        "model.agent",
        '            await self._append_once(conversation_id, claim, f"tool-{APPROVAL_DECIDED}:{call}", [entry])\n',
        "", AC,
        ci_seed=1, ci_duration="2m"),
    Mutant(
        "agent-approval-rejection-ignored",
        "A rejected approval neither fails the run nor stops it: the step reports the rejection and the run "
        "goes on to the guarded call and completes.",
        "model.agent",
        '        if decided["decision"] == REJECTED:\n'
        '            # Rejected: the guarded call and every later step never run.\n'
        '            raise WorkFailure(ApprovalRejected(call, decided["resolver"], decided["reason"]))\n', "", AC,
        ci_seed=3, ci_duration="4m"),
    Mutant(
        "agent-abort-after-settlement",
        "The settlement batch of an aborted run logs the abort intent after the settlement record it decided.",
        "model.agent", "            return [abort, *joined, entry]\n", "            return [*joined, entry, abort]\n", AC,
        ci_seed=0, ci_duration="10m"),
    Mutant(
        "agent-orphan-reservation-kept",
        "An aborted run leaves the reservation of a child it never admitted reserved: nothing will ever "
        "release it.",
        "model.agent",
        "                release = await self.ledger.release_child(sid, call, ORPHAN_ACCOUNTING, self.now_ms())\n"
        '                self.probe.emit("subagent.orphan_released", parent=sid, call=call, replayed=release.replayed)\n',
        "", AC,
        ci_seed=0, ci_duration="30m"),
    Mutant(
        "agent-child-abort-author-parent-id",
        "An aborted run aborts its open subagents under its own submission id as the author, not "
        "subagent-parent-abort.",
        "model.agent", "                await self._abort(child.submission_id, SUBAGENT_PARENT_ABORT)\n",
        "                await self._abort(child.submission_id, sid)\n", AC,
        ci_seed=1, ci_duration="30m"),
    Mutant(
        "agent-aborted-parent-no-joined",
        "An aborted run settles without a subagent joined record of the children it aborted.",
        "model.agent", "            return [abort, *joined, entry]\n", "            return [abort, entry]\n", AC,
        ci_seed=7, ci_duration="15m"),
    Mutant(
        "agent-tend-wakes-unsettled-child",
        "The tending pass releases a child's reservation without checking the child settled: the parent wakes "
        "to a child still running.",
        "model.agent", "                if child is not None and child.settled:\n",
        "                if child is not None:\n", AC,
        ci_seed=0, ci_duration="10m"),
    Mutant(
        "agent-join-unmarked",
        "A run applies a follow-up's input to its log but never marks it joined, so the follow-up goes back to "
        "the queue when the run settles and runs again on its own.",
        "model.agent",
        '        await self.ledger.mark_joined(claim, follower_id, input_record_id(follower_id), found.first_seq)\n', "", AC,
        ci_seed=0, ci_duration="10m"),
    Mutant(
        "worker-created-not-first",
        "A conversation's first record is its first submission's input: no conversation-created record "
        "opens the log (the peer's histories always begin with it).",
        "model.submissions",
        "        if tail.tail_seq == 0 and batch_id != created_batch_id(conversation_id):\n",
        "        if False:\n", ("ledger-storm", "agent-conversations"),
        ci_seed=0, ci_duration="5m"),
    Mutant(
        "runs-created-not-first",
        "A run's log begins with its input: the runs layer writes no conversation-created record first.",
        "model.runs",
        "            await self._append(run_id, created_batch_id(run_id), [created_entry(run_id)])\n",
        "", SY, ci_seed=0, ci_duration="5m"),
    Mutant(
        "agent-no-run-completed",
        "A completed run settles with no run-completed record before its settlement record.",
        "model.agent",
        '            return [(RUN_COMPLETED_FAMILY, {"runId": run_id_for(sid), "submissionId": sid}), entry]\n',
        "            return [entry]\n", AC, ci_seed=0, ci_duration="5m"),
    Mutant(
        "agent-turn-id-per-call",
        "A run's model turn is logged as the batch model-turn:{call} (its step's call id), not the peer's "
        "turn:{runId}:{n}: a history the peer's implementation reads differently.",
        "model.agent",
        "        turn_batch = turn_batch_id(run_id_for(sid), turn_number(record, index))\n",
        '        turn_batch = f"model-turn:{call}"\n', AC, ci_seed=0, ci_duration="30s"),
    Mutant(
        "agent-follower-without-run",
        "A joined follower's settlement record does not carry its host's run id.",
        "model.ledger.rules",
        "                               run_id=host.get(\"runId\"))\n",
        "                               run_id=None)\n",
        AC, ci_seed=0, ci_duration="5m"),
    Mutant(
        "agent-no-tool-resolved",
        "A call the reconciler resolved is acted on with no tool-call resolved record in the log.",
        "model.agent",
        "                if not doubt_only:\n"
        '                    await self._append_once(conversation_id, claim, f"tool-{TOOL_RESOLVED}:{call}", [\n',
        "                if False:\n"
        '                    await self._append_once(conversation_id, claim, f"tool-{TOOL_RESOLVED}:{call}", [\n',
        ("agent-conversations", "secret-agents"), ci_seed=0, ci_duration="2h"),
    # -- progress waits (model.progress, STORE-014) ------------------------------------
    Mutant(
        "progress-read-before-register",
        "The wait reads the log first and installs its registration after: a record committed in between is "
        "announced to nobody, and the wait parks until its reconnect (subscribe/check race).",
        "model.progress",
        "        registration = await notifier.register(conversation_id)\n        try:\n"
        "            found = await _read_after(log, conversation_id, after_seq)\n",
        "        found = await _read_after(log, conversation_id, after_seq)\n"
        "        registration = await notifier.register(conversation_id)\n        try:\n", AC,
        ci_seed=0, ci_duration="2m"),
    Mutant(
        "progress-park-without-latch",
        "The registration's latch is re-created after the read, just before the park: a notification that "
        "arrived while the read's reply was on its way is dropped, and the wait sleeps to its reconnect "
        "(check/park race).",
        "model.progress", "                woken = await registration.park_until_ms(deadline_ms)\n",
        "                registration.rearm()\n                woken = await registration.park_until_ms(deadline_ms)\n",
        AC,
        ci_seed=0, ci_duration="10m"),
    Mutant(
        "retention-deletes-open-log",
        "Conversation retention deletes the log first and purges the ledger after: where the purge refuses "
        "(open work), the open submissions' log is gone already.",
        "model.retention",
        "    try:\n        await ledger.purge_conversation(conversation_id)\n",
        "    await log.delete_conversation(conversation_id)\n    try:\n        await ledger.purge_conversation(conversation_id)\n",
        LS, ci_seed=31, ci_duration="4h"),
    Mutant(
        "progress-polling-loop",
        "The wait sleeps a second and rereads instead of parking on its registration: a polling loop.",
        "model.progress", "                woken = await registration.park_until_ms(deadline_ms)\n",
        "                woken = await runtime.sleep_ms(1_000) or runtime.now_ms() < deadline_ms  # look again soon\n",
        AC,
        ci_seed=0, ci_duration="2m"),
    Mutant(
        "progress-notification-authoritative",
        "A wake is taken as the truth about the log: the wait reads the notified record instead of the one after "
        "the caller's sequence, skipping what the notification did not name.",
        "model.progress",
        "                position = after_seq  # a wake only says \"reread\": the position is always the caller's\n",
        "                position = max(after_seq, registration.notified_seq - 1)  # straight to the notified record\n",
        AC,
        ci_seed=0, ci_duration="2m"),
    Mutant(
        "recovery-terminalizing-as-logged",
        "Recovery classifies a reserved settlement the log does not hold as one it holds: "
        "FinalizeLedgerFromHistory instead of AppendReservedSettlement (two decisions swapped).",
        "model.recovery_decisions",
        "    (TERMINALIZING, lambda row, log, ctx: True, APPEND_RESERVED_SETTLEMENT, REPAIRED),\n",
        "    (TERMINALIZING, lambda row, log, ctx: True, FINALIZE_LEDGER_FROM_HISTORY, REPAIRED),\n",
        ("ledger-storm", "agent-conversations"),
        ci_seed=1, ci_duration="10m", ci_scenario="agent-conversations"),
    Mutant(
        "recovery-annotates-the-logged-case",
        "The claim holder writes the AppendReservedSettlement repair annotation when the reserved record is "
        "already in the log, not when it appends it for a predecessor.",
        "model.submissions",
        "        repair = APPEND_RESERVED_SETTLEMENT if record.reserved_record is not None and logged is None else None\n",
        "        repair = APPEND_RESERVED_SETTLEMENT if record.reserved_record is not None and logged is not None else None\n",
        ("ledger-storm", "agent-conversations"),
        ci_seed=0, ci_duration="15m"),
    Mutant(
        "recovery-pass-skips-materialization",
        "The recovery pass decides CompleteMaterialization and does not apply it (the next claim holder would never see the row, a client retry completes it later).",
        "model.submissions",
        '                await lifecycle.make_ready(conversation_id, sid)\n',
        "                pass  # left to a client's retry\n",
        ("ledger-storm", "agent-conversations"),
        ci_seed=1, ci_duration="10m", ci_scenario="agent-conversations"),
    Mutant(
        "recovery-pass-skips-queued-abort",
        "The recovery pass decides SettleAborted for a never-claimed row whose aborter died after its intent "
        "(abort:after-intent) and does not settle it (left to whoever claims the lane next).",
        "model.submissions",
        "                          else await lifecycle.settle_queued_abort(sid, RECOVERY_PRODUCER, record=current))\n",
        "                          else None)  # left to the lane's next claim holder\n",
        ("ledger-storm", "agent-conversations"),
        ci_seed=19, ci_duration="2h"),
    Mutant(
        "recovery-pass-skips-finalize",
        "The recovery pass decides FinalizeLedgerFromHistory and does not finalize (the next claim holder would adopt the logged record).",
        "model.submissions",
        '                settlement = await lifecycle.adopt_logged(conversation_id, current)\n',
        '                settlement = None  # left to the next claim holder\n',
        ("ledger-storm", "agent-conversations"),
        ci_seed=3, ci_duration="10m", ci_scenario="agent-conversations"),
    Mutant(
        "recovery-doubt-as-pending-batch",
        "A prepared call of a non-idempotent tool nothing settled is classified as a pending tool batch (deferred), not MarkUnknown.",
        "model.recovery_decisions",
        '    (INPUT_APPLIED, lambda row, log, ctx: _call_in_doubt(row, log), MARK_UNKNOWN, UNKNOWN_DISPOSITION),\n',
        '    (INPUT_APPLIED, lambda row, log, ctx: _call_in_doubt(row, log), RESUME_PENDING_TOOL_BATCH, DEFERRED),\n',
        AC,
        ci_seed=0, ci_duration="2h"),
    Mutant(
        "recovery-approval-request-as-turn-boundary",
        "An approval requested in the log the row does not wait for is classified ResumeFromTurnBoundary, not AwaitApprovalDecision [repaired].",
        "model.recovery_decisions",
        '    (INPUT_APPLIED, lambda row, log, ctx: _approval_not_held(row, log), AWAIT_APPROVAL_DECISION, REPAIRED),\n',
        '    (INPUT_APPLIED, lambda row, log, ctx: _approval_not_held(row, log), RESUME_FROM_TURN_BOUNDARY, DEFERRED),\n',
        AC,
        ci_seed=8, ci_duration="10m"),
    Mutant(
        "recovery-join-accounting-as-turn-boundary",
        "A released child with no joined record is classified ResumeFromTurnBoundary, not ApplyJoinAccounting.",
        "model.recovery_decisions",
        '    (INPUT_APPLIED, lambda row, log, ctx: _join_unlogged(row, log), APPLY_JOIN_ACCOUNTING, REPAIRED),\n',
        '    (INPUT_APPLIED, lambda row, log, ctx: _join_unlogged(row, log), RESUME_FROM_TURN_BOUNDARY, DEFERRED),\n',
        AC,
        ci_seed=7, ci_duration="10m"),
    Mutant(
        "recovery-started-child-as-turn-boundary",
        "A started child the row does not wait on is classified ResumeFromTurnBoundary, not EnsureWaitingForChild.",
        "model.recovery_decisions",
        '    (INPUT_APPLIED, lambda row, log, ctx: _not_waiting(row, log), ENSURE_WAITING_FOR_CHILD, REPAIRED),\n',
        '    (INPUT_APPLIED, lambda row, log, ctx: _not_waiting(row, log), RESUME_FROM_TURN_BOUNDARY, DEFERRED),\n',
        AC,
        ci_seed=7, ci_duration="30m"),
    Mutant(
        "recovery-unlinked-child-as-admission",
        "A child admitted or attached with no started record is classified CompleteChildAdmission, not RepairSubagentStartLink.",
        "model.recovery_decisions",
        '    (INPUT_APPLIED, lambda row, log, ctx: _child_admitted_unlinked(row, log, ctx), REPAIR_SUBAGENT_START_LINK,\n     REPAIRED),\n',
        '    (INPUT_APPLIED, lambda row, log, ctx: _child_admitted_unlinked(row, log, ctx), COMPLETE_CHILD_ADMISSION,\n     REPAIRED),\n',
        AC,
        ci_seed=1, ci_duration="2h"),
    Mutant(
        "recovery-reserved-child-as-pending-batch",
        "A reserved child never admitted is classified a pending tool batch, not CompleteChildAdmission.",
        "model.recovery_decisions",
        '    (INPUT_APPLIED, lambda row, log, ctx: _child_not_admitted(row, log, ctx), COMPLETE_CHILD_ADMISSION, REPAIRED),\n',
        '    (INPUT_APPLIED, lambda row, log, ctx: _child_not_admitted(row, log, ctx), RESUME_PENDING_TOOL_BATCH, DEFERRED),\n',
        AC,
        ci_seed=0, ci_duration="2h"),
    Mutant(
        "recovery-pending-batch-as-turn-boundary",
        "A pending tool batch is classified ResumeFromTurnBoundary, not ResumePendingToolBatch.",
        "model.recovery_decisions",
        '    (INPUT_APPLIED, lambda row, log, ctx: _tool_batch_pending(row, log), RESUME_PENDING_TOOL_BATCH, DEFERRED),\n',
        '    (INPUT_APPLIED, lambda row, log, ctx: _tool_batch_pending(row, log), RESUME_FROM_TURN_BOUNDARY, DEFERRED),\n',
        AC,
        ci_seed=2, ci_duration="10m"),

    # -- secrets by handle, sealed fields, keys that rotate ---------------------------
    Mutant(
        "secret-resolved-into-args",
        "The agent resolves the tool's credential into the arguments it records (the fingerprint's preimage "
        "reused), so the secret's value is in the tool-call requested and prepared records.",
        "model.agent", "                sent = await resolve_refs(args, self.secrets.secret_store)\n",
        "                sent = args = await resolve_refs(args, self.secrets.secret_store)\n", SA,
        ci_seed=0, ci_duration="1m"),
    Mutant(
        "rotation-rewraps-nothing",
        "The re-wrap pass tests each row against the new key instead of the old one, so it re-wraps nothing "
        "and then retires the key every data key is still wrapped under.",
        "model.secrets.rotation", "                if row.key_id == from_key_id:\n",
        "                if row.key_id == to_key_id:\n", SA,
        ci_seed=0, ci_duration="1m"),
    Mutant(
        "rewrap-cursor-saved-first",
        "The rotation saves a page's cursor before it re-wraps the page, so a pass killed (or failed) in "
        "between resumes after rows it never re-wrapped and retires the key they are still under.",
        "model.secrets.rotation",
        "            for row in rows:\n"
        "                if row.key_id == from_key_id:\n"
        "                    data_key = await keys.unwrap(from_key_id, row.wrapped)\n"
        "                    await keyring.rewrap(row.dek_id, from_key_id, to_key_id, await keys.wrap(to_key_id, data_key))\n"
        "            done = len(rows) < page\n"
        "            rotation = {**rotation, \"cursor\": rows[-1].dek_id if rows else rotation[\"cursor\"], \"done\": done}\n"
        "            await keyring.save_rotation(rotation)\n",
        "            done = len(rows) < page\n"
        "            rotation = {**rotation, \"cursor\": rows[-1].dek_id if rows else rotation[\"cursor\"], \"done\": done}\n"
        "            await keyring.save_rotation(rotation)\n"
        "            for row in rows:\n"
        "                if row.key_id == from_key_id:\n"
        "                    data_key = await keys.unwrap(from_key_id, row.wrapped)\n"
        "                    await keyring.rewrap(row.dek_id, from_key_id, to_key_id, await keys.wrap(to_key_id, data_key))\n",
        SA, ci_seed=47, ci_duration="30m"),
    Mutant(
        "model-credential-sent-unresolved",
        "The agent sends the model provider its key's reference instead of resolving it at the call, so every "
        "model request is refused for its credential.",
        "model.agent", "                request = await resolve_refs(request, self.secrets.secret_store)\n", "", SA,
        ci_seed=0, ci_duration="1m"),
    Mutant(
        "fingerprint-unkeyed",
        "The prepared call's fingerprint is the plain canonical digest of what is sent, not the keyed one, so "
        "a low-entropy credential in its preimage can be guessed back from the record.",
        "model.agent", "                fingerprint[\"fingerprint\"] = keyed_digest(self.secrets.digest_key, sent)\n",
        "                fingerprint[\"fingerprint\"] = digest(sent)\n", SA,
        ci_seed=0, ci_duration="1m"),
    # -- clocks per node: beliefs a node's clock cannot support -------------------------
    Mutant(
        "renew-trusts-live-lease",
        "A renewal is accepted while the row's lease is live by the caller's clock, without checking the "
        "caller's epoch: a superseded owner renews (and extends) its successor's lease and goes on believing "
        "it owns the lane.",
        "model.ledger.rules",
        "    row = check_token(row, token)  # a lapsed lease renews until another owner claims\n",
        "    row = row if row is not None and row.lease_expires_ms is not None and row.lease_expires_ms > now_ms \\\n"
        "        else check_token(row, token)  # a live lease renews\n",
        LS_PS, ci_seed=2, ci_duration="3h"),
    Mutant(
        "ledger-renew-trusts-token-lease",
        "Renewal trusts the lease time its token carries: a token whose lease still runs renews without the row's "
        "ownership checked, so an owner that released the submission (or was superseded) renews it anyway.",
        "model.ledger.rules",
        "    row = check_token(row, token)  # a lapsed lease renews until another owner claims\n",
        "    row = row if row is not None and token.lease_expires_ms > now_ms else check_token(row, token)\n",
        LS_PS, ci_seed=10, ci_duration="30m", ci_scenario="ledger-storm"),
    Mutant(
        "renew-on-own-clock",
        "A renewal is accepted while the caller's own token has not expired by the caller's clock, without "
        "checking its epoch: an owner whose clock runs behind its successor's renews a lane already taken "
        "from it, its renewal outliving the fence (on a ledger that decides on its callers' clocks: one on "
        "its own clock reads the same clock for both owners).",
        "model.ledger.rules",
        "    row = check_token(row, token)  # a lapsed lease renews until another owner claims\n",
        "    row = row if row is not None and token.lease_expires_ms > now_ms \\\n"
        "        else check_token(row, token)  # its own lease is live\n",
        LS_PS, ci_seed=116, ci_duration="4h"),
    Mutant(
        "occurrence-id-from-clock",
        "A woken schedule names its run by the node's clock rounded down to the period instead of by the "
        "occurrence it was woken for, so a node whose clock is behind at the boundary starts the previous "
        "occurrence again (a replay) and the due one is never run.",
        "model.schedules",
        "                run_id_for(schedule_id, occurrence_ms), schedule_id=schedule_id, occurrence_ms=occurrence_ms,\n",
        "                run_id_for(schedule_id, now_ms - now_ms % schedule.every_ms), schedule_id=schedule_id,\n"
        "                occurrence_ms=occurrence_ms,\n",
        SY, ci_seed=3, ci_duration="2d"),
)
