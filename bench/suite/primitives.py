"""The floor of a steady iteration's data path: the data it moves, moved by PostgreSQL's,
PL/Python's, numpy's and TensorFlow's own primitives with no gpcnn code in the path; its CPU
summed over the machine's CPUs is the least that iteration can cost here.

The data path is the one gpcnn is built on (segments in PL/Python, the merged weights back in a
local Keras model, each iteration's model stored before its row) with gpcnn's choices (a float64
average; the start read by every segment from the stored model). A steady iteration of
``merge="average"`` at K = 2 has to:
- ``write``: store the merged model logged (an unlogged table is emptied by the crash recovery
  any killed server process starts): one binary COPY of the model in 1 MiB chunks into a table
  laid out as ``checkpoints`` (``bytea`` with ``STORAGE EXTERNAL``), emptied untimed before;
- ``read_send``: in each of the K segment processes read the stored model, hand it to PL/Python
  and take as many bytes back (a PL/Python function returning its ``bytea`` argument), and send
  them to the client: ``COPY (SELECT through_python(data) ...) TO STDOUT`` in K sessions at once,
  drained by the client in K threads;
- ``average``: average the K vectors in float64 into a float32 model (numpy, in the client);
- ``keras``: load the start into the model's variables and read the trained weights back, once per
  segment, and the average into the client's model once.
Not counted, so the real floor is higher: the training itself (the fixed cost subtracts it), the
retention's delete, the start's assembly into one array and the trained vector's cut into chunks,
the server's WAL writer and checkpointer when they run later.

Each part runs ``rounds`` times, the parts interleaved within a round; its CPU is the user +
system time of the server's processes (``pg_stat_activity``) plus this process (all threads),
read from /proc before and after: the server must run on this machine.
"""

from __future__ import annotations

import io
import os
import statistics
import threading
import time
from pathlib import Path

import numpy as np

import gpcnn
from gpcnn.engines import copying

from .dense import dense_model

SCHEMA = "gpcnn_floor"
CHUNK_BYTES = 1 << 20
K = 2
BLOCK = 1 << 18  # values averaged at a time
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of a process (all threads), None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def _cpu_of(pids) -> dict[int, float]:
    """pid -> CPU seconds so far, for those of ``pids`` still running."""
    return {pid: s for pid in pids if (s := cpu_seconds(pid)) is not None}


def _timed(part, server) -> dict:
    """``part()``'s wall and CPU seconds: this process's and the server's processes' (``server()``
    lists them; one that starts during the part counts whole, one that ends in it is missed)."""
    before, wall = _cpu_of([os.getpid(), *server()]), time.perf_counter()
    part()
    wall = time.perf_counter() - wall
    after = _cpu_of([os.getpid(), *server()])
    return {"wall": wall, "cpu": sum(s - before.get(pid, 0.0) for pid, s in after.items())}


class Drain(io.RawIOBase):
    """A file for ``copy_expert`` that counts what it is given and keeps none of it."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data) -> int:
        self.bytes += len(data)
        return len(data)


def copy_in(conn, table: str, columns: str, payload: bytes) -> None:
    """Binary COPY data of ``columns`` rows into ``table``, in one transaction, fed 1 MiB at a
    time (as gpcnn sends a checkpoint)."""
    with conn.cursor() as cur:
        cur.copy_expert(
            f"COPY {table} ({columns}) FROM STDIN (FORMAT binary)",
            io.BytesIO(payload),
            size=1 << 20,
        )
    conn.commit()


def send_to_client(connections, queries: list[str]) -> list[int]:
    """Each query's rows sent to this client as binary COPY on its own connection, all at once
    (a thread each, drained and dropped): the bytes each sent."""
    drains = [Drain() for _ in queries]

    def drain(conn, query: str, into: Drain) -> None:
        with conn.cursor() as cur:
            cur.copy_expert(f"COPY ({query}) TO STDOUT (FORMAT binary)", into)
        conn.commit()

    threads = [
        threading.Thread(target=drain, args=args)
        for args in zip(connections, queries, drains, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [d.bytes for d in drains]


class Primitives:
    """The parts over one server: a logged chunk table, K sessions, the model's bytes."""

    def __init__(self, db, million: float, through_python: bool = True) -> None:
        self.db = db
        self.through_python = through_python
        self.model = dense_model(million)
        self.values = [np.asarray(w) for w in self.model.get_weights()]
        self.vector = np.concatenate([w.ravel() for w in self.values])
        # (chunk, data) rows as gpcnn's checkpoints are written, made once, outside the timing
        rows = copying.chunk_rows((), [((), self.vector)], CHUNK_BYTES // 4)
        self.payload = b"".join(rows)
        self.schema = db.backend.quote(SCHEMA)
        self.table = f"{self.schema}.{db.backend.quote('stored')}"
        self.sessions = [db.engine.raw_connection() for _ in range(K + 1)]
        with self.sessions[0].cursor() as cur:
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
            cur.execute(f"DROP TABLE IF EXISTS {self.table}")
            cur.execute(f"CREATE TABLE {self.table} (chunk int4 PRIMARY KEY, data bytea)")
            cur.execute(f"ALTER TABLE {self.table} ALTER data SET STORAGE EXTERNAL")
            cur.execute(
                f"CREATE FUNCTION {self.schema}.through_python(data bytea) RETURNS bytea "
                "LANGUAGE plpython3u AS 'return data'"
            )
        self.sessions[0].commit()
        self.clear()
        self.write()

    def server_processes(self) -> list[int]:
        """This server's processes: its backends and helpers (WAL writer, checkpointer, …), as
        ``pg_stat_activity`` lists them; another cluster on the machine is not counted."""
        with self.sessions[0].cursor() as cur:
            cur.execute("SELECT pid FROM pg_stat_activity")
            pids = [pid for (pid,) in cur.fetchall()]
        self.sessions[0].commit()
        return pids

    def clear(self) -> None:
        """The table emptied before a write, untimed (gpcnn's retention delete is not counted)."""
        with self.sessions[0].cursor() as cur:
            cur.execute(f"TRUNCATE {self.table}")
        self.sessions[0].commit()

    def write(self) -> None:
        """The model stored in one transaction, as a checkpoint is (read as gpcnn sends it, a
        chunk's bytes a time)."""
        copy_in(self.sessions[0], self.table, "chunk, data", self.payload)

    def read_send(self) -> None:
        """K sessions at once: each reads the stored model, hands every chunk to PL/Python and
        takes it back (the least a segment's transition and ``state_chunks`` do with the start
        and the trained vector), and sends it to this client."""
        data = f"{self.schema}.through_python(data)" if self.through_python else "data"
        query = f"SELECT {data} FROM {self.table} ORDER BY chunk"
        if min(send_to_client(self.sessions[1:], [query] * K)) < self.vector.nbytes:
            raise RuntimeError("a session sent less than the stored model")

    def average(self) -> None:
        """K float32 vectors averaged with image weights in float64 into a float32 model, in
        cache-sized blocks through reused buffers (as ``StreamingAverage`` does)."""
        vectors = [self.vector, self.vector[::-1]]
        out = np.empty(self.vector.size, np.float32)
        total, part = np.empty(BLOCK, np.float64), np.empty(BLOCK, np.float64)
        for start in range(0, out.size, BLOCK):
            stop = min(start + BLOCK, out.size)
            acc, tmp = total[: stop - start], part[: stop - start]
            np.multiply(vectors[0][start:stop], 16.0, out=acc)
            for v in vectors[1:]:
                np.multiply(v[start:stop], 16.0, out=tmp)
                acc += tmp
            np.divide(acc, 16.0 * K, out=out[start:stop], casting="same_kind")

    def keras(self) -> None:
        """K loads and reads of the segments' variables and one load of the client's model."""
        for _ in range(K):
            for var, value in zip(self.model.weights, self.values, strict=True):
                var.assign(value)
            [var.numpy() for var in self.model.weights]
        for var, value in zip(self.model.weights, self.values, strict=True):
            var.assign(value)

    def close(self) -> None:
        with self.sessions[0].cursor() as cur:
            cur.execute(f"DROP SCHEMA {self.schema} CASCADE")
        self.sessions[0].commit()
        for conn in self.sessions:
            conn.close()


PARTS = ("write", "read_send", "average", "keras")


def measure(million: float, rounds: int, url: str | None = None, through_python=True) -> dict:
    db = gpcnn.connect(url)
    primitives = Primitives(db, million, through_python)
    try:
        runs: dict[str, list[dict]] = {part: [] for part in PARTS}
        for r in range(-1, rounds):  # round -1 warms up: first calls load code, fault pages in
            for part in PARTS:
                if part == "write":
                    primitives.clear()
                took = _timed(getattr(primitives, part), primitives.server_processes)
                if r >= 0:
                    runs[part].append(took)
            if r < 0:
                continue
            print(
                f"round {r + 1}: "
                + ", ".join(f"{p} {runs[p][-1]['cpu']:.3f} s CPU" for p in PARTS),
                flush=True,
            )
    finally:
        primitives.close()
    cpus = len(os.sched_getaffinity(0))
    medians = {p: statistics.median(x["cpu"] for x in runs[p]) for p in PARTS}
    total = sum(medians.values())
    return {
        "million": million,
        "model_bytes": int(primitives.vector.nbytes),
        "segments": K,
        "through_python": through_python,
        "cpus": cpus,
        "rounds": rounds,
        "cpu_median": medians,
        "wall_median": {p: statistics.median(x["wall"] for x in runs[p]) for p in PARTS},
        "cpu_total": total,
        "floor_seconds": total / cpus,
        "runs": runs,
    }
