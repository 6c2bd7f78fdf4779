"""The binary COPY stream of an image table: one row per buffer, encoded lazily from a source."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import numpy as np

from gpcnn.data.dealing import ID_DTYPE, Buffer
from gpcnn.data.sources import ImageSource
from gpcnn.engines.copying import COPY_HEADER, COPY_TRAILER
from gpcnn.kernel.segment import LABEL_DTYPE

COPY_ROW_OVERHEAD = 2 + 3 * 8 + 3 * 4  # field count, 3 integers with their lengths, 3 lengths
COPY_STREAM_OVERHEAD = len(COPY_HEADER) + len(COPY_TRAILER)


def source_rows(
    source: ImageSource,
    buffers: Sequence[Buffer],
    order: np.ndarray,
    ids: np.ndarray,
    *,
    progress: bool = False,
) -> Iterator[tuple]:
    """(buffer, images, labels, ids) of each buffer, as bytes: the images ``order`` deals (from
    ``source.deal``), read piece by piece, each copied once to bytes."""
    ids = ids[order]
    sizes = [buf.stop - buf.start for buf in buffers]
    pieces = source.pieces(order, sizes, progress=progress)
    for buf, (x, y) in zip(buffers, pieces, strict=True):
        images = np.ascontiguousarray(x).tobytes()
        labels = y.astype(LABEL_DTYPE).tobytes()
        yield buf, images, labels, ids[buf.start : buf.stop].astype(ID_DTYPE).tobytes()


def copy_row(buf: Buffer, images: bytes, labels: bytes, ids: bytes) -> tuple[bytes, ...]:
    """The binary COPY row of one buffer, as pieces to send in turn (no copy of the images)."""
    n = len(ids) // ID_DTYPE.itemsize
    header = struct.pack("!hiiiiiii", 6, 4, buf.key, 4, buf.buffer_id, 4, n, len(images))
    return (
        header,
        images,
        struct.pack("!i", len(labels)) + labels,
        struct.pack("!i", len(ids)) + ids,
    )


def copy_stream(rows: Iterator[tuple]) -> Iterator[bytes]:
    """The whole binary COPY stream, produced lazily one buffer at a time."""
    yield COPY_HEADER
    for row in rows:
        yield from copy_row(*row)
    yield COPY_TRAILER
