"""How vectors and image buffers travel between the client and the server: as binary COPY data,
never as statement text (psycopg2 fills bound parameters in on the client, as literals in the text).

A vector travels in chunks (pieces of ``chunk_values`` float32 values), one row each. Here: the
binary COPY streams both ways (``CopyStream``, ``chunk_rows``, ``BinaryRows``) and the one helper
that runs a COPY (``copy``); the transfers a statement joins (``write_transfer``, ``sent``,
``delete_transfer``, and ``sweep_transfers`` for those a killed client left); the result
streams of an iteration (``merged_result``, ``per_key_result``) with the client's average of K
streams as they arrive (``StreamingAverage``); and the one reassembly of a vector from its chunks
(``assemble``).
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import secrets
import signal
import struct
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import sqlalchemy as sa

from gpcnn.kernel import averaging, segment

COPY_HEADER = b"PGCOPY\n\xff\r\n\0" + struct.pack("!ii", 0, 0)
COPY_TRAILER = struct.pack("!h", -1)


class CopyStream(io.RawIOBase):
    """A file for ``copy`` that hands out the pieces of a binary COPY stream, at most ``size``
    bytes per read (a piece that fits is passed on as is, without a copy)."""

    def __init__(self, pieces: Iterator[bytes], progress=None) -> None:
        self._pieces = iter(pieces)
        self._pending = memoryview(b"")
        self._whole: bytes | None = None
        self._progress = progress
        self.error: BaseException | None = None  # what broke the stream (the driver hides it)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while not self._pending:
            try:
                piece = next(self._pieces, None)
            except BaseException as e:
                self.error = e
                raise
            if piece is None:
                return b""
            self._whole, self._pending = piece, memoryview(piece)
        if size < 0 or size >= len(self._pending):
            out = self._whole if len(self._pending) == len(self._whole) else bytes(self._pending)
            self._pending, self._whole = memoryview(b""), None
        else:
            out, self._pending = bytes(self._pending[:size]), self._pending[size:]
        if self._progress is not None:
            self._progress.update(len(out))
        return out


# Binary COPY field formats of the integer columns gpcnn's chunk tables start with.
_FIELD = {"bigint": ("q", 8), "integer": ("i", 4)}


def chunk_rows(
    prefix_types: tuple[str, ...], vectors: Iterable[tuple[tuple, np.ndarray]], chunk_values: int
) -> Iterator[bytes]:
    """The binary COPY stream of chunk rows ``(*prefix, chunk, data)``: each vector (float32) cut
    into chunks of ``chunk_values`` values, its prefix (integers and texts) repeated per chunk.
    Views, not copies: the chunks are handed to the driver as they are cut."""
    yield COPY_HEADER
    for prefix, vector in vectors:
        flat = np.ascontiguousarray(vector, dtype="<f4")
        chunks = (flat[start : start + chunk_values] for start in range(0, flat.size, chunk_values))
        yield from _chunk_pieces(prefix_types, prefix, chunks)
    yield COPY_TRAILER


def streamed_chunk_rows(
    prefix_types: tuple[str, ...], prefix: tuple, chunks: Iterable[np.ndarray]
) -> Iterator[bytes]:
    """The binary COPY stream of one vector's chunk rows, its chunks (float32, 0, 1, ...) given
    one by one as they are made: a COPY that runs while the vector is still arriving."""
    yield COPY_HEADER
    yield from _chunk_pieces(prefix_types, prefix, chunks)
    yield COPY_TRAILER


def _chunk_pieces(
    prefix_types: tuple[str, ...], prefix: tuple, chunks: Iterable[np.ndarray]
) -> Iterator[bytes]:
    head = bytearray(struct.pack("!h", len(prefix_types) + 2))
    for value, sql_type in zip(prefix, prefix_types, strict=True):
        if sql_type == "text":
            raw = str(value).encode()
            head += struct.pack("!i", len(raw)) + raw
        else:
            code, size = _FIELD[sql_type]
            head += struct.pack(f"!i{code}", size, int(value))
    for index, chunk in enumerate(chunks):
        data = np.ascontiguousarray(chunk, dtype="<f4")
        yield bytes(head) + struct.pack("!iii", 4, index, data.nbytes)
        yield data.tobytes()


_DECODE = {"integer": ("!i", 4), "bigint": ("!q", 8)}


class BinaryRows(io.RawIOBase):
    """A file for ``copy`` that parses a binary ``COPY ... TO STDOUT`` as it arrives into
    tuples (integers, and ``bytea`` as memoryviews of the received data, not copies): results
    without the hex text that psycopg2's text-format results would take, twice the bytes."""

    def __init__(self, types: tuple[str, ...], on_row=None, on_end=None) -> None:
        self.types = types
        self.rows: list[tuple] = []
        self._on_row = on_row or self.rows.append  # a consumer of each row, else kept in rows
        self._on_end = on_end  # told at close whether the stream ended with its trailer
        self._pending = bytearray()
        self._header = True
        self._done = False

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed and self._on_end is not None:
            self._on_end(self._done)
        super().close()

    def write(self, data) -> int:
        view = memoryview(data)
        if self._pending:  # a row split across messages: parse from the joined bytes
            self._pending += view
            view = memoryview(bytes(self._pending))
            self._pending = bytearray()
        used = self._parse(view)
        self._pending += view[used:]
        return len(data)

    def _parse(self, view: memoryview) -> int:
        at = 0
        if self._header:
            if len(view) < len(COPY_HEADER):
                return 0
            if bytes(view[:11]) != COPY_HEADER[:11]:
                raise ValueError("not a binary COPY stream")
            (extension,) = struct.unpack_from("!i", view, 15)
            at, self._header = 19 + extension, False
        while at + 2 <= len(view) and not self._done:
            (fields,) = struct.unpack_from("!h", view, at)
            if fields == -1:
                self._done = True
                return at + 2
            row, cursor = [], at + 2
            for sql_type in self.types:
                if cursor + 4 > len(view):
                    return at
                (length,) = struct.unpack_from("!i", view, cursor)
                cursor += 4
                if length < 0:
                    row.append(None)
                    continue
                if cursor + length > len(view):
                    return at
                field = view[cursor : cursor + length]
                cursor += length
                if sql_type == "bytea":
                    row.append(field)
                else:
                    code, _ = _DECODE[sql_type]
                    row.append(struct.unpack(code, field)[0])
            self._on_row(tuple(row))
            at = cursor
        return at


# -- running a COPY -------------------------------------------------------------------------------

COPY_READ_BYTES = 1 << 20  # what the driver reads of a CopyStream at a time


def copy(
    connection, sql: str, file, params: Mapping | None = None, size: int = COPY_READ_BYTES
) -> None:
    """Run one COPY on a DBAPI connection, the only place gpcnn does: ``file`` is read for
    ``FROM STDIN`` (a ``CopyStream``, ``size`` bytes at a time) or written for ``TO STDOUT`` (a
    ``BinaryRows``; ``params`` bound into the query). One error reaches the caller: when making
    the stream failed, that one, not the driver's report of the COPY it aborted (or, as psycopg2
    sometimes does, no error at all)."""
    try:
        with connection.cursor() as cursor, _interrupts_seen(file):
            if params is not None:
                sql = cursor.mogrify(sql, params).decode()
            cursor.copy_expert(sql, file, size=size)
    except SystemError as e:
        # psycopg2 may decode the server's last message with its own error already set (a
        # terminated server process): the driver's error is the one to report.
        if type(e.__cause__).__module__.startswith("psycopg2"):
            raise e.__cause__ from None
        raise
    except Exception as e:
        if getattr(file, "error", None) is not None:
            raise file.error from e
        raise
    if getattr(file, "error", None) is not None:
        raise file.error


@contextlib.contextmanager
def _interrupts_seen(file) -> Iterator[None]:
    """Ctrl-C during a ``FROM STDIN`` COPY reaches the caller as the ``KeyboardInterrupt``.

    Python raises it at the first instruction of whatever runs next, often the stream's ``read``
    before its own ``try``; psycopg2 then clears it and reports the COPY it aborted. So, where
    SIGINT has Python's default handler (the main thread of a script or a notebook kernel), a
    handler that also records it on the stream for the duration of the COPY."""
    default = signal.default_int_handler
    if (
        not isinstance(file, CopyStream)
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not default
    ):
        yield
        return

    def record(signum, frame):
        if file.error is None:
            file.error = KeyboardInterrupt()
        default(signum, frame)

    signal.signal(signal.SIGINT, record)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, default)


class ChunkTables(Protocol):
    """What writing vectors in chunks needs of a backend."""

    engine: sa.Engine
    schema: str
    chunk_bytes: int

    @property
    def qschema(self) -> str: ...

    @property
    def chunk_values(self) -> int: ...

    def chunk_copy_sql(self, table_sql: str, prefix: Sequence[str]) -> str: ...


def write_chunks(
    conn: sa.Connection,
    backend: ChunkTables,
    table_sql: str,
    prefix: tuple[tuple[str, str], ...],
    vectors: Iterable[tuple[tuple, np.ndarray]],
) -> None:
    """Write vectors as chunk rows ``(*prefix, chunk, data)`` of a chunked table (``prefix``:
    (column, type) pairs) in the caller's transaction."""
    sql = backend.chunk_copy_sql(table_sql, [name for name, _ in prefix])
    types = tuple(sql_type for _, sql_type in prefix)
    _copy_in(conn, backend, sql, chunk_rows(types, vectors, backend.chunk_values))


def write_streamed_chunks(
    conn: sa.Connection,
    backend: ChunkTables,
    table_sql: str,
    prefix: tuple[tuple[str, str], ...],
    values: tuple,
    chunks: Iterable[np.ndarray],
) -> None:
    """Write one vector, given chunk by chunk as it is made, as chunk rows ``(*values, chunk,
    data)`` (``prefix``: the columns and types of ``values``) in the caller's transaction."""
    sql = backend.chunk_copy_sql(table_sql, [name for name, _ in prefix])
    types = tuple(sql_type for _, sql_type in prefix)
    _copy_in(conn, backend, sql, streamed_chunk_rows(types, values, chunks))


def _copy_in(conn: sa.Connection, backend: ChunkTables, sql: str, pieces: Iterator[bytes]) -> None:
    stream = CopyStream(pieces)
    copy(conn.connection.driver_connection, sql, stream, size=backend.chunk_bytes + 64)


# -- transfers: the vectors one statement sends -----------------------------------------------------

EVERY_KEY = -1  # the transfer row of a start shared by every segment
TRANSFER_PREFIX = (("transfer_id", "bigint"), ("__dist_key__", "integer"), ("owner", "text"))
# Transfers of shape 5 have no owner: swept once this old (no statement runs for a day).
UNOWNED_TRANSFER_AGE = "1 day"


def write_transfer(backend: ChunkTables, vectors: Mapping[int, np.ndarray]) -> int:
    """Write the vectors of one statement (key -> float32 vector; ``EVERY_KEY`` for a start
    shared by all) in chunks, committed, and return their ``transfer_id``. The rows name their
    owner, the writing connection's application_name (``gpcnn/<client pid>``), for
    ``sweep_transfers``."""
    transfer = secrets.randbits(62)
    with backend.engine.begin() as conn:
        owner = conn.execute(sa.select(sa.func.current_setting("application_name"))).scalar()
        rows = [((transfer, key, owner), vector) for key, vector in vectors.items()]
        write_chunks(conn, backend, f"{backend.qschema}.transfers", TRANSFER_PREFIX, rows)
    return transfer


def _transfers(schema: str) -> sa.TableClause:
    return sa.table(
        "transfers",
        sa.column("transfer_id"),
        sa.column("owner"),
        sa.column("created_at"),
        schema=schema,
    )


def sweep_transfers(conn: sa.Connection, schema: str) -> int:
    """Delete the transfers of clients that are gone (killed before their ``finally`` ran), in
    the caller's transaction; the rows deleted. A transfer's owner is alive while any backend
    carries its application_name: every gpcnn client holds connections (its pool, its segment
    sessions) for as long as it uses one. Ownerless rows (shape 5) go once a day old."""
    activity = sa.table("pg_stat_activity", sa.column("application_name"), schema="pg_catalog")
    alive = conn.execute(
        sa.select(activity.c.application_name).distinct().where(activity.c.application_name != "")
    ).scalars()
    t = _transfers(schema)
    owned = sa.and_(t.c.owner != "", t.c.owner.not_in(list(alive)))
    old = sa.and_(
        t.c.owner == "",
        t.c.created_at < sa.func.now() - sa.cast(UNOWNED_TRANSFER_AGE, sa.Interval),
    )
    return conn.execute(sa.delete(t).where(sa.or_(owned, old))).rowcount


def delete_transfer(backend: ChunkTables, transfer: int) -> None:
    transfers = _transfers(backend.schema)
    with backend.engine.begin() as conn:
        conn.execute(sa.delete(transfers).where(transfers.c.transfer_id == transfer))


@contextlib.contextmanager
def sent(backend: ChunkTables, vector: np.ndarray) -> Iterator[int]:
    """``vector`` in ``transfers`` for the statements of a block (the same for every key); its
    ``transfer_id``, deleted afterwards."""
    transfer = write_transfer(backend, {EVERY_KEY: vector})
    try:
        yield transfer
    finally:
        delete_transfer(backend, transfer)


# -- result streams: what an iteration sends back ----------------------------------------------------


def assemble(chunks: Mapping[int, bytes | memoryview], what: str = "a vector") -> np.ndarray:
    """The float32 vector of its chunks (chunk index -> bytes), which must be 0..n-1."""
    if sorted(chunks) != list(range(len(chunks))):
        raise ValueError(f"chunks {sorted(chunks)} of {what} came back, not 0..{len(chunks) - 1}")
    if not chunks:
        return np.zeros(0, dtype="<f4")
    return np.concatenate([np.frombuffer(chunks[i], dtype="<f4") for i in range(len(chunks))])


@dataclass
class Trained:
    """An iteration's result: merged metrics and vector, and/or each key's (metrics, vector)."""

    metrics: dict | None
    vector: np.ndarray | None
    per_key: dict[int, tuple[dict, np.ndarray]] | None


def merged_result(rows: list[tuple]) -> Trained:
    """(chunk, merged value) rows: chunk -1 the merged small state, then the averaged vector."""
    chunks = {int(chunk): value for chunk, value in rows}
    state = chunks.pop(-1)
    return Trained(segment.final_metrics(segment.decode_state(state)), assemble(chunks), None)


def per_key_result(rows: list[tuple], keys: Sequence[int]) -> Trained:
    """(key, chunk, count, data) rows: each key's metrics and vector, in the order of ``keys``
    (shard order: what the rules add up in)."""
    found: dict[int, tuple[dict, dict[int, memoryview]]] = {}
    for key, chunk, _, data in rows:
        state, chunks = found.setdefault(int(key), ({}, {}))
        if chunk < 0:
            state.update(segment.decode_state(data))
        else:
            chunks[int(chunk)] = data
    per_key = {
        key: (segment.final_metrics(found[key][0]), assemble(found[key][1], f"key {key}'s vector"))
        for key in sorted(found, key=list(keys).index)
    }
    return Trained(None, None, per_key)


AVERAGE_NICENESS = 10  # the averaging thread: behind the segments (0), ahead of nice-19 jobs
AVERAGE_LEAD_CHUNKS = 2  # how far one stream may run ahead of the slowest before it waits
AVERAGE_QUEUE_CHUNKS = 1  # complete chunks waiting for the averaging thread before streams wait
AVERAGE_BLOCK_VALUES = 1 << 18  # averaged at a time: the float64 temporaries stay small


class StreamingAverage:
    """The database's ``merge_chunks``, here, as the K result streams arrive (``BinaryRows`` sinks
    in K threads call ``add``): chunk i is averaged over the keys in the order of ``keys`` (shard
    order, as the database merges; ``averaging.weighted_average``: float64 sums, exact integer
    counts) once every key has sent it, and its K parts are dropped. So the client holds the
    average and a few chunks, not K trained vectors: with one key per stream (``paced``), a
    stream more than ``AVERAGE_LEAD_CHUNKS`` ahead of the slowest waits for it, and streams wait
    while ``AVERAGE_QUEUE_CHUNKS`` complete chunks await the averaging; a waiting stream's segment
    blocks on its socket, holding the vector it holds anyway. Unpaced (several keys per stream,
    sent one after the other) a stream cannot wait for a key that comes later in its own stream,
    so parts wait here. The averaging runs in one worker thread at a lower CPU priority
    (``AVERAGE_NICENESS``): on a machine whose cores the segments share, it must not slow the
    streams that feed it (``bench/client_merge.py``); not the lowest, so batch jobs do not
    starve it. A stream that ends without its trailer (``end_stream``) releases the others.
    ``into``: a vector to write the average into, when it has the average's size. ``on_chunk``:
    told each chunk of the average once it is whole (its index and a view of it), in order 0, 1,
    ... (a chunk is whole once every key sent it, and every key sends them in order), from the
    averaging thread: a checkpoint written while the streams still arrive."""

    def __init__(
        self,
        keys: Sequence[int],
        chunk_values: int,
        paced: bool = True,
        into: np.ndarray | None = None,
        on_chunk=None,
    ) -> None:
        self.keys = [int(k) for k in keys]
        self.chunk_values = chunk_values
        self.paced = paced
        self._into = into
        self._on_chunk = on_chunk
        self._progress = threading.Condition()
        self._received = dict.fromkeys(self.keys, 0)  # chunks received per key
        self._aborted = False
        self._states: dict[int, bytes] = {}
        self._counts: dict[int, int] = {}
        self._waiting: dict[int, dict[int, np.ndarray]] = {}
        self._complete: queue.Queue = queue.Queue(AVERAGE_QUEUE_CHUNKS)
        self._averaged = 0
        self._error: BaseException | None = None
        self.vector: np.ndarray | None = None
        self._worker = threading.Thread(target=self._average_complete, daemon=True)
        self._worker.start()

    def add(self, row: tuple) -> None:
        key, chunk, count, data = int(row[0]), int(row[1]), int(row[2]), row[3]
        with self._progress:
            self._counts[key] = count
            if chunk < 0:  # the small state, first in each stream, with the vector's size
                state = segment.decode_state(data)
                if self.vector is None:
                    size, into = int(state["values"]), self._into
                    fits = into is not None and into.size == size and into.dtype == "<f4"
                    self.vector = into if fits else np.empty(size, dtype="<f4")
                self._states[key] = segment.encode_state(state)
                return
            while (
                self.paced
                and not self._aborted
                and chunk - self._slowest(key) >= AVERAGE_LEAD_CHUNKS
            ):
                self._progress.wait()
            if self._aborted:
                return
            parts = self._waiting.setdefault(chunk, {})
            parts[key] = np.frombuffer(data, dtype="<f4")
            self._received[key] = chunk + 1
            self._progress.notify_all()
            if len(parts) < len(self.keys):
                return
            del self._waiting[chunk]
            item = (chunk, [parts[k] for k in self.keys], [self._counts[k] for k in self.keys])
        self._complete.put(item)  # waits while the averaging catches up

    def _slowest(self, key: int) -> int:
        """Chunks received from the slowest other key."""
        return min((n for k, n in self._received.items() if k != key), default=self._received[key])

    def end_stream(self, complete: bool) -> None:
        """One stream ended; one that broke off releases the streams waiting for it (the
        statement's error is raised by the sessions)."""
        if not complete:
            with self._progress:
                self._aborted = True
                self._progress.notify_all()

    def _average_complete(self) -> None:
        with contextlib.suppress(OSError):  # not on every platform; only speed depends on it
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), AVERAGE_NICENESS)
        while (item := self._complete.get()) is not None:
            chunk, parts, counts = item
            try:
                offset = chunk * self.chunk_values
                for start in range(0, parts[0].size, AVERAGE_BLOCK_VALUES):
                    block = [part[start : start + AVERAGE_BLOCK_VALUES] for part in parts]
                    average = averaging.weighted_average(block, counts)
                    self.vector[offset + start : offset + start + average.size] = average
                    self._averaged += average.size
                if self._on_chunk is not None:
                    self._on_chunk(chunk, self.vector[offset : offset + parts[0].size])
            except BaseException as e:  # reported by result()
                self._error = e

    def close(self) -> None:
        """Average what is complete and stop the worker (after the streams, whatever happened)."""
        self._complete.put(None)
        self._worker.join()

    def result(self) -> Trained:
        if self._error is not None:
            raise self._error
        if sorted(self._states) != sorted(self.keys) or self._waiting:
            raise ValueError(
                f"results of keys {sorted(self._states)} came back for keys {sorted(self.keys)}, "
                f"chunks {sorted(self._waiting)} incomplete"
            )
        if self._averaged != self.vector.size:
            raise ValueError(
                f"{self._averaged} of the {self.vector.size} averaged values came back"
            )
        state = None
        for key in self.keys:
            state = segment.add_states(state, self._states[key])
        return Trained(segment.final_metrics(segment.decode_state(state)), self.vector, None)
