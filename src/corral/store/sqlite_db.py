"""SQLite plumbing: group commit on one writer connection, thread-local readers, migrations.

A reader connection lives as long as the thread that opened it: worker threads come and go
(anyio retires one after 10 s idle), and a connection kept past its thread is an open file
and its page cache, that nobody will use again.

Writes from many coroutines are batched into one transaction (each in its own SAVEPOINT so
one failure does not undo the others), which is how durable appends keep up under load. The
writes an event loop submits during one iteration form one batch, so that a burst of
coroutines woken by the same commit lands in the same next commit.

A batch is committed right on the event loop's thread when nothing is queued for the writer
thread and commits are fast (a local disk: a few hundred microseconds), and handed to the
writer thread otherwise (a slow disk, or a backlog). The hand-over costs two cross-thread
wake-ups per commit, which on a VM are as long as the commit itself; a slow `fsync` must not
stall the loop. Checkpoints run on the writer thread, never inside a commit.
A caller may keep writer-side state in step with the transactions through `TransactionHooks`.
Knows no table semantics.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio.to_thread

from corral.errors import StoreUnavailable
from corral.store.schema import check_not_newer, scripts
from corral.store.sqlite_errors import DiskCondition

T = TypeVar("T")
WriteFn = Callable[[sqlite3.Connection], Any]

_MAX_BATCH = 256
_STOP = object()
_CHECKPOINT = object()
_INLINE_MAX_SECONDS = 0.002
"""Commit on the event loop only while the median recent commit takes less (seconds)."""
_TIMED_COMMITS = 9
"""Commits on the loop whose median decides (a median: this VM's fsync takes 0.4 ms mostly
and 8 ms one time in ten, and a mean of that flips the decision at every slow one)."""
_PROBE_EVERY = 16
"""While commits are kept off the loop as slow, every this many ticks' writes commit on the
loop anyway, to measure the disk again (see `_fast`)."""
_CHECKPOINT_EVERY = 250
"""Commits between two WAL checkpoints, run by the writer thread (SQLite's own would run
inside a commit, perhaps on the event loop)."""


class TransactionHooks(Protocol):
    """Called around each group-commit transaction (one at a time, on whichever thread runs
    it: an event loop's or the writer), so that a caller can cache what its writes need
    between transactions and write it back once per commit.

    An op that raises must leave the hooks' state as it found it (change it as the op's last
    step): its own writes are undone without the others' (savepoint, or nothing written).
    """

    def begin(self, conn: sqlite3.Connection) -> None:
        """Right after BEGIN IMMEDIATE (the write lock is held)."""

    def before_commit(self, conn: sqlite3.Connection) -> None:
        """The transaction's last statements, after every op of the batch; raising fails the
        whole batch."""

    def committed(self) -> None:
        """After a successful COMMIT."""

    def rolled_back(self) -> None:
        """The transaction is being rolled back or failed to commit: forget its changes."""


class _NoHooks:
    def begin(self, conn: sqlite3.Connection) -> None:
        pass

    def before_commit(self, conn: sqlite3.Connection) -> None:
        pass

    def committed(self) -> None:
        pass

    def rolled_back(self) -> None:
        pass


CACHE_KIB = 4096
"""Page cache per connection. Readers lose theirs whenever another connection has committed
(WAL), so only the writer's ever fills: up to the whole database, at which it was 64 MiB of
RSS growing with the logs (docs/performance.md, "Soak"). Appends touch a few hot pages;
the rest comes from the OS's file cache when asked for."""


def connect(
    path: Path, *, autocheckpoint: bool = True, busy_seconds: float = 30.0
) -> sqlite3.Connection:
    """A connection with the store's PRAGMAs (WAL, synchronous=FULL); `bench/log.py`'s bare
    baseline opens its database with this too, so both pay the same fsyncs.

    The store's writer connection passes `autocheckpoint=False`: its writer thread runs the
    checkpoints (`SqliteDatabase`), so no commit on an event loop pays for one.
    `busy_seconds` bounds a wait for another process's lock (the store passes
    `store_timeout_seconds`)."""
    conn = sqlite3.connect(
        path, isolation_level=None, check_same_thread=False, timeout=busy_seconds
    )
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(f"PRAGMA busy_timeout={max(int(busy_seconds * 1000), 1)}")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    if not autocheckpoint:
        conn.execute("PRAGMA wal_autocheckpoint=0")
    return conn


class _Reader:
    """A thread's reader connection, held only by that thread's `threading.local`."""

    __slots__ = ("__weakref__", "conn")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn


class SqliteDatabase:
    """A WAL database file with one writer connection (used by event loops and the writer
    thread, one at a time) and a reader per worker thread."""

    def __init__(
        self, path: Path, hooks: TransactionHooks | None = None, *, busy_seconds: float = 30.0
    ) -> None:
        self.path = path
        self.busy_seconds = busy_seconds
        """How long a statement waits for another process's lock before failing."""
        self._hooks: TransactionHooks = hooks if hooks is not None else _NoHooks()
        # Lists of ops, or _STOP. SimpleQueue is one C lock: Queue's Condition (a new lock per
        # wait, Python-level notify) cost ~2 us of the event loop's time per handed-over tick.
        self._ops: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pending: dict[asyncio.AbstractEventLoop, list[Any]] = {}  # this tick's, per loop
        self._conn: sqlite3.Connection | None = None
        self._conn_lock = threading.Lock()
        """Held while a batch runs, on whichever thread runs it."""
        self._count_lock = threading.Lock()
        self._handed = 0
        """Lists of ops put on `_ops` (by any event loop's thread)."""
        self._finished = 0
        """Of those, the ones the writer thread has run (written by it alone)."""
        self._commit_seconds = 0.0
        """Median of the last `_TIMED_COMMITS` batches' times on an event loop's thread, BEGIN
        to COMMIT."""
        self._timed_commits: collections.deque[float] = collections.deque(maxlen=_TIMED_COMMITS)
        self._since_probe = 0
        """Ticks whose writes went to the writer thread as slow since the last probe."""
        self._last_batch = 0
        """Writes in the last batch committed on an event loop."""
        self._writer: threading.Thread | None = None
        self._local = threading.local()
        self._readers: set[weakref.finalize[Any, Any]] = set()
        """Closers of the live threads' reader connections (each runs once: at its thread's
        exit or at `close`)."""
        self._readers_lock = threading.Lock()
        self.disk = DiskCondition(path)
        """Turns disk-full and I/O errors into API errors; logs each condition once."""
        self.commits = 0
        self.inline_commits = 0
        """Of `commits`, those run on an event loop's thread."""

    def open(self) -> None:
        """Create the file, apply migrations, start the writer thread."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect(self.path, autocheckpoint=False, busy_seconds=self.busy_seconds)
        try:
            _migrate(conn, self.path)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._writer = threading.Thread(
            target=self._write_loop, name="corral-sqlite-writer", daemon=True
        )
        self._writer.start()

    async def aclose(self) -> None:
        """`close` from an event loop, after running the writes it submitted this tick."""
        self._submit(asyncio.get_running_loop())
        await anyio.to_thread.run_sync(self.close)

    def close(self) -> None:
        """Stop the writer after the writes queued so far; close readers."""
        if self._writer is not None:
            self._ops.put(_STOP)
            self._writer.join()
            self._writer = None
        with self._readers_lock:
            closers = list(self._readers)
        for closer in closers:
            closer()

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Run `fn` in the next transaction: await the result, there after COMMIT.

        A plain function handing back the future (no coroutine around it): one frame less to
        create and resume per write. Must be called from a running event loop.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        pending = self._pending.get(loop)
        if pending is not None:
            pending.append((fn, loop, future))
            return future
        # The tick's first write. When the last batch was a lone write (one caller writing
        # in sequence), commit now: the caller goes on without waiting for the loop's next
        # iteration. Later writes of this tick still gather into one batch after it.
        self._pending[loop] = []
        loop.call_soon(self._submit, loop)
        op = (fn, loop, future)
        if not (self._last_batch == 1 and self._fast() and self._run_here([op])):
            self._pending[loop].append(op)
        return future

    def _submit(self, loop: asyncio.AbstractEventLoop) -> None:
        ops = self._pending.pop(loop, None)
        if not ops:
            return
        if self._fast() and self._run_here(ops):
            return
        self._hand_over(ops)

    def _fast(self) -> bool:
        """Whether commits are fast enough to run on the event loop.

        Only commits on the loop are timed: on the writer thread a commit's time includes
        waits for the GIL the busy loop holds (up to the 5 ms switch interval), so timing
        those kept a moment's slow disk from ever reading as fast again and left every
        commit on the thread (two cross-thread wake-ups each). While slow, every
        `_PROBE_EVERY`-th tick commits on the loop to measure the disk again."""
        if self._commit_seconds < _INLINE_MAX_SECONDS:
            return True
        self._since_probe += 1
        if self._since_probe < _PROBE_EVERY:
            return False
        self._since_probe = 0
        return True

    def _hand_over(self, item: Any) -> None:
        with self._count_lock:
            self._handed += 1
        self._ops.put(item)

    def _timed(self, seconds: float) -> None:
        timed = self._timed_commits
        timed.append(seconds)
        self._commit_seconds = sorted(timed)[len(timed) // 2]

    def _run_here(self, ops: list[Any]) -> bool:
        """Commit `ops` on this thread if the writer thread has nothing left to run (so no
        write overtakes an earlier one); False when it has, or is running a batch."""
        if self._handed != self._finished or not self._conn_lock.acquire(blocking=False):
            return False
        try:
            conn = self._conn
            if conn is None or self._handed != self._finished:
                return False
            started = time.perf_counter()
            outcomes = self._run_batches(conn, ops)
            self._timed(time.perf_counter() - started)
            self.inline_commits += 1
            self._last_batch = len(ops)
        finally:
            self._conn_lock.release()
        _settle([(op[2], ok, value) for op, (ok, value) in zip(ops, outcomes, strict=True)])
        return True

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` on this worker thread's reader connection."""
        return await anyio.to_thread.run_sync(self._read_sync, fn)

    def read_now(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` right here on this thread's reader: for lookups of one row by key.

        A WAL reader never waits for the writer, and a keyed row comes from the page cache in
        a few microseconds, while a hand-over to a worker thread and back costs the event loop
        a wake-up and tens of microseconds; scans and pages of events still go to `read`.
        """
        return self._read_sync(fn)

    def _read_sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        reader: _Reader | None = getattr(self._local, "reader", None)
        if reader is None:
            reader = self._open_reader()
        try:
            return fn(reader.conn)
        except sqlite3.Error as exc:
            failure = self.disk.classify(exc)
            if failure is exc:
                raise
            raise failure from exc

    def _open_reader(self) -> _Reader:
        """This thread's reader, closed when the thread exits (the thread-local `_Reader` is
        dropped then) or when the database closes, whichever comes first."""
        reader = _Reader(connect(self.path, busy_seconds=self.busy_seconds))
        closer = weakref.finalize(reader, self._close_reader, reader.conn)
        closer.atexit = False  # at interpreter exit the process's files close anyway
        with self._readers_lock:
            self._readers.add(closer)
        self._local.reader = reader
        return reader

    def _close_reader(self, conn: sqlite3.Connection) -> None:
        conn.close()
        with self._readers_lock:  # a finalizer is dead by the time its callback runs
            self._readers = {closer for closer in self._readers if closer.alive}

    def reader_count(self) -> int:
        """Reader connections open now (one per live thread that has read)."""
        with self._readers_lock:
            return sum(1 for closer in self._readers if closer.alive)

    def _write_loop(self) -> None:
        while True:
            item = self._ops.get()
            batch: list[Any] = []
            lists, then = 0, None
            while True:  # gather what is queued into one batch, up to a marker
                if item is _STOP or item is _CHECKPOINT:
                    then = item
                    break
                batch.extend(item)
                lists += 1
                if len(batch) >= _MAX_BATCH:
                    break
                try:
                    item = self._ops.get_nowait()
                except queue.Empty:
                    break
            if batch:
                with self._conn_lock:
                    assert self._conn is not None  # closed only by this thread, on _STOP
                    outcomes = self._run_batches(self._conn, batch)
                    self._finished += lists
                _resolve(batch, outcomes)
            if then is _CHECKPOINT:
                with self._conn_lock:
                    assert self._conn is not None
                    with contextlib.suppress(sqlite3.Error):  # the next one tries again
                        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                    self._finished += 1
            elif then is _STOP:
                with self._conn_lock:
                    if self._conn is not None:
                        self._conn.close()
                        self._conn = None
                return

    def _run_batches(self, conn: sqlite3.Connection, batch: list[Any]) -> list[tuple[bool, Any]]:
        outcomes: list[tuple[bool, Any]] = []
        for start in range(0, len(batch), _MAX_BATCH):
            outcomes.extend(self._run_batch(conn, batch[start : start + _MAX_BATCH]))
        if all(ok for ok, _ in outcomes):
            return outcomes
        return [(ok, value if ok else self.disk.classify(value)) for ok, value in outcomes]

    def _run_batch(self, conn: sqlite3.Connection, batch: list[Any]) -> list[tuple[bool, Any]]:
        hooks = self._hooks
        try:
            outcomes = _optimistic(conn, batch, hooks)
            if outcomes is None:  # some op failed: redo, isolating each op in a savepoint
                hooks.rolled_back()
                conn.execute("BEGIN IMMEDIATE")
                hooks.begin(conn)
                outcomes = [_run_in_savepoint(conn, op[0]) for op in batch]
            hooks.before_commit(conn)
            conn.execute("COMMIT")
            hooks.committed()
            self.commits += 1
            self.disk.wrote()
        except BaseException as exc:  # the whole batch failed to commit: fail every op
            hooks.rolled_back()
            if conn.in_transaction:
                # A failed ROLLBACK (a dying disk) must not kill the writer thread; SQLite
                # rolls a hot journal back when the file is next used.
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            outcomes = [(False, _lock_timeout(exc, self.busy_seconds))] * len(batch)
        if self.commits % _CHECKPOINT_EVERY == 0:
            # On the writer thread, in turn with the writes (a checkpoint running beside
            # steady commits may never catch up, and the WAL would grow without bound).
            self._hand_over(_CHECKPOINT)
        return outcomes


def _lock_timeout(exc: BaseException, seconds: float) -> BaseException:
    """A lock held by another process past the bound is the store's 503, not a 500: the
    batch was rolled back, so nothing of it was applied."""
    if isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode in _BUSY:
        error = StoreUnavailable(
            f"the database was locked by another process for more than {seconds:g} s; "
            "the request was not applied"
        )
        error.__cause__ = exc
        return error
    return exc


_BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def _optimistic(
    conn: sqlite3.Connection, batch: list[Any], hooks: TransactionHooks
) -> list[tuple[bool, Any]] | None:
    """Run every op in one transaction without savepoints (the common case: nothing fails).

    Returns the outcomes with the transaction still open, or None after rolling back if an
    op raised after writing, so that the caller can redo the batch with per-op isolation. An op
    that raised before changing any row (e.g. an append refused by validation) left the
    transaction as it found it: its error is its outcome and the batch goes on.
    """
    conn.execute("BEGIN IMMEDIATE")
    hooks.begin(conn)
    outcomes: list[tuple[bool, Any]] = []
    for op in batch:
        changes = conn.total_changes
        try:
            outcomes.append((True, op[0](conn)))
        except Exception as exc:
            if conn.in_transaction and conn.total_changes == changes:
                outcomes.append((False, exc))
                continue
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return None
    return outcomes


def _resolve(batch: list[Any], outcomes: list[tuple[bool, Any]]) -> None:
    """Hand the writer thread's results back with one wake-up per event loop, not one per
    operation."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, bool, Any]]] = {}
    for (_fn, loop, future), (ok, value) in zip(batch, outcomes, strict=True):
        by_loop.setdefault(loop, []).append((future, ok, value))
    for loop, items in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting any more
            loop.call_soon_threadsafe(_settle, items)


def _settle(items: list[tuple[Any, bool, Any]]) -> None:
    for future, ok, value in items:
        if future.done():
            continue  # the waiter was cancelled; the write itself stands
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


def _run_in_savepoint(conn: sqlite3.Connection, fn: WriteFn) -> tuple[bool, Any]:
    conn.execute("SAVEPOINT op")
    try:
        value = fn(conn)
    except Exception as exc:
        try:
            conn.execute("ROLLBACK TO op")
            conn.execute("RELEASE op")
        except sqlite3.Error:
            # SQLite rolled the whole transaction back (it may on a full disk): the batch
            # fails, and with the op's own error, not "no such savepoint".
            raise exc from None
        return False, exc
    conn.execute("RELEASE op")
    return True, value


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Apply the pending migrations; refuse a database a newer build has migrated."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    current = int(row[0] or 0)
    check_not_newer(current, "sqlite", str(path))
    for version, item in scripts("sqlite"):
        if version <= current:
            continue
        conn.executescript(
            f"BEGIN;\n{item.read_text()}\nINSERT INTO schema_version VALUES ({version});\nCOMMIT;"
        )


def schema_version(path: Path) -> int:
    """The schema version of the database at `path` (applying migrations first)."""
    conn = connect(path)
    try:
        _migrate(conn, path)
        row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0] or 0)
    finally:
        conn.close()
