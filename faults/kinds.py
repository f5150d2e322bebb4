"""Fault kinds: the names faults are counted, recorded and scripted by."""
from __future__ import annotations

CRASH_BEFORE_CALL = "crash-before-call"  # the process dies before the store call
ACK_LOST = "ack-lost"                    # the call committed; the process dies before the reply
FAILPOINT_CRASH = "failpoint-crash"      # the process dies at a named model failpoint
NODE_KILL = "node-kill"                  # kill -9 from outside, at an arbitrary await point
DUPLICATE_WAKE = "duplicate-wake"        # an alarm delivered twice (at-least-once timers)
NODE_PAUSE = "node-pause"                # a GC pause / VM stall longer than a lease
SHORT_PAGE = "short-page"                # a read answer missing its last record
SEQUENCE_GAP = "sequence-gap"            # a read answer missing a record in the middle
CORRUPT_ROW = "corrupt-row"              # a read answer with one record's payload (or a blob's bytes) altered

TRANSIENT_ERROR = "transient-error"      # the call fails, typed and retryable, before doing anything
WRITE_CONTENTION = "write-contention"    # SqliteWriteContention: the write lock was busy past the timeout
LATENCY = "latency"                      # the call takes long (a slow disk, a GC pause in the store)
BOUNDARY_DELAY = "boundary-delay"        # the call is held until a lease expiry or period boundary (±1 ms)
REPLY_LOST = "reply-lost"                # the call committed, its reply is lost: the live caller retries
# SQLite only (``faults.sqlite_overtake``): another connection tries to commit between a transaction's read and
# its write (refused while the transaction holds the write lock, as BEGIN IMMEDIATE takes it).
OVERTAKING_COMMIT = "overtaking-commit"

# A progress notification (a liveness hint, sent after its append committed) that never reaches its
# registrations (``faults.notifications``): waiters must find the record anyway, at their next reconnect.
DROPPED_NOTIFICATION = "dropped-notification"

# Clocks per node (``faults.clocks``): every node reads its own clock.
CLOCK_SKEW = "clock-skew"                # a swarm kind: node clocks get an offset and a drift within the tolerance
CLOCK_JUMP = "clock-jump"                # a node's clock stepped forward or back, within the tolerance (timed)
CLOCK_JUMP_BEYOND = "clock-jump-beyond"  # beyond the contract: a step past the claimed tolerance (timed)
# A node cut from some of its stores for a while (``faults.partitions``): its calls there are refused, hang
# to their timeout, or commit with the reply held until the heal; the node itself keeps running.
PARTITION = "partition"

# Beyond the contract (opt-in, ``--beyond-contract``): the store breaks a
# promise. The expected outcome is a loud, typed detection, never a pass.
LOST_WRITE = "lost-write"                # an acknowledged write is gone afterwards
TORN_BATCH = "torn-batch"                # an acknowledged batch survives only in part
ROW_ROT = "row-rot"                      # an acknowledged row's stored text is damaged afterwards (bit rot)
# Disk faults on the real SQLite file (``faults.disk``), between transactions; SQLite only.
LATENT_SECTOR_ERROR = "latent-sector-error"  # a page of the file reads back as garbage
LOST_TAIL = "lost-tail"                      # file and WAL back at an earlier committed state (a lying fsync)
TORN_WRITE = "torn-write"                    # the last transaction's WAL frames written only in part (power cut)
MISDIRECTED_WRITE = "misdirected-write"      # a page's content written at another page number
DISK_FAULT_KINDS = (LATENT_SECTOR_ERROR, LOST_TAIL, TORN_WRITE, MISDIRECTED_WRITE)
BEYOND_CONTRACT_KINDS = (LOST_WRITE, TORN_BATCH, ROW_ROT, CLOCK_JUMP_BEYOND,
                         LATENT_SECTOR_ERROR, LOST_TAIL, TORN_WRITE, MISDIRECTED_WRITE)

PORT_FAULT_KINDS = (CRASH_BEFORE_CALL, ACK_LOST, TRANSIENT_ERROR, WRITE_CONTENTION, LATENCY, REPLY_LOST,
                    BOUNDARY_DELAY)
# Fired by the scenario's clock, not at a hit of a site: a script replays them at their time.
TIMED_FAULT_KINDS = (NODE_KILL, DUPLICATE_WAKE, NODE_PAUSE,
                     CLOCK_JUMP, CLOCK_JUMP_BEYOND, PARTITION,
                     LATENT_SECTOR_ERROR, LOST_TAIL, TORN_WRITE, MISDIRECTED_WRITE)
ALL_FAULT_KINDS = (CRASH_BEFORE_CALL, ACK_LOST, FAILPOINT_CRASH, NODE_KILL, DUPLICATE_WAKE, NODE_PAUSE,
                   SHORT_PAGE, SEQUENCE_GAP, CORRUPT_ROW, TRANSIENT_ERROR, WRITE_CONTENTION, LATENCY, REPLY_LOST,
                   BOUNDARY_DELAY, LOST_WRITE, TORN_BATCH, OVERTAKING_COMMIT, ROW_ROT, DROPPED_NOTIFICATION,
                   CLOCK_SKEW, CLOCK_JUMP, CLOCK_JUMP_BEYOND, PARTITION,
                   LATENT_SECTOR_ERROR, LOST_TAIL, TORN_WRITE, MISDIRECTED_WRITE)
