"""The views over gpcnn's tables: each iteration's diagnostics with typed columns, read from the
JSON text of ``run_iterations.metrics`` (``fit.diagnostics`` writes it), so SQL needs no JSON.

- ``run_diagnostics``: one row per stored iteration (run, iteration, epoch, images, loss,
  accuracy, validation loss and accuracy, seconds, and the spread, merged step and drift ratio;
  NULL where not measured);
- ``run_segment_diagnostics``: one row per iteration and segment (its key and shard, images,
  loss, accuracy, seconds in its transition, and the length of its step).

Iterations stored before the diagnostics (gpcnn 0.x shapes before 8) have no segment rows. Both
views use only what PostgreSQL 12 has (Greenplum 7): a cast to ``json``, ``->>``, and
``json_array_elements`` in a select list.
"""

from __future__ import annotations

from gpcnn.engines.backend import Backend

VIEWS = ("run_diagnostics", "run_segment_diagnostics")
FLOAT = "double precision"
# (column, JSON member, type) of each view, after run_id and iteration
ITERATION_COLUMNS = (
    ("epoch", "epoch", FLOAT),
    ("images", "images", "bigint"),
    ("loss", "loss", FLOAT),
    ("accuracy", "accuracy", FLOAT),
    ("val_loss", "val_loss", FLOAT),
    ("val_accuracy", "val_accuracy", FLOAT),
    ("seconds", "seconds", FLOAT),
    ("spread", "spread", FLOAT),
    ("merged_step", "merged_step", FLOAT),
    ("drift_ratio", "drift_ratio", FLOAT),
)
SEGMENT_COLUMNS = (
    ("segment_key", "key", "integer"),
    ("shard", "shard", "integer"),
    ("images", "images", "bigint"),
    ("loss", "loss", FLOAT),
    ("accuracy", "accuracy", FLOAT),
    ("seconds", "seconds", FLOAT),
    ("step", "step", FLOAT),
)


def _typed(source: str, columns) -> str:
    return ", ".join(
        f"CAST({source} ->> '{member}' AS {kind}) AS {column}" for column, member, kind in columns
    )


# A view reads its tables with its owner's rights, which row-level security does not restrict:
# each view keeps the reader's own rows itself (all rows for a superuser), as a security barrier
# (no function of the reader's sees a row before this filter). No catalog table in the filter: on
# Greenplum that would run on the coordinator as a segment, a connection of its own.
READERS_ROWS = (
    "created_by = CAST(CURRENT_USER AS text) OR pg_catalog.current_setting('is_superuser') = 'on'"
)


def create_views_ddl(backend: Backend) -> list[str]:
    """CREATE OR REPLACE VIEW for both views (after the tables)."""
    iterations = f"{backend.qschema}.{backend.quote('run_iterations')}"
    view = "CREATE OR REPLACE VIEW {} WITH (security_barrier) AS "
    return [
        view.format(f"{backend.qschema}.{backend.quote('run_diagnostics')}")
        + f"SELECT run_id, iteration, {_typed('m', ITERATION_COLUMNS)} FROM "
        f"(SELECT run_id, iteration, CAST(metrics AS json) AS m FROM {iterations} "
        f"WHERE {READERS_ROWS}) AS i",
        view.format(f"{backend.qschema}.{backend.quote('run_segment_diagnostics')}")
        + f"SELECT run_id, iteration, {_typed('s', SEGMENT_COLUMNS)} FROM "
        "(SELECT run_id, iteration, json_array_elements(CAST(metrics AS json) -> 'per_segment') "
        f"AS s FROM {iterations} WHERE {READERS_ROWS}) AS i",
    ]


def drop_views_ddl(backend: Backend) -> list[str]:
    """DROP VIEW for both (before the tables they read)."""
    return [f"DROP VIEW IF EXISTS {backend.qschema}.{backend.quote(name)}" for name in VIEWS]
