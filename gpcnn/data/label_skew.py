"""The label skew of image tables: measured on the server when a table is loaded or packed (or on
demand, ``measure_skew``), kept in the catalog, and the warning a fit on a skewed table logs.

The index (``engines.label_skew``) is the total-variation distance of a segment's label mix from
the table's. The threshold is calibrated on the study's Fashion-MNIST tables at K = 4
(docs/convergence.md, "Label skew measured in the table"): the largest segment's index is about
0.01 dealt IID, 0.34 to 0.39 at Dirichlet α = 1 (where the average loses 0.3 points) and 0.67 to
0.88 at α = 0.1 (where it loses 8.6).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpcnn.data.table_catalog import ImageTable, describe
from gpcnn.deprecation import database_argument
from gpcnn.engines import Connection, Database, connect
from gpcnn.engines.identifiers import TableName
from gpcnn.engines.label_skew_sql import label_counts, skew_index
from gpcnn.engines.table_records import TableRecords

# The largest segment's index above which a fit warns: between the study's α = 1 tables (0.39 at
# the most, harmless) and its α = 0.1 tables (0.67 at the least); far above IID's sampling noise
# (0.18 for 1,000 images over 16 segments).
SKEW_THRESHOLD = 0.5
# What the study measured of each remedy (docs/convergence.md, part i, alpha 0.1, K = 4, epoch
# 15), best first; pooled BatchNorm statistics changed nothing and FedNova was the least steady
# (within noise of the average), so neither is offered.
SHARED_SAMPLE = (
    "a shared sample on every segment (gpcnn.add_shared_sample(db, table, target, 0.05): the rows "
    "stay where they are; 5 % ended 0.9 points below the IID average where the average alone "
    "ended 6.3 below)"
)
REDEAL = "re-dealing the table IID when its rows may move (gpcnn.redeal)"
FORECAST = (
    "gpcnn.forecast(..., validation_table=...) says what this table's fit is heading for, and "
    "gpcnn.plan(...) forecasts it with each remedy"
)


def measured(
    conn: Connection, backend, table: TableName, keys: Sequence[int], classes: int
) -> dict:
    """The catalog's skew columns of ``table``, counted on the server by one aggregate."""
    counts = label_counts(conn, table.sql(backend), keys, classes)
    index = skew_index(counts)
    return {
        "class_counts": [c for row in counts for c in row],
        "label_skew_max": index.max,
        "label_skew_mean": index.mean,
    }


@database_argument
def measure_skew(database: Database | str | None, table) -> ImageTable:
    """Count an image table's labels per segment again and store its skew in the catalog (for a
    table packed before gpcnn measured it; loads and packs measure their own).

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    table : str or (schema, table)
        An image table of the catalog.

    Returns
    -------
    ImageTable
        The table as the catalog now describes it, ``label_skew`` set.

    Raises
    ------
    TableError
        ``table`` is not a gpcnn image table.
    """
    db = connect(database)
    info = describe(db, table)
    with db.begin() as conn:
        db.backend.lock_name(conn, str(info.table))
        found = measured(conn, db.backend, info.table, info.keys, info.num_classes)
        assert info.table.schema is not None  # describe gives the name with its schema
        TableRecords(conn, db.backend).update_image_table(info.table.schema, info.table.name, found)
    return describe(db, info.table)


def skew_warning(info: ImageTable) -> str | None:
    """What a fit on ``info`` warns, or None when its skew is unknown or below the threshold."""
    if info.label_skew is None or info.label_skew.max <= SKEW_THRESHOLD:
        return None
    return (
        f"{info.table}: the label mix of its segments differs from the table's (label skew "
        f"{info.label_skew.max:.2f} at the most, {info.label_skew.mean:.2f} on average; "
        f"above {SKEW_THRESHOLD}), which slows or stops the merged model's convergence. "
        f"Remedies: {'; '.join(remedies(info))}"
    )


def remedies(info: ImageTable) -> list[str]:
    """The remedies worth naming for ``info``: a shared sample unless it has one already, a
    re-deal, and the forecast."""
    shared = [] if info.shared_images else [SHARED_SAMPLE]
    return [*shared, REDEAL, FORECAST]
