"""Binary COPY, both ways: the one module that encodes and decodes PostgreSQL's binary COPY format
and runs a COPY (never statement text: psycopg2 fills bound parameters in on the client, as
literals in the text).

A vector travels in chunks (pieces of ``chunk_values`` float32 values), one row each. Here: the
streams into the server (``CopyStream``, ``chunk_rows``, ``streamed_chunk_rows``), the parser of
what comes back (``BinaryRows``), the one helper that runs a COPY (``copy``; what psycopg2 prints meanwhile:
``driver_reports``) and the writers of chunk rows into a chunked table (``write_chunks``,
``write_streamed_chunks``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import signal
import struct
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol

import numpy as np
import sqlalchemy as sa

from gpcnn.engines.driver_reports import driver_prints, is_driver_error, print_unused, server_error

COPY_HEADER = b"PGCOPY\n\xff\r\n\0" + struct.pack("!ii", 0, 0)
COPY_TRAILER = struct.pack("!h", -1)


class CopyStream(io.RawIOBase):
    """A file for ``copy`` that hands out the pieces of a binary COPY stream, at most ``size``
    bytes per read (a piece that fits is passed on as is, without a copy)."""

    def __init__(self, pieces: Iterator[bytes], progress=None) -> None:
        self._pieces = iter(pieces)
        self._pending = memoryview(b"")
        self._whole = b""  # the piece that _pending views, while it does
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
            self._pending, self._whole = memoryview(b""), b""
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
            row: list[memoryview | int | None] = []
            cursor = at + 2
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
    sometimes does, no error at all); when the server ended the session, the server's own
    error (see ``driver_prints``), and nothing printed."""
    printed: list[BaseException] = []
    error: BaseException | None = None
    try:
        with connection.cursor() as cursor, _interrupts_seen(file), driver_prints(printed):
            if params is not None:
                sql = cursor.mogrify(sql, params).decode()
            cursor.copy_expert(sql, file, size=size)
    except SystemError as e:
        # copy_expert returned with its error set (psycopg2 does after a lost session): the
        # driver's error is the one to report.
        if not is_driver_error(e.__cause__):
            raise
        error = server_error(printed) or e.__cause__
    except Exception as e:
        if getattr(file, "error", None) is not None:
            raise file.error from (server_error(printed) or e)
        if not is_driver_error(e):
            raise
        error = server_error(printed) or e
    else:
        if getattr(file, "error", None) is not None:
            raise file.error
    finally:
        print_unused(printed)
    if error is not None:
        raise error  # outside the handlers: the driver's error, with no context to print


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
    types = tuple(sql_type for _, sql_type in prefix)
    _copy_in(conn, backend, table_sql, prefix, chunk_rows(types, vectors, backend.chunk_values))


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
    types = tuple(sql_type for _, sql_type in prefix)
    _copy_in(conn, backend, table_sql, prefix, streamed_chunk_rows(types, values, chunks))


def _copy_in(
    conn: sa.Connection,
    backend: ChunkTables,
    table_sql: str,
    prefix: tuple[tuple[str, str], ...],
    pieces: Iterator[bytes],
) -> None:
    """COPY the rows into the table; for a role its row-level security applies to, which
    PostgreSQL refuses COPY FROM, into a temporary table of the session first, then INSERT
    (where the policy checks each row)."""
    columns = [name for name, _ in prefix]
    secured = conn.execute(
        sa.text("SELECT pg_catalog.row_security_active(CAST(:t AS pg_catalog.text))"),
        {"t": table_sql},
    ).scalar()
    target = _rows_staging(conn, table_sql) if secured else table_sql
    stream = CopyStream(pieces)
    sql = backend.chunk_copy_sql(target, columns)
    copy(conn.connection.driver_connection, sql, stream, size=backend.chunk_bytes + 64)
    if secured:
        listed = ", ".join([*columns, "chunk", "data"])
        conn.exec_driver_sql(f"INSERT INTO {table_sql} ({listed}) SELECT {listed} FROM {target}")
        conn.exec_driver_sql(f"TRUNCATE {target}")


def _rows_staging(conn: sa.Connection, table_sql: str) -> str:
    """The session's temporary table shaped like ``table_sql`` (emptied at each commit)."""
    name = "pg_temp.gpcnn_rows_" + hashlib.sha256(table_sql.encode()).hexdigest()[:16]
    conn.exec_driver_sql(
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {name} "
        f"(LIKE {table_sql} INCLUDING DEFAULTS INCLUDING STORAGE) ON COMMIT DELETE ROWS"
    )
    return name
