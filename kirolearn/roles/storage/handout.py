"""Storage's desk for extraction batches: events become batches, batches go to free
workers, and the workers' results come back to be checked and committed.

Sockets (bound here, for the storage role):
- ``batches`` PUSH: ready batches, a take of several to whichever worker pulls.
- ``records`` PULL: from a worker, that it took a take (its pid: a batch whose worker
  dies goes out again at once, ``Leases``), that an attempt failed (and why), or the
  batches' records, committed together with each batch's completion. A batch already
  done is ignored, so a batch whose lease expired and was handed out twice is still
  committed once.
- with ``network.listen``, ``batches`` and ``records`` again on TCP (PORT+1, PORT+2),
  with CURVE, for extraction workers on other machines (``kirolearn worker extraction
  --connect tcp://HOST:PORT``): the same leases and exactly-once commits. Only worker
  keys (``kirolearn keys add --worker``) get in; a revoked one is cut off within
  KEYS_CHECK_S (the TCP batches socket is bound anew, and the others reconnect) and its
  batches go out again. A private actor's batches go to this machine's workers only,
  unless ``network.remote_workers_private``.

Every worker's records, this machine's too, are scrubbed as an event is and must be
the batch's: in its namespace, made from its events (a worker elsewhere's, from a
batch it took); anything else is dropped and said in the log.

One module, long as it is: the batches' way out and the records' way back share their
sockets, leases and checks, and are read together.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import zmq

from kirolearn import config, contract, db, keys, privacy, project, protocol, transport
from kirolearn.db import batches, errors
from kirolearn.roles import base
from kirolearn.roles.storage.leases import MAX_BATCH_ATTEMPTS, Leases
from kirolearn.roles.storage.writer import Writer

NO_WORKER_RETRY_S = 0.25  # batches are due but no worker is free: offered again this soon
TAKE_MAX_BYTES = 1 << 20  # a take holds at most this many bytes (a larger batch goes alone)
RESULT_MESSAGES_PER_READ = 64  # workers' messages read in one look, at most
RESULTS_SLICE_S = 0.05  # workers' results committed in transactions about this long
KEYS_CHECK_S = 0.5  # how often, while listening, the worker keys are looked at for a revoke


def well_formed_changes(value: object) -> list[tuple[str, str]]:
    """The (path, event id) pairs of a records message's ``changed`` that are well formed
    (a worker's mistake there costs a ranking signal, never the batch)."""
    return [(item[0], item[1]) for item in (value if isinstance(value, list) else [])
            if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
            and 0 < len(item[0]) <= 500 and contract.is_ulid(item[1])]


class Handout:
    """``role``'s (storage's) sockets to the workers, its ``writer``; ``busy()``: whether
    events are pouring in; ``announce(what)``: tell the viewers what changed."""

    def __init__(self, role: base.Role, writer: Writer, busy: Callable[[], bool],
                 announce: Callable[[bytes], None]):
        self.role = role
        self.log = role.log
        self.writer = writer
        self.busy = busy
        self.announce = announce
        settings = role.settings
        self.idle_ms = int(settings["storage"]["batch_idle_s"] * 1000)
        self.max_bytes = settings["storage"]["batch_max_bytes"]
        self.merge_window_s = settings["extraction"]["merge_window_s"]
        self.local_workers = settings["extraction"]["workers"]
        self.remote_private = settings["network"]["remote_workers_private"]
        self.private_warned = False
        self.leases = Leases(self.writer, int(settings["storage"]["lease_s"] * 1000), self.log)
        # Unbatched events per namespace: [bytes, newest arrival ms], kept in memory so
        # deciding when a batch is due costs nothing per tick. After a restart the idle
        # clock starts again from now.
        try:
            self.pending = {ns: [size, db.now_ms()] for ns, size
                            in batches.pending_by_namespace(self.writer.conn).items()}
        except (base.Unavailable, errors.StoreError) as exc:  # serve, and say why, until fixed
            self.log.error("the database cannot be read at start: %s", exc)
            self.pending = {}
        self.turn_ended: set[str] = set()
        # Workers' results read but not yet committed (``save_results``).
        self.unsaved: list[batches.BatchResult] = []
        self.unsaved_failures: list[tuple[str, str]] = []  # (batch, why an attempt failed)
        self.dispatch_due: float | None = 0.0  # batches may be waiting from the last run
        self.last_work = 0.0
        # Where takes go: this machine's workers first, then those elsewhere.
        self.batches = [role.bind(zmq.PUSH, role.home.endpoint("batches"), hwm=1)]
        role.add_socket(role.bind(zmq.PULL, role.home.endpoint("records")),
                        self.on_records)
        self.keyring: keys.Keyring | None = None
        self.keys_check_at = float("inf")
        if settings["network"]["listen"]:
            self._listen(settings["network"]["listen"])

    def _listen(self, listen: str) -> None:
        """The batches and records sockets on TCP, with CURVE, for workers elsewhere."""
        try:
            endpoints = transport.tcp_endpoints(listen)
            pair = keys.server_pair(self.role.home)
        except ValueError as exc:  # keys.KeysError too: FATAL, with what to do
            raise config.ConfigError(str(exc)) from exc
        self.keyring = keys.Keyring(self.role.home, keys.WORKER)
        self.worker_names = self.keyring.names()  # to see a revoke, whoever reads it first
        self.keys_check_at = time.monotonic() + KEYS_CHECK_S
        self.role.answer_zap(self.keyring.name_of)
        curve = self.worker_curve = transport.Curve(pair.public, pair.secret)
        self.remote_batches = endpoints["batches"]
        self.batches.append(self.role.bind(zmq.PUSH, endpoints["batches"], hwm=1, curve=curve))
        self.role.add_socket(self.role.bind(zmq.PULL, endpoints["records"], curve=curve),
                             self.on_records)
        self.log.info("extraction workers elsewhere: %s and %s (CURVE)",
                      endpoints["batches"], endpoints["records"])

    # -- events in ----------------------------------------------------------------------------

    def stored(self, events: list[dict], batched: set[str]) -> None:
        """Events were committed (those of ``batched`` namespaces were batched with them):
        what waits for a batch grows, and a turn's end makes its namespace's due."""
        now = db.now_ms()
        for namespace in batched:
            self.pending.pop(namespace, None)
        for event in events:
            if event["namespace"] in batched:
                continue
            entry = self.pending.setdefault(event["namespace"], [0, now])
            entry[0] += len(event["body_json"])
            entry[1] = now
            if event["kind"] == "session_summary":
                self.turn_ended.add(event["namespace"])

    def forgotten(self, namespace: str) -> None:
        self.pending.pop(namespace, None)
        self.turn_ended.discard(namespace)

    def due(self, now: float) -> float | None:
        """When batch work is next due (``time.monotonic()``): a batch to form or hand
        out, a worker to look for; None: nothing waits."""
        if self.turn_ended:
            return now
        due = [] if self.dispatch_due is None else [self.dispatch_due]
        gone = self.leases.next_check(self.last_work)
        if gone is not None:
            due.append(gone)
        now_ms = db.now_ms()
        for size, newest in self.pending.values():
            due.append(now if size >= self.max_bytes
                       else now + (newest + self.idle_ms - now_ms) / 1000)
        return min(due, default=None)

    def work(self, now: float) -> None:
        """Batches formed, those of gone workers taken back, due ones handed out."""
        self.last_work = now
        self._steps(self._form, self.leases.reclaim, self._dispatch)

    def _steps(self, *steps: Callable[[], None]) -> None:
        """Run batch bookkeeping steps; a fault or an error stops them until next time."""
        try:
            for step in steps:
                step()
        except base.Unavailable:
            pass  # said when the fault began
        except errors.StoreError:
            self.log.exception("batch bookkeeping failed; will retry")

    def _form(self) -> None:
        now = db.now_ms()
        ready = []
        for namespace, (size, newest) in self.pending.items():
            if namespace in self.turn_ended:
                ready.append((namespace, "turn_end"))
            elif size >= self.max_bytes:
                ready.append((namespace, "size"))
            elif now - newest >= self.idle_ms:
                ready.append((namespace, "idle"))
        self.turn_ended.clear()
        if not ready:
            return
        with self.writer.writing() as conn:
            for namespace, reason in ready:
                batches.form_batches(conn, namespace, reason, self.max_bytes,
                                    whole_turns=reason == "turn_end")
        for namespace, reason in ready:
            del self.pending[namespace]
            if reason == "turn_end":  # a turn begun since waits for its own end
                left = batches.pending_bytes(self.writer.conn, namespace)
                if left:
                    self.pending[namespace] = [left, now]

    # -- batches out --------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Hand due batches to free workers, several in one take when they go fast;
        ``dispatch_due`` says when to look again: at once while more may be due, soon
        while no worker is free, else when the first lease runs out (a message brings
        anything sooner)."""
        now = db.now_ms()
        per_take = self.leases.take_size()
        limit = max(16, 2 * per_take)
        conn = self.writer.conn
        due = batches.due_batches(conn, now, limit=limit)
        self.dispatch_due = time.monotonic() if len(due) == limit else None
        if len(due) < limit:
            expires = batches.next_lease_expiry(conn)
            if expires is not None:
                self.dispatch_due = time.monotonic() + max(0, expires - now) / 1000
        take = Take()
        for batch_id, namespace, attempts in due:
            if attempts >= MAX_BATCH_ATTEMPTS:
                self.leases.give_up(batch_id, f"{attempts} attempts failed")
                continue
            local = self._here_only(namespace)
            if take.batches and local != take.local:
                if not self._hand_out(take, now):
                    return
                take = Take()
            take.local = local
            if not take.batches and not self._worker_free(local):
                if local:
                    continue  # a private batch waits for this machine's workers
                return
            batch = {"batch_id": batch_id, "namespace": namespace,
                     "events": batches.batch_events(conn, batch_id)}
            size = len(protocol.pack(batch))
            if size > protocol.MAX_FRAME_BYTES - 64:
                self.leases.give_up(batch_id, f"the batch is {size} bytes; a frame may"
                                              f" carry {protocol.MAX_FRAME_BYTES}")
                continue
            if take.batches and take.size + size > TAKE_MAX_BYTES:
                if not self._hand_out(take, now) or not self._worker_free(local):
                    return
                take = Take(local=local)
            take.add(batch, attempts, size)
            if len(take.batches) == per_take:
                if not self._hand_out(take, now):
                    return
                take = Take(local=local)
        if take.batches:
            self._hand_out(take, now)

    def _here_only(self, namespace: str) -> bool:
        """Whether a batch of this namespace goes to this machine's workers alone: a
        private actor's, unless ``network.remote_workers_private``."""
        if self.remote_private or len(self.batches) == 1:
            return False
        if not project.parts(namespace)[0].endswith(project.PRIVATE):
            return False
        if not self.local_workers and not self.private_warned:
            self.private_warned = True
            self.log.warning("a private actor's batches wait: they go to this machine's"
                             " workers only (extraction.workers is 0), unless"
                             " network.remote_workers_private = true")
        return True

    def _worker_free(self, here_only: bool = False) -> bool:
        """Whether a worker (``here_only``: of this machine) can take a message now; if
        not, batches are offered again soon (and none is read for nothing). None can
        while results wait to be committed: a fast worker would outrun the writer."""
        sockets = self.batches[:1] if here_only else self.batches
        if not self.unsaved and any(sock.poll(0, zmq.POLLOUT) for sock in sockets):
            return True
        self.dispatch_due = time.monotonic() + NO_WORKER_RETRY_S
        return False

    def _hand_out(self, take: Take, now: int) -> bool:
        """Send one take to a free worker (of this machine, for a take of private
        batches) and lease its batches; False if no worker took it (they stay due)."""
        token = secrets.token_hex(16)  # the worker that gets the take says it with its claim
        message = protocol.pack({"batches": take.batches, "take": token})
        for sock in self.batches[:1] if take.local else self.batches:
            if base.send_now(sock, message):
                break
        else:
            return False  # no worker free (one went away since the poll)
        self.leases.lease([batch["batch_id"] for batch in take.batches], now,
                          elsewhere=sock is not self.batches[0], token=token)
        lease_end = time.monotonic() + self.leases.lease_ms / 1000
        self.dispatch_due = min(self.dispatch_due or lease_end, lease_end)
        for batch, attempts in zip(take.batches, take.attempts, strict=True):
            if attempts:
                self.log.warning("batch %s handed out again (attempt %d)", batch["batch_id"],
                                 attempts + 1)
        return True

    def check_keys(self) -> None:
        """A worker key revoked: its connection is closed (the TCP batches socket is
        closed and bound anew: the other workers reconnect, the revoked one is refused),
        and its batches, with those sent there and not yet said taken, go out again now.
        A bind the port does not take yet is tried again at the next look."""
        self.keys_check_at = time.monotonic() + KEYS_CHECK_S
        if self.keyring is None:
            return
        allowed = self.keyring.names()
        revoked, self.worker_names = bool(self.worker_names - allowed), allowed
        try:
            cut = self.leases.revoke(allowed, revoked)
        except base.Unavailable:
            return  # said when the fault began; looked at again next time
        if cut:
            if len(self.batches) > 1:
                self.batches.pop().close(linger=0)
            self.dispatch_due = 0.0
        if len(self.batches) == 1:
            try:
                self.batches.append(self.role.bind(zmq.PUSH, self.remote_batches, hwm=1,
                                                   curve=self.worker_curve))
            except zmq.ZMQError as exc:
                self.log.warning("the workers' batches port is not free yet (%s); trying"
                                 " again", exc)

    # -- results in ---------------------------------------------------------------------------

    def on_records(self, sock: zmq.Socket) -> None:
        """What the workers have sent since the last look: the batches they took noted,
        and the results committed (``save_results``); then the next take handed out at
        once (unless events are pouring in: acks come first)."""
        self.dispatch_due = 0.0  # a worker is free again, or a batch is back
        for _ in range(RESULT_MESSAGES_PER_READ):
            try:
                frame = sock.recv(zmq.NOBLOCK, copy=False)
                message = protocol.unpack(frame.bytes)
            except zmq.Again:
                break
            except protocol.DecodeError as exc:
                self.log.warning("dropped a malformed records message: %s", exc)
                continue
            key = transport.peer_key(frame)
            worker = None if key is None or self.keyring is None else self.keyring.name_of(key)
            if key is not None and worker is None:
                self.log.warning("dropped a records message from a worker no longer allowed")
                continue
            self._read(message, worker)
        self.save_results()
        if not self.busy():
            self._steps(self._dispatch)

    def _read(self, message: dict, worker: str | None = None) -> None:
        """A claim (``batch_ids``, and ``worker_pid`` here) and a worker elsewhere's
        (``worker``: its key's name) ``working`` are noted at once; a take's ``results``
        are checked and added to what is to be committed."""
        ids, working = message.get("batch_ids"), message.get("working")
        if isinstance(ids, list):
            if worker is not None:
                self.leases.taken(ids, worker, message.get("take"))  # heard (not its pid)
            else:
                self.leases.claimed(ids, message.get("worker_pid"))
        elif worker is not None and isinstance(working, list):  # still at it
            self.leases.working(working, worker)
        elif isinstance(message.get("results"), list):
            self.leases.note_pace(message.get("seconds"), len(message["results"]))
            for item in message["results"]:
                self._read_result(item, worker)
        else:
            self.log.warning("dropped a records message without batch_ids or results")

    def _read_result(self, item: object, worker: str | None) -> None:
        batch_id = item.get("batch_id") if isinstance(item, dict) else None
        if not isinstance(batch_id, str):
            self.log.warning("dropped a result without a batch_id")
            return
        if not self.leases.settle(batch_id, worker):
            self.log.warning("dropped worker %s's result for batch %s, which it was not"
                             " given", worker, batch_id)
            return
        if isinstance(item.get("error"), str):
            self.log.warning("batch %s: an attempt failed: %s", batch_id, item["error"])
            self.unsaved_failures.append((batch_id, item["error"][:1000]))
        elif isinstance(item.get("records"), list):
            valid = self._the_batchs_records(batch_id, item["records"], worker)
            if valid is not None:
                self.unsaved.append((batch_id, valid, well_formed_changes(item.get("changed"))))
        else:
            self.log.warning("batch %s: dropped a result without records or error", batch_id)

    def _the_batchs_records(self, batch_id: str, records: list, worker: str | None
                            ) -> list[dict] | None:
        """A result's records, scrubbed and checked: each valid, in the batch's namespace
        and made from its events; None when the batch is not there (or cannot be read
        now: its lease hands it out again)."""
        valid = []
        for record in records:
            try:
                valid.append(contract.validate_record(privacy.scrub_record(record)))
            except contract.ContractError as exc:
                self.log.warning("batch %s: dropped an invalid record: %s", batch_id, exc)
        try:
            scope = batches.batch_scope(self.writer.conn, batch_id)
        except (base.Unavailable, errors.StoreError) as exc:
            self.log.warning("batch %s: its result cannot be checked now: %s", batch_id, exc)
            self.leases.strand([batch_id])
            return None
        if scope is None:
            self.log.warning("dropped a result for batch %s, which does not exist", batch_id)
            return None
        namespace, event_ids = scope
        kept = [r for r in valid if r["namespace"] == namespace
                and set(r["source_event_ids"]) <= event_ids]
        if len(kept) < len(valid):
            self.log.warning("batch %s: dropped %d record(s) of %s that are not the batch's"
                             " (their namespace or events are another's)", batch_id,
                             len(valid) - len(kept), f"worker {worker}" if worker else "a worker")
        return kept

    @property
    def unsaved_any(self) -> bool:
        return bool(self.unsaved or self.unsaved_failures)

    def save_results(self) -> None:
        """Failed attempts and completed batches, in one transaction that stops taking
        batches once it has run RESULTS_SLICE_S; the rest wait for the next pass of the
        loop, after the events queued meanwhile (a take's thousand records committed at
        once held the events' acks for a second on PostgreSQL). On a fault nothing is
        committed: the batches go out again as soon as the store answers
        (``Leases.strand``)."""
        if not self.unsaved_any:
            return
        started = time.monotonic()
        outcome: dict[str, int | str | None] = {}
        failures, self.unsaved_failures = self.unsaved_failures, []
        taken: list[str] = []  # the batches whose results this transaction holds
        try:
            with self.writer.writing() as conn:
                for batch_id, error in failures:
                    batches.batch_attempt_failed(conn, batch_id, error)
                while self.unsaved and (not outcome
                                        or time.monotonic() - started < RESULTS_SLICE_S):
                    taken.append(self.unsaved[0][0])
                    outcome.update(batches.complete_batches(conn, [self.unsaved.pop(0)],
                                                           self.merge_window_s))
        except base.Unavailable:  # said when the fault began
            self.leases.strand([*taken, *(result[0] for result in self.unsaved),
                                *(batch_id for batch_id, _ in failures)])
            self.unsaved = []
            return
        if not self.unsaved:
            self.dispatch_due = 0.0  # the workers may have the next take
        committed = {b: n for b, n in outcome.items() if isinstance(n, int)}
        for batch_id, what in outcome.items():
            if what is None:
                self.log.info("batch %s was already committed; ignored a second result",
                              batch_id)
            elif isinstance(what, str):
                self.log.warning("batch %s: an attempt failed: %s", batch_id, what)
        if committed:
            self.log.info("%d batch(es) committed with %d record(s)", len(committed),
                          sum(committed.values()))
            self.announce(b"records")


class Take:
    """Batches going to one worker in one message."""

    def __init__(self, local: bool = False):
        self.batches: list[dict] = []
        self.attempts: list[int] = []
        self.size = 0
        self.local = local  # a private actor's: this machine's workers only

    def add(self, batch: dict, attempts: int, size: int) -> None:
        self.batches.append(batch)
        self.attempts.append(attempts)
        self.size += size
