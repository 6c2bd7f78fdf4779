"""Database sessions that run one statement each, concurrently, and can all be cancelled."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait

import sqlalchemy as sa


class SegmentSessions:
    """``count`` dedicated DBAPI connections, opened fresh (a pooled backend may already have
    imported TensorFlow with other thread settings) and kept open across iterations, so each
    backend's model cache survives. psycopg2 releases the GIL while a query runs."""

    def __init__(self, engine: sa.Engine, count: int, settings: Sequence[str] = ()) -> None:
        cargs, cparams = engine.dialect.create_connect_args(engine.url)
        self._connections = []
        try:
            for _ in range(count):
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

    def __len__(self) -> int:
        return len(self._connections)

    def _run(self, index: int, sql: str, params: dict) -> list[tuple]:
        with self._connections[index].cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    def one(self, sql: str, params: dict) -> list[tuple]:
        """Run on the first session."""
        return self.map(sql, [params])[0]

    def map(self, sql: str, params: Sequence[dict]) -> list[list[tuple]]:
        """Run ``sql`` once per parameter set, the i-th on session i, all at once. On an error or
        Ctrl-C every running statement is cancelled before the exception propagates."""
        if len(params) > len(self._connections):
            raise ValueError(f"{len(params)} statements for {len(self._connections)} sessions")
        futures = [self._pool.submit(self._run, i, sql, p) for i, p in enumerate(params)]
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
        for conn in self._connections:
            if not conn.closed:
                conn.close()
        self._connections = []
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
