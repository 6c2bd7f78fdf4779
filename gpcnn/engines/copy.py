"""Binary COPY streams: how image buffers and weight chunks reach the server as data, never as
statement text (psycopg2 fills bound parameters in on the client, as literals in the text)."""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Iterator

import numpy as np

COPY_HEADER = b"PGCOPY\n\xff\r\n\0" + struct.pack("!ii", 0, 0)
COPY_TRAILER = struct.pack("!h", -1)


class CopyStream(io.RawIOBase):
    """A file for ``copy_expert`` that hands out the chunks of a binary COPY stream, at most
    ``size`` bytes per read (a chunk that fits is passed on as is, without a copy)."""

    def __init__(self, chunks: Iterator[bytes], progress=None) -> None:
        self._chunks = iter(chunks)
        self._pending = memoryview(b"")
        self._whole: bytes | None = None
        self._progress = progress
        self.error: BaseException | None = None  # what broke the stream (the driver hides it)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while not self._pending:
            try:
                chunk = next(self._chunks, None)
            except BaseException as e:
                self.error = e
                raise
            if chunk is None:
                return b""
            self._whole, self._pending = chunk, memoryview(chunk)
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
        head = bytearray()
        for value, sql_type in zip(prefix, prefix_types, strict=True):
            if sql_type == "text":
                raw = str(value).encode()
                head += struct.pack("!i", len(raw)) + raw
            else:
                code, size = _FIELD[sql_type]
                head += struct.pack(f"!i{code}", size, int(value))
        columns = len(prefix_types) + 2
        flat = np.ascontiguousarray(vector, dtype="<f4")
        for index, start in enumerate(range(0, flat.size, chunk_values)):
            data = flat[start : start + chunk_values]
            yield (
                struct.pack("!h", columns)
                + bytes(head)
                + struct.pack("!iii", 4, index, data.nbytes)
            )
            yield data.tobytes()
    yield COPY_TRAILER


_DECODE = {"integer": ("!i", 4), "bigint": ("!q", 8)}


class BinaryRows(io.RawIOBase):
    """A file for ``copy_expert`` that parses a binary ``COPY ... TO STDOUT`` as it arrives into
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
