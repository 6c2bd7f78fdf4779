"""Arrays given to ``GreenplumCNN.fit`` become a real image table (the K segment sessions must see
it), owned by the user in the schema ``<gpcnn schema>_staging`` and dropped when the estimator that
staged it is closed or garbage-collected; ``sweep`` (``gpcnn tables drop --staging``) removes any
that a killed process left behind."""

from __future__ import annotations

import contextlib
import uuid

import numpy as np

from gpcnn.data.loading import load_images
from gpcnn.data.table_catalog import drop_table, list_tables
from gpcnn.engines import Database
from gpcnn.engines.roles import staging_schema


def schema_of(db: Database) -> str:
    """The staging schema of ``db``'s gpcnn schema (``install`` makes it, for its members)."""
    return staging_schema(db.schema)


def stage(
    db: Database, x, y, *, num_classes: int | None, seed: int | None, class_names=None
) -> str:
    """Load ``x, y`` (class indices) into a new staging table, with ``class_names`` if given;
    returns its name."""
    if y is None:
        raise ValueError("fit(x, y) needs labels for arrays (a table name needs none)")
    name = f"{schema_of(db)}.arrays_{uuid.uuid4().hex[:16]}"
    load_images(
        db,
        name,
        np.asarray(x),
        np.asarray(y),
        num_classes=num_classes,
        class_names=class_names,
        seed=0 if seed is None else int(seed),
        progress=False,
        source="arrays staged by GreenplumCNN.fit",
    )
    return name


def drop_staged(db: Database, names: list[str]) -> None:
    """Drop staging tables (a finalizer: never raises)."""
    for name in names:
        with contextlib.suppress(Exception):  # the server may be gone at exit: sweep() later
            drop_table(db, name, missing_ok=True)
    names.clear()


def sweep(db: Database) -> list[str]:
    """Drop every staging table of ``db``'s schema; returns their names."""
    staged = [str(t.table) for t in list_tables(db) if t.table.schema == schema_of(db)]
    for name in staged:
        drop_table(db, name, missing_ok=True)
    return staged
