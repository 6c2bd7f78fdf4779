"""Database sessions that run one statement each, concurrently, and can all be cancelled."""

from __future__ import annotations

import atexit
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait

import sqlalchemy as sa

MAX_IDLE_SESSIONS = 8  # each holds a server process with TensorFlow loaded (~300 MB private)


class SessionPool:
    """Idle segment sessions, kept for the next fit: a fresh backend costs seconds to import
    TensorFlow and build the model. Sessions are only reused with the same URL, session settings
    and TensorFlow thread count (fixed when TF starts in a backend, and it changes results)."""

    def __init__(self) -> None:
        self._idle: dict[tuple, list] = {}
        self._lock = threading.Lock()

    def take(self, tag: tuple, count: int) -> list:
        with self._lock:
            idle = self._idle.get(tag, [])
            taken, self._idle[tag] = idle[:count], idle[count:]
        return [conn for conn in taken if _alive(conn)]

    def give(self, tag: tuple, connections: list) -> None:
        with self._lock:
            self._idle.setdefault(tag, []).extend(connections)
            extra = sum(map(len, self._idle.values())) - MAX_IDLE_SESSIONS
            for conns in self._idle.values():
                while extra > 0 and conns:
                    conns.pop(0).close()
                    extra -= 1

    def clear(self, engine: sa.Engine | None = None) -> None:
        """Close the idle sessions (of ``engine``'s server only, if given)."""
        url = None if engine is None else _url_of(engine)
        with self._lock:
            for tag in [t for t in self._idle if url is None or t[0] == url]:
                for conn in self._idle.pop(tag):
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


POOL = SessionPool()
atexit.register(POOL.clear)


class SegmentSessions:
    """``count`` DBAPI connections of their own (not SQLAlchemy's pool: a pooled backend may have
    imported TensorFlow with other thread settings), kept open across iterations so each
    backend's model cache survives; they serve a fit of ``segments`` keys (one session for all
    of them on Greenplum). psycopg2 releases the GIL while a query runs. Statements are written
    with ``:name`` parameters and compiled for the driver. ``release`` hands the connections to
    ``POOL`` for the next user; ``close`` closes them."""

    def __init__(
        self,
        engine: sa.Engine,
        count: int,
        settings: Sequence[str] = (),
        threads: int = 0,
        segments: int | None = None,
    ) -> None:
        self.threads = threads
        self.segments = count if segments is None else segments
        self._dialect = engine.dialect
        self._tag = (_url_of(engine), tuple(settings), threads)
        self._connections = POOL.take(self._tag, count)
        cargs, cparams = engine.dialect.create_connect_args(engine.url)
        try:
            while len(self._connections) < count:
                conn = engine.dialect.dbapi.connect(*cargs, **cparams)
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

    def serves(self, segments: int, threads: int) -> bool:
        """Whether these sessions are the ones a fit of ``segments`` keys with ``threads`` TF
        threads would open (their number is the engine's business, not K)."""
        return bool(self._connections) and (self.segments, self.threads) == (segments, threads)

    def _run(self, index: int, sql: str, params: dict, binary=None) -> list[tuple]:
        with self._connections[index].cursor() as cursor:
            if binary is not None:  # a COPY (query) TO STDOUT: rows parsed by the sink
                sink = binary()
                cursor.copy_expert(cursor.mogrify(sql, params).decode(), sink)
                return sink.rows
            cursor.execute(sql, params)
            return cursor.fetchall()

    def _compiled(self, statement: str) -> str:
        return sa.text(statement).compile(dialect=self._dialect).string

    def one(self, sql: str, params: dict, binary=None) -> list[tuple]:
        """Run on the first session."""
        return self.map(sql, [params], binary)[0]

    def map(self, sql: str, params: Sequence[dict], binary=None) -> list[list[tuple]]:
        """Run ``sql`` once per parameter set, the i-th on session i, all at once. On an error or
        Ctrl-C every running statement is cancelled before the exception propagates. With
        ``binary`` (a factory of ``copy.BinaryRows`` sinks), ``sql`` is a binary
        ``COPY (query) TO STDOUT`` and its rows come back parsed."""
        if len(params) > len(self._connections):
            raise ValueError(f"{len(params)} statements for {len(self._connections)} sessions")
        sql = self._compiled(sql)
        futures = [self._pool.submit(self._run, i, sql, p, binary) for i, p in enumerate(params)]
        try:
            wait(futures, return_when="FIRST_EXCEPTION")
            failed = [f for f in futures if f.done() and f.exception() is not None]
            if failed:
                raise failed[0].exception()
            return [f.result() for f in futures]
        except BaseException:
            self.cancel()
            wait(futures)
            raise

    def cancel(self) -> None:
        for conn in self._connections:
            if not conn.closed:
                conn.cancel()

    def close(self) -> None:
        for conn in getattr(self, "_connections", []):
            if not conn.closed:
                conn.close()
        self._connections = []
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
