"""How gpcnn's tables reach the current shape (``shapes``): the shape found in a schema, and the
steps that take each older shape to the next (``MIGRATIONS``); what a run's result depends on
(the first step computes old runs' ``gpcnn.result_key``).

Shapes are versioned (``schema_version``), like the functions are: ``ensure_tables`` creates the
tables, migrates an older shape in the caller's transaction, or refuses a newer one.
"""

from __future__ import annotations

import json

import sqlalchemy as sa

from gpcnn.engines.backend import Backend
from gpcnn.engines.compiler import text_safe
from gpcnn.engines.label_skew_sql import skew_index
from gpcnn.engines.shapes import (
    OWNED,
    OWNER_COLUMN,
    RUN_PARTS,
    SEGMENT_PARTS,
    create_ddl,
    exists,
    qualified,
    table_ddl,
    tables,
)
from gpcnn.engines.transfers import EVERY_KEY
from gpcnn.engines.views import create_views_ddl, drop_views_ddl
from gpcnn.result_key import result_key

SHAPE_VERSION = 10


class ShapeError(RuntimeError):
    """gpcnn's tables in this schema have a shape this client cannot use."""


def found_version(conn: sa.Connection, backend: Backend) -> int:
    """The shape of gpcnn's tables in the schema: 0 none yet, 1 before versioning."""
    t = tables(backend.schema)
    if exists(conn, backend, "schema_version"):
        return int(conn.execute(sa.select(sa.func.max(t.version.c.version))).scalar() or 0)
    return 1 if exists(conn, backend, "runs") or exists(conn, backend, "image_tables") else 0


def ensure_tables(conn: sa.Connection, backend: Backend) -> None:
    """Create the tables, or migrate an older shape, inside the caller's transaction."""
    version = found_version(conn, backend)
    if version == SHAPE_VERSION:
        return
    backend.ensure_schema(conn, backend.schema)
    if version > SHAPE_VERSION:
        raise ShapeError(
            f"gpcnn's tables in schema {backend.schema!r} have shape {version}, newer than this "
            f"client's {SHAPE_VERSION}: upgrade gpcnn (pip install -U gpcnn) to use them"
        )
    t = tables(backend.schema)
    if version == 0:
        for statement in create_ddl(backend):
            conn.exec_driver_sql(statement)
    else:
        for step in MIGRATIONS[version - 1 :]:
            step(conn, backend)
    conn.execute(t.version.delete())
    conn.execute(t.version.insert().values(version=SHAPE_VERSION))


def _migrate_1_to_2(conn: sa.Connection, backend: Backend) -> None:
    """Version 1 had no shape table, runs had no status and no resume key; tables absent in
    version 1 are created."""
    t = tables(backend.schema)
    _create_missing(conn, backend)
    runs = f"{backend.qschema}.runs"
    if "status" not in _columns(conn, backend, "runs"):
        conn.exec_driver_sql(
            f"ALTER TABLE {runs} ADD COLUMN result_key text, "
            "ADD COLUMN status text NOT NULL DEFAULT 'running', ADD COLUMN error text, "
            "ADD COLUMN updated_at timestamptz"
        )
    done = (
        sa.select(sa.func.count())
        .where(t.run_iterations.c.run_id == t.runs.c.run_id)
        .scalar_subquery()
    )
    for run_id, params, count in conn.execute(sa.select(t.runs.c.run_id, t.runs.c.params, done)):
        params = json.loads(params)
        finished = count >= int(params.get("iterations", 0))
        conn.execute(
            t.runs.update()
            .where(t.runs.c.run_id == run_id)
            .values(
                status="finished" if finished else "running",
                result_key=result_key(params),
            )
        )


def _migrate_2_to_3(conn: sa.Connection, backend: Backend) -> None:
    """Image tables record their layout; tables loaded before have layout 1 (no image ids)."""
    _create_missing(conn, backend)
    if "layout" not in _columns(conn, backend, "image_tables"):
        conn.exec_driver_sql(
            f"ALTER TABLE {backend.qschema}.image_tables "
            "ADD COLUMN layout integer NOT NULL DEFAULT 1"
        )


def _migrate_3_to_4(conn: sa.Connection, backend: Backend) -> None:
    """Image tables record how their images were dealt; earlier tables were all IID."""
    _create_missing(conn, backend)
    if "distribution" not in _columns(conn, backend, "image_tables"):
        conn.exec_driver_sql(
            f"ALTER TABLE {backend.qschema}.image_tables "
            "ADD COLUMN distribution text NOT NULL DEFAULT 'iid', "
            "ADD COLUMN skew double precision, ADD COLUMN class_counts bigint[]"
        )


def _create_missing(conn: sa.Connection, backend: Backend) -> None:
    for table in tables(backend.schema).all():
        if not exists(conn, backend, table.name):
            for statement in table_ddl(backend, table):
                conn.exec_driver_sql(statement)


def _migrate_4_to_5(conn: sa.Connection, backend: Backend) -> None:
    """Shapes 2 to 4 kept each vector as one bytea value (``run_iterations.weights``, ``rule_state``,
    ``optimizer``; ``segment_models``): they move into ``checkpoints`` in chunks, inside the
    server, and the old columns and table go."""
    _create_missing(conn, backend)
    iterations, old_segments = qualified(backend, "run_iterations"), "segment_models"
    moves = []
    if "weights" in _columns(conn, backend, "run_iterations"):
        moves += [(iterations, part, part, str(EVERY_KEY)) for part in RUN_PARTS]
    if exists(conn, backend, old_segments):
        source = qualified(backend, old_segments)
        moves += [
            (source, part, part.removeprefix("segment_"), "s.__dist_key__")
            for part in SEGMENT_PARTS
        ]
    target = qualified(backend, "checkpoints")
    for source, part, column, key in moves:
        conn.execute(
            sa.text(
                f"INSERT INTO {text_safe(target)} (run_id, iteration, part, __dist_key__, chunk, data) "
                f"SELECT s.run_id, s.iteration, :part, {key}, g.chunk, "
                f"substring(s.{column} FROM g.chunk * :size + 1 FOR :size) FROM {text_safe(source)} s "
                f"CROSS JOIN LATERAL generate_series(0, (octet_length(s.{column}) - 1) / :size) "
                f"AS g(chunk) WHERE s.{column} IS NOT NULL"
            ),
            {"part": part, "size": backend.chunk_bytes},
        )
    if "weights" in _columns(conn, backend, "run_iterations"):
        conn.exec_driver_sql(
            f"ALTER TABLE {iterations} DROP COLUMN weights, DROP COLUMN rule_state, "
            "DROP COLUMN optimizer"
        )
    if exists(conn, backend, old_segments):
        conn.exec_driver_sql(f"DROP TABLE {qualified(backend, old_segments)}")


def _migrate_5_to_6(conn: sa.Connection, backend: Backend) -> None:
    """Transfers record their owner and age, so that a dead client's are swept; rows written
    before have no owner ('') and are swept by age (``transfers.sweep_transfers``)."""
    _create_missing(conn, backend)
    if "owner" not in _columns(conn, backend, "transfers"):
        conn.exec_driver_sql(
            f"ALTER TABLE {qualified(backend, 'transfers')} "
            "ADD COLUMN owner text NOT NULL DEFAULT '', "
            "ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()"
        )


def _migrate_6_to_7(conn: sa.Connection, backend: Backend) -> None:
    """The model library's tables (``models``, ``model_weights``) are new."""
    _create_missing(conn, backend)


def _migrate_7_to_8(conn: sa.Connection, backend: Backend) -> None:
    """The diagnostics' views over ``run_iterations`` are new (``engines/views.py``): the step to
    shape 10 creates them, once the rows they filter on have an owner."""
    _create_missing(conn, backend)


def _migrate_8_to_9(conn: sa.Connection, backend: Backend) -> None:
    """Image tables record their label skew and shared sample; the skew of a table whose class
    counts are known is computed from them, the others' stays unknown (NULL) until reloaded or
    measured (``gpcnn.measure_skew``)."""
    _create_missing(conn, backend)
    if "label_skew_max" in _columns(conn, backend, "image_tables"):
        return
    conn.exec_driver_sql(
        f"ALTER TABLE {qualified(backend, 'image_tables')} "
        "ADD COLUMN label_skew_max double precision, ADD COLUMN label_skew_mean double precision, "
        "ADD COLUMN shared_images bigint NOT NULL DEFAULT 0"
    )
    t = tables(backend.schema).image_tables
    known = sa.select(t.c.table_schema, t.c.table_name, t.c.dist_keys, t.c.class_counts).where(
        t.c.class_counts.is_not(None)
    )
    for schema, name, keys, flat in conn.execute(known).all():
        width = len(flat) // len(keys)
        index = skew_index([flat[k * width : (k + 1) * width] for k in range(len(keys))])
        conn.execute(
            t.update()
            .where(t.c.table_schema == schema, t.c.table_name == name)
            .values(label_skew_max=index.max, label_skew_mean=index.mean)
        )


def _migrate_9_to_10(conn: sa.Connection, backend: Backend) -> None:
    """Rows record the role that wrote them (``created_by``), for row-level security; rows written
    before belong to the role that runs the upgrade (an administrator reassigns them with
    ``UPDATE ... SET created_by``). The catalog of prediction tables is new, and the views filter
    by the reader (``views``)."""
    _create_missing(conn, backend)
    for name in OWNED:
        if OWNER_COLUMN not in _columns(conn, backend, name):
            conn.exec_driver_sql(
                f"ALTER TABLE {qualified(backend, name)} "
                f"ADD COLUMN {OWNER_COLUMN} text NOT NULL DEFAULT CURRENT_USER"
            )
    for name, columns in (
        ("image_tables", "table_schema, table_name"),
        ("models", "name"),
        ("model_weights", "name, chunk"),
    ):
        key = conn.execute(
            sa.text(
                "SELECT CAST(conname AS text) FROM pg_catalog.pg_constraint "
                "WHERE conrelid = pg_catalog.to_regclass(:t) AND contype = 'p'"
            ),
            {"t": qualified(backend, name)},
        ).scalar()
        drop = "" if key is None else f"DROP CONSTRAINT {backend.quote(key)}, "
        conn.exec_driver_sql(
            f"ALTER TABLE {qualified(backend, name)} {drop}"
            f"ADD PRIMARY KEY ({columns}, {OWNER_COLUMN})"
        )
    for statement in drop_views_ddl(backend) + create_views_ddl(backend):
        conn.exec_driver_sql(statement)


# MIGRATIONS[i] takes shape i + 1 to shape i + 2.
MIGRATIONS = (
    _migrate_1_to_2,
    _migrate_2_to_3,
    _migrate_3_to_4,
    _migrate_4_to_5,
    _migrate_5_to_6,
    _migrate_6_to_7,
    _migrate_7_to_8,
    _migrate_8_to_9,
    _migrate_9_to_10,
)


def _columns(conn: sa.Connection, backend: Backend, table: str) -> set[str]:
    rows = conn.execute(
        sa.text(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = :s AND table_name = :t"
        ),
        {"s": backend.schema, "t": table},
    )
    return {r[0] for r in rows}


def schema_exists(conn: sa.Connection, schema: str) -> bool:
    found = conn.execute(
        sa.text("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = :s"), {"s": schema}
    ).scalar()
    return found is not None


def schema_is_empty(conn: sa.Connection, schema: str) -> bool:
    found = conn.execute(
        sa.text(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :s"
        ),
        {"s": schema},
    ).scalar()
    return not found


def drop_ddl(backend: Backend) -> list[str]:
    return drop_views_ddl(backend) + [
        f"DROP TABLE IF EXISTS {qualified(backend, x.name)}"
        for x in reversed(tables(backend.schema).all())
    ]
