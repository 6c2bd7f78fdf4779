"""Database sessions that run one statement each, concurrently, and can all be cancelled.

Each segment session is a server process that, once it trained, holds TensorFlow and a compiled
model (~300-700 MB). Estimators hold them only while a call runs; between calls they wait in
``POOL``, at most ``MAX_IDLE_SESSIONS`` of them, until the next fit takes them, until they were
idle ``idle_timeout()`` seconds, or until ``release_sessions()``. Every connection gpcnn opens
names itself to the server as ``application_name()`` (``gpcnn/<client pid>``), so
``pg_stat_activity`` shows what each client process holds.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import DBAPIConnection

from gpcnn.engines.copying import copy

MAX_IDLE_SESSIONS = 8  # each holds a server process with TensorFlow loaded (~300 MB private)
DEFAULT_IDLE_TIMEOUT = 600.0  # seconds; $GPCNN_IDLE_SESSION_TIMEOUT overrides
QUERY_CANCELED = "57014"  # SQLSTATE of a statement cancelled by cancel(): never the cause
CANCEL_AGAIN_AFTER = 0.5  # seconds; a cancel that reaches a session before its statement is lost


def application_name() -> str:
    """What gpcnn's connections tell the server they are: gpcnn and this client's process id."""
    return f"gpcnn/{os.getpid()}"


# PostgreSQL's JIT (LLVM) and TensorFlow's libraries in one server process crash it (signal 11 on
# the next statement costly enough to be compiled, once TensorFlow was imported): gpcnn's
# statements never need it, so every connection gpcnn opens turns it off.
# The search path holds nothing a user can create objects in, so no function or operator of
# another role's (a schema named after the user, public) can stand in for a built-in that a
# statement calls with argument types needing a cast; gpcnn names every table with its schema.
PINNED_SEARCH_PATH = "pg_catalog,pg_temp"
SERVER_OPTIONS = f"-c jit=off -c search_path={PINNED_SEARCH_PATH}"


def connect_arguments(url: sa.URL, pinned: bool = True) -> dict:
    """The driver's connect arguments of every connection gpcnn opens: ``application_name()``
    unless the URL names one, and ``SERVER_OPTIONS`` after the URL's own ``options`` (only
    ``jit=off`` with ``pinned=False``: the one connection that reads the user's own search path)."""
    ours = SERVER_OPTIONS if pinned else "-c jit=off"
    arguments = {"options": f"{url.query.get('options', '')} {ours}".strip()}
    if "application_name" not in url.query:
        arguments["application_name"] = application_name()
    return arguments


def idle_timeout() -> float:
    """Seconds an idle segment session waits for the next fit before it is closed."""
    value = os.environ.get("GPCNN_IDLE_SESSION_TIMEOUT", DEFAULT_IDLE_TIMEOUT)
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"GPCNN_IDLE_SESSION_TIMEOUT={value!r}: give seconds, e.g. 600") from None
    if seconds <= 0:
        raise ValueError(f"GPCNN_IDLE_SESSION_TIMEOUT={value!r}: must be more than 0 seconds")
    return seconds


class SessionError(RuntimeError):
    """A statement failed in one segment session: the driver's error, the statement's parameters
    (``group``: the keys it served), the server process that ran it, and whether the connection
    was lost (the server process ended) rather than the statement failing."""

    def __init__(
        self,
        error: BaseException,
        params: dict,
        pid: int | None,
        lost: bool,
        warning: str | None = None,
    ) -> None:
        super().__init__(str(error).strip() or repr(error))
        self.error, self.params, self.pid, self.lost = error, params, pid, lost
        self.warning = warning

    @property
    def cancelled(self) -> bool:
        return getattr(self.error, "pgcode", None) == QUERY_CANCELED

    @property
    def collateral(self) -> bool:
        """The server ended this session because of something else, and warned it first: when
        one server process crashes (SIGKILL, the OOM killer), the postmaster ends every other
        with "terminating connection because of crash of another server process" (a WARNING,
        then the connection closes with no error); the crashed one says nothing."""
        return self.lost and self.warning is not None


class SessionPool:
    """Idle segment sessions, kept for the next fit: a fresh backend costs seconds to import
    TensorFlow and build the model. Sessions are only reused with the same URL, session settings
    and TensorFlow thread count (fixed when TF starts in a backend, and it changes results); the
    most recently given back are taken first, the oldest closed first."""

    def __init__(self) -> None:
        # (given back at, tag, connection)
        self._idle: list[tuple[float, tuple, DBAPIConnection]] = []
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def take(self, tag: tuple, count: int) -> list:
        with self._lock:
            matching = [entry for entry in self._idle if entry[1] == tag][::-1][:count]
            self._idle = [entry for entry in self._idle if entry not in matching]
        return [conn for _, _, conn in matching if _alive(conn)]

    def give(self, tag: tuple, connections: list) -> None:
        now = time.monotonic()
        with self._lock:
            self._idle += [(now, tag, conn) for conn in connections]
            extra = max(0, len(self._idle) - MAX_IDLE_SESSIONS)
            closing, self._idle = self._idle[:extra], self._idle[extra:]
            self._schedule()
        _close(closing)

    def _schedule(self) -> None:
        """A timer for the oldest idle session's timeout (the caller holds the lock)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._idle:
            delay = max(0.0, self._idle[0][0] + idle_timeout() - time.monotonic())
            self._timer = threading.Timer(delay, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def _expire(self) -> None:
        deadline = time.monotonic() - idle_timeout()
        with self._lock:
            closing = [entry for entry in self._idle if entry[0] <= deadline]
            self._idle = self._idle[len(closing) :]
            self._schedule()
        _close(closing)

    def __len__(self) -> int:
        return len(self._idle)

    def clear(self, engine: sa.Engine | None = None) -> None:
        """Close the idle sessions (of ``engine``'s server only, if given)."""
        url = None if engine is None else _url_of(engine)
        with self._lock:
            closing = [entry for entry in self._idle if url is None or entry[1][0] == url]
            self._idle = [entry for entry in self._idle if entry not in closing]
            self._schedule()
        _close(closing)


def _close(entries: list[tuple[float, tuple, DBAPIConnection]]) -> None:
    for _, _, conn in entries:
        conn.close()


def _url_of(engine: sa.Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def _alive(conn) -> bool:
    if conn.closed:
        return False
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:
        conn.close()
        return False


def _last_warning(conn) -> str | None:
    """The server's last WARNING to this session, its first line (severity off), if it was the
    last thing the session heard."""
    severity, _, text = (conn.notices[-1] if conn.notices else "").partition(":")
    if severity != "WARNING" or not text.strip():
        return None
    return text.strip().splitlines()[0]


POOL = SessionPool()
atexit.register(POOL.clear)


class SegmentSessions:
    """``count`` DBAPI connections of their own (not SQLAlchemy's pool: a pooled backend may have
    imported TensorFlow with other thread settings), kept open across iterations so each
    backend's model cache survives (one per segment on PostgreSQL, one for all of them on
    Greenplum). psycopg2 releases the GIL while a query runs. Statements are written with
    ``:name`` parameters and compiled for the driver. ``release`` hands the connections to
    ``POOL`` for the next user; ``close`` closes them. ``threads``: the TF threads of the backends'
    segment processes (part of what makes a pooled session reusable). ``options``: settings only
    a connection's start can make (libpq's ``options``, ``-c name=value`` each), after the URL's."""

    def __init__(
        self,
        engine: sa.Engine,
        count: int,
        settings: Sequence[str] = (),
        threads: int | None = 0,
        options: str = "",
    ) -> None:
        idle_timeout()  # a bad $GPCNN_IDLE_SESSION_TIMEOUT fails here, not after the work
        self._dialect = engine.dialect
        self._tag = (_url_of(engine), tuple(settings), threads, options)
        self._connections = POOL.take(self._tag, count)
        cargs, cparams = engine.dialect.create_connect_args(engine.url)
        cparams.update(connect_arguments(engine.url))
        if options:
            cparams["options"] = f"{cparams['options']} {options}"
        try:
            while len(self._connections) < count:
                conn = engine.dialect.loaded_dbapi.connect(*cargs, **cparams)
                conn.autocommit = True
                with conn.cursor() as cursor:
                    for statement in settings:
                        cursor.execute(statement)
                self._connections.append(conn)
        except BaseException:
            self.close()
            raise
        self._pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="gpcnn-segment")

    def __del__(self) -> None:
        self.close()

    def release(self) -> None:
        """Back to the pool, open, for the next fit with the same settings."""
        connections, self._connections = self._connections, []
        POOL.give(self._tag, [c for c in connections if not c.closed])
        self._pool.shutdown(wait=False)

    def __len__(self) -> int:
        return len(self._connections)

    def _run(self, index: int, sql: str, params: dict, binary=None) -> list[tuple]:
        conn = self._connections[index]
        pid = conn.info.backend_pid
        del conn.notices[:]  # what the server says during this statement only
        try:
            if binary is not None:  # a COPY (query) TO STDOUT: rows parsed by the sink
                with binary() as sink:  # closed however the stream ends
                    copy(conn, sql, sink, params)
                return sink.rows
            with conn.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchall() if cursor.description is not None else []
        except Exception as e:
            if not type(e).__module__.startswith("psycopg2"):
                raise
            lost = bool(conn.closed)
            warning = _last_warning(conn) if lost and getattr(e, "pgcode", None) is None else None
            raise SessionError(e, params, pid, lost, warning) from e

    def _compiled(self, statement: str) -> str:
        return sa.text(statement).compile(dialect=self._dialect).string

    def one(self, sql: str, params: dict, binary=None) -> list[tuple]:
        """Run on the first session."""
        return self.map(sql, [params], binary)[0]

    def map(self, sql: str, params: Sequence[dict], binary=None) -> list[list[tuple]]:
        """Run ``sql`` once per parameter set, the i-th on session i, all at once. On an error or
        Ctrl-C every running statement is cancelled before the exception propagates; a failed
        statement raises ``SessionError`` (the first failure that is neither a cancellation nor a
        session the server ended because another crashed, see ``collateral``). With
        ``binary`` (a factory of ``copying.BinaryRows`` sinks), ``sql`` is a binary
        ``COPY (query) TO STDOUT`` and its rows come back parsed."""
        if len(params) > len(self._connections):
            raise ValueError(f"{len(params)} statements for {len(self._connections)} sessions")
        sql = self._compiled(sql)
        futures = [self._pool.submit(self._run, i, sql, p, binary) for i, p in enumerate(params)]
        try:
            wait(futures, return_when="FIRST_EXCEPTION")
            failed = [e for f in futures if f.done() and (e := f.exception()) is not None]
            if failed:
                # The cause first: not a statement cancelled or a session ended because of it.
                ended = [e for e in failed if not getattr(e, "cancelled", False)]
                causes = [e for e in ended if not getattr(e, "collateral", False)]
                raise (causes or ended or failed)[0]
            return [f.result() for f in futures]
        except BaseException:
            self._stop(futures)
            raise

    def _stop(self, futures) -> None:
        """Cancel until every statement has ended: a statement sent just after a cancel (the
        interrupt came between the submit and the send) would otherwise run to its end."""
        while True:
            self.cancel()
            if not wait(futures, timeout=CANCEL_AGAIN_AFTER).not_done:
                return

    def cancel(self) -> None:
        """Cancel the statements running now (``pg_cancel_backend``: each server process stops at
        its next interrupt check, between buffers)."""
        for conn in self._connections:
            if not conn.closed:
                conn.cancel()

    def close(self) -> None:
        """Close the connections, their statements cancelled first: a server process whose client
        went away runs its statement to the end (a second Ctrl-C can end ``map``'s wait)."""
        for conn in getattr(self, "_connections", []):
            if not conn.closed:
                with contextlib.suppress(Exception):
                    conn.cancel()
                conn.close()
        self._connections = []
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
