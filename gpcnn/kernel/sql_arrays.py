"""Decoding SQL arrays and rank-ordered records for ``pack_table``: the images, labels and ids of
an existing table as the stored buffers' bytes."""

from __future__ import annotations

import numpy as np

from .segment_errors import SegmentError

# A SQL array's in-memory form (PostgreSQL's ArrayType less its length word), as ``array_bytes``
# gives it: ndim, the offset of the data (0: no NULL elements), the element type's oid, the
# dimensions and lower bounds, padding to 8 bytes, then the numbers in the server's byte order.
ARRAY_DTYPES: dict[int, np.dtype] = {
    21: np.dtype("=i2"),
    23: np.dtype("=i4"),
    700: np.dtype("=f4"),
    701: np.dtype("=f8"),
}


def _records(data: bytes, n: int) -> np.ndarray:
    """``n`` records of one size, as an (n, size) array of bytes."""
    if n < 1 or len(data) % n:
        raise SegmentError(
            f"{len(data)} bytes are not {n} images of one size: give every row one array shape"
        )
    return np.frombuffer(data, dtype=np.uint8).reshape(n, -1)


def _leading(records: np.ndarray) -> np.ndarray:
    """The ``int8send`` number that leads each record (a rank or an id): one aggregate carries
    a row's values together, whatever order it met the rows in."""
    return records[:, :8].copy().view(">i8")[:, 0]


def _in_rank_order(data: bytes, n: int) -> np.ndarray:
    """Records ``int8send(rank) || payload`` as the payloads in rank order: the aggregate that
    concatenated them need not sort its rows."""
    records = _records(data, n)
    return records[np.argsort(_leading(records)), 8:]


def array_values(records: np.ndarray, length: int) -> np.ndarray:
    """Records that are each one array of ``length`` numbers (``array_bytes``) as an
    (n, length) array of the numbers: PL/Python would convert each to a Python object."""
    ndim, _, element_type = records[0, :12].view("=i4").tolist()
    dtype = ARRAY_DTYPES[element_type]
    start = (16 + 8 * ndim + 7) // 8 * 8 - 4
    headers = records[:, : 4 * (3 + ndim)].view("=i4")
    if (
        records.shape[1] != start + length * dtype.itemsize
        or (headers != [ndim, 0, element_type, *headers[0, 3:]]).any()
    ):
        raise SegmentError("the image arrays differ in shape or hold NULLs: give every row one")
    return records[:, start:].view(dtype)


def _in_range(values: np.ndarray, top: float) -> np.ndarray:
    """Per image: every number in [0, top] (NaN is not: it makes the minimum NaN)."""
    return (values.min(axis=1) >= 0) & (values.max(axis=1) <= top)


def first_out_of_range(data: bytes, n: int, length: int, top: float) -> int | None:
    """The smallest id of ``n`` records ``int8send(id) || array_bytes`` whose image has a number
    outside [0, top]."""
    records = _records(data, n)
    bad = ~_in_range(array_values(records[:, 8:], length), top)
    return int(_leading(records)[bad].min()) if bad.any() else None


def pixel_bytes(data: bytes, n: int, length: int, normalized: bool) -> bytes:
    """``n`` images (records of a rank and ``array_bytes``; 0..255, or 0..1 when
    ``normalized``) as stored uint8 bytes in rank order, rounded to the nearest level
    (``pack_table``, which names the row of a refusal)."""
    values = array_values(_in_rank_order(data, n), length)
    top = 1.0 if normalized else 255.0
    if not _in_range(values, top).all():
        raise SegmentError(f"an image has values outside 0..{top:g}")
    if values.dtype.kind == "i" and not normalized:
        return values.astype(np.uint8).tobytes()  # what rounding would give
    pixels = values.astype(np.float64)
    if normalized:
        pixels *= 255.0
    return np.rint(pixels).astype(np.uint8).tobytes()


def image_bytes(data: bytes, n: int) -> bytes:
    """``n`` uint8 images (records of a rank and the image) in rank order."""
    return _in_rank_order(data, n).tobytes()


def little_endian(data: bytes, n: int, width: int) -> bytes:
    """``n`` integers (records of a rank and ``int8send``) in rank order as little-endian
    bytes of ``width`` (4: labels, 8: ids), in the stored layout."""
    return _in_rank_order(data, n).view(">i8").astype(f"<i{int(width)}").tobytes()
