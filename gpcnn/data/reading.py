"""Read an image table back into arrays: images, labels and (optionally) ids, in training order."""

from __future__ import annotations

import numpy as np

from gpcnn.data.dealing import ID_DTYPE
from gpcnn.data.table_catalog import describe
from gpcnn.deprecation import database_argument
from gpcnn.engines import Database, connect
from gpcnn.kernel.segment import decode_images, decode_labels


@database_argument
def read_images(database: Database | str | None, table, *, ids: bool = False):
    """All images (uint8 N×H×W×C) and labels of an image table, in ``buffer_id`` order, and with
    ``ids=True`` their ids too: ``(x, y)`` or ``(x, y, ids)``.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    table : str or (schema, table)
        A gpcnn image table.
    ids : bool, default False
        Also return every image's id.

    Returns
    -------
    x : ndarray of uint8, shape (N, H, W, C)
    y : ndarray of int32, shape (N,)
    ids : ndarray of int64, shape (N,)
        Only with ``ids=True``.

    Raises
    ------
    TableError
        ``table`` is not a gpcnn image table, or (``ids=True``) was loaded by gpcnn 0.1, without
        ids.

    Examples
    --------
    >>> x, y, ids = gpcnn.read_images(db, "fm.test", ids=True)
    """
    db = connect(database)
    info = describe(db, table)
    if ids:
        info.require_ids("read its ids")
    xs, ys, names = [], [], []
    with db.connect() as conn:
        for row in conn.exec_driver_sql(db.backend.read_sql(info.table, ids=ids)):
            xs.append(decode_images(row.x, row.n, info.image_shape))
            ys.append(decode_labels(row.y))
            if ids:
                names.append(np.frombuffer(row.ids, dtype=ID_DTYPE))
    x, y = np.concatenate(xs), np.concatenate(ys)
    return (x, y, np.concatenate(names)) if ids else (x, y)
