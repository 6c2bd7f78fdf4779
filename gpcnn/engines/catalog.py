"""gpcnn's own tables and every statement on them, in SQLAlchemy Core.

The tables: ``image_tables`` (the catalog of image tables), ``runs``, ``run_iterations`` (each
iteration's metrics and model) and ``segment_models`` (each segment's next start, for rules that
keep per-segment models). Their shape is versioned (``schema_version``), like the functions are:
``ensure_tables`` creates them, migrates an older shape in the caller's transaction, or refuses a
newer one. Functions here take an open connection (the caller owns the transaction) and the
handle's backend for the engine's DDL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import sqlalchemy as sa

from .base import Backend

SHAPE_VERSION = 4
RUN_STATUSES = ("running", "finished", "stopped_early", "failed")
RESUMABLE = ("running", "failed")  # a run that stopped on purpose is never continued by itself


class ShapeError(RuntimeError):
    """gpcnn's tables in this schema have a shape this client cannot use."""


@dataclass(frozen=True)
class Tables:
    version: sa.Table
    image_tables: sa.Table
    runs: sa.Table
    run_iterations: sa.Table
    segment_models: sa.Table


# What follows CREATE TABLE on Greenplum: distributed like the rows they are joined with.
DISTRIBUTION = {
    "schema_version": (),
    "image_tables": ("table_schema", "table_name"),
    "runs": ("run_id",),
    "run_iterations": ("run_id",),
    "segment_models": ("__dist_key__",),  # like image tables: joined by key without motion
}


@cache
def tables(schema: str) -> Tables:
    """The Core tables of gpcnn's objects in ``schema`` (current shape)."""
    md = sa.MetaData(schema=schema)
    now = sa.func.now()
    version = sa.Table("schema_version", md, sa.Column("version", sa.Integer, nullable=False))
    image_tables = sa.Table(
        "image_tables",
        md,
        sa.Column("table_schema", sa.Text, primary_key=True),
        sa.Column("table_name", sa.Text, primary_key=True),
        sa.Column("image_shape", sa.ARRAY(sa.Integer), nullable=False),
        sa.Column("dtype", sa.Text, nullable=False, server_default="uint8"),
        sa.Column("num_classes", sa.Integer, nullable=False),
        sa.Column("class_names", sa.ARRAY(sa.Text)),
        sa.Column("dist_keys", sa.ARRAY(sa.Integer), nullable=False),
        sa.Column("images_per_segment", sa.ARRAY(sa.BigInteger), nullable=False),
        sa.Column("buffer_size", sa.Integer, nullable=False),
        sa.Column("images", sa.BigInteger, nullable=False),
        sa.Column("source", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
        sa.Column("gpcnn_version", sa.Text, nullable=False),
        # the image table's own layout: 1 (gpcnn 0.1) has no ids column
        sa.Column("layout", sa.Integer, nullable=False, server_default="1"),
        # how images were dealt: "iid" or "label-skew" with its Dirichlet alpha; images per
        # segment and class, flattened segment by segment (NULL when not known)
        sa.Column("distribution", sa.Text, nullable=False, server_default="iid"),
        sa.Column("skew", sa.Float),
        sa.Column("class_counts", sa.ARRAY(sa.BigInteger)),
    )
    runs = sa.Table(
        "runs",
        md,
        sa.Column("run_id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("table_name", sa.Text, nullable=False),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("result_key", sa.Text),
        sa.Column("model_json", sa.Text, nullable=False),
        sa.Column("gpcnn_version", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False, server_default="running"),
        sa.Column("error", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
        sa.Column("updated_at", sa.DateTime(timezone=True)),
    )
    run_iterations = sa.Table(
        "run_iterations",
        md,
        sa.Column("run_id", sa.BigInteger, primary_key=True),
        sa.Column("iteration", sa.Integer, primary_key=True),
        sa.Column("metrics", sa.Text, nullable=False),
        sa.Column("weights", sa.LargeBinary, nullable=False),
        sa.Column("rule_state", sa.LargeBinary),
        sa.Column("optimizer", sa.LargeBinary),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
    )
    segment_models = sa.Table(
        "segment_models",
        md,
        sa.Column("run_id", sa.BigInteger, primary_key=True),
        sa.Column("__dist_key__", sa.Integer, primary_key=True),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("weights", sa.LargeBinary, nullable=False),
        sa.Column("optimizer", sa.LargeBinary),
    )
    return Tables(version, image_tables, runs, run_iterations, segment_models)


# -- shapes -------------------------------------------------------------------------------------


def _exists(conn: sa.Connection, backend: Backend, name: str) -> bool:
    found = conn.execute(
        sa.select(sa.func.to_regclass(f"{backend.qschema}.{backend.quote(name)}"))
    ).scalar()
    return found is not None


def found_version(conn: sa.Connection, backend: Backend) -> int:
    """The shape of gpcnn's tables in the schema: 0 none yet, 1 before versioning."""
    t = tables(backend.schema)
    if _exists(conn, backend, "schema_version"):
        return int(conn.execute(sa.select(sa.func.max(t.version.c.version))).scalar() or 0)
    return 1 if _exists(conn, backend, "runs") or _exists(conn, backend, "image_tables") else 0


def create_ddl(backend: Backend) -> list[str]:
    """CREATE TABLE for every table, with the engine's distribution clause."""
    t = tables(backend.schema)
    ddl = []
    for table in (t.version, t.image_tables, t.runs, t.run_iterations, t.segment_models):
        text = str(sa.schema.CreateTable(table).compile(dialect=backend.engine.dialect)).strip()
        ddl.append(text + backend.distribution(*DISTRIBUTION[table.name]))
    return ddl


def ensure_tables(
    conn: sa.Connection, backend: Backend, result_key: Callable[[dict], str] | None = None
) -> None:
    """Create the tables, or migrate an older shape, inside the caller's transaction.
    ``result_key`` computes a run's resume key from its stored parameters (migration 1 -> 2)."""
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
            step(conn, backend, result_key)
    conn.execute(t.version.delete())
    conn.execute(t.version.insert().values(version=SHAPE_VERSION))


def _migrate_1_to_2(conn: sa.Connection, backend: Backend, result_key) -> None:
    """Version 1 had no shape table, runs had no status and no resume key; tables absent in
    version 1 are created."""
    t = tables(backend.schema)
    ddl = dict(zip(DISTRIBUTION, create_ddl(backend), strict=True))
    for name, statement in ddl.items():
        if not _exists(conn, backend, name):
            conn.exec_driver_sql(statement)
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
                result_key=None if result_key is None else result_key(params),
            )
        )


def _migrate_2_to_3(conn: sa.Connection, backend: Backend, result_key) -> None:
    """Image tables record their layout; tables loaded before have layout 1 (no image ids)."""
    if "layout" not in _columns(conn, backend, "image_tables"):
        conn.exec_driver_sql(
            f"ALTER TABLE {backend.qschema}.image_tables "
            "ADD COLUMN layout integer NOT NULL DEFAULT 1"
        )


def _migrate_3_to_4(conn: sa.Connection, backend: Backend, result_key) -> None:
    """Image tables record how their images were dealt; earlier tables were all IID."""
    if "distribution" not in _columns(conn, backend, "image_tables"):
        conn.exec_driver_sql(
            f"ALTER TABLE {backend.qschema}.image_tables "
            "ADD COLUMN distribution text NOT NULL DEFAULT 'iid', "
            "ADD COLUMN skew double precision, ADD COLUMN class_counts bigint[]"
        )


# MIGRATIONS[i] takes shape i + 1 to shape i + 2.
MIGRATIONS = (_migrate_1_to_2, _migrate_2_to_3, _migrate_3_to_4)


def _columns(conn: sa.Connection, backend: Backend, table: str) -> set[str]:
    rows = conn.execute(
        sa.text(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = :s AND table_name = :t"
        ),
        {"s": backend.schema, "t": table},
    )
    return {r[0] for r in rows}


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
    t = tables(backend.schema)
    return [
        f"DROP TABLE IF EXISTS {backend.qschema}.{backend.quote(x.name)}"
        for x in (t.segment_models, t.run_iterations, t.runs, t.image_tables, t.version)
    ]


# -- the catalog of image tables ----------------------------------------------------------------


def current_schema(conn: sa.Connection) -> str:
    return conn.execute(sa.select(sa.func.current_schema())).scalar()


def relation_exists(conn: sa.Connection, qualified_sql: str) -> bool:
    """Whether a table (given as quoted SQL text) exists."""
    return conn.execute(sa.select(sa.func.to_regclass(qualified_sql))).scalar() is not None


def catalog_row(conn: sa.Connection, backend: Backend, table_schema: str, table_name: str):
    t = tables(backend.schema).image_tables
    if not _exists(conn, backend, "image_tables"):
        return None
    return conn.execute(
        sa.select(t).where(t.c.table_schema == table_schema, t.c.table_name == table_name)
    ).first()


def write_catalog_row(conn: sa.Connection, backend: Backend, row: dict) -> None:
    """Replace the catalog row of ``row["table_schema"], row["table_name"]``."""
    t = tables(backend.schema).image_tables
    conn.execute(
        t.delete().where(
            t.c.table_schema == row["table_schema"], t.c.table_name == row["table_name"]
        )
    )
    conn.execute(t.insert().values(**row))


def delete_catalog_row(conn: sa.Connection, backend: Backend, schema: str, name: str) -> None:
    t = tables(backend.schema).image_tables
    conn.execute(t.delete().where(t.c.table_schema == schema, t.c.table_name == name))


def catalog_rows(conn: sa.Connection, backend: Backend) -> list:
    t = tables(backend.schema).image_tables
    if not _exists(conn, backend, "image_tables"):
        return []
    return conn.execute(sa.select(t).order_by(t.c.table_schema, t.c.table_name)).all()


# -- runs ---------------------------------------------------------------------------------------


def insert_run(
    conn: sa.Connection, backend: Backend, table: str, params: dict, key: str, model_json: str
) -> int:
    from .. import __version__

    t = tables(backend.schema).runs
    return conn.execute(
        t.insert()
        .values(
            table_name=table,
            params=json.dumps(params),
            result_key=key,
            model_json=model_json,
            gpcnn_version=__version__,
            status="running",
            updated_at=sa.func.now(),
        )
        .returning(t.c.run_id)
    ).scalar()


def set_run_status(
    conn: sa.Connection, backend: Backend, run_id: int, status: str, error: str | None = None
) -> None:
    if status not in RUN_STATUSES:
        raise ValueError(f"status {status!r}: one of {RUN_STATUSES}")
    t = tables(backend.schema).runs
    conn.execute(
        t.update()
        .where(t.c.run_id == run_id)
        .values(status=status, error=error, updated_at=sa.func.now())
    )


def insert_iteration(
    conn: sa.Connection,
    backend: Backend,
    run_id: int,
    row: dict,
    weights: bytes,
    rule_state: bytes | None,
    optimizer: bytes | None,
) -> None:
    t = tables(backend.schema).run_iterations
    conn.execute(
        t.insert().values(
            run_id=run_id,
            iteration=row["iteration"],
            metrics=json.dumps(row),
            weights=weights,
            rule_state=rule_state,
            optimizer=optimizer,
        )
    )


def replace_segment_models(
    conn: sa.Connection,
    backend: Backend,
    run_id: int,
    iteration: int,
    starts: dict[int, tuple[bytes, bytes | None]],
) -> None:
    t = tables(backend.schema).segment_models
    conn.execute(t.delete().where(t.c.run_id == run_id))
    conn.execute(
        t.insert(),
        [
            {
                "run_id": run_id,
                "__dist_key__": k,
                "iteration": iteration,
                "weights": w,
                "optimizer": o,
            }
            for k, (w, o) in starts.items()
        ],
    )


def run_row(conn: sa.Connection, backend: Backend, run_id: int):
    t = tables(backend.schema).runs
    return conn.execute(sa.select(t).where(t.c.run_id == run_id)).first()


def iteration_metrics(conn: sa.Connection, backend: Backend, run_id: int) -> list[str]:
    t = tables(backend.schema).run_iterations
    query = sa.select(t.c.metrics).where(t.c.run_id == run_id).order_by(t.c.iteration)
    return list(conn.execute(query).scalars())


def last_iteration(conn: sa.Connection, backend: Backend, run_id: int):
    """(weights, rule_state, optimizer) of the newest stored iteration, or None."""
    t = tables(backend.schema).run_iterations
    return conn.execute(
        sa.select(t.c.weights, t.c.rule_state, t.c.optimizer)
        .where(t.c.run_id == run_id)
        .order_by(t.c.iteration.desc())
        .limit(1)
    ).first()


def segment_models(conn: sa.Connection, backend: Backend, run_id: int) -> list:
    t = tables(backend.schema).segment_models
    return conn.execute(
        sa.select(t.c["__dist_key__"], t.c.weights, t.c.optimizer).where(t.c.run_id == run_id)
    ).all()


def newest_resumable(
    conn: sa.Connection, backend: Backend, table: str, key: str
) -> tuple[int, int] | None:
    """(run_id, stored iterations) of the newest run of ``table`` with this resume key that did
    not finish or stop on purpose."""
    t = tables(backend.schema)
    done = (
        sa.select(sa.func.count())
        .where(t.run_iterations.c.run_id == t.runs.c.run_id)
        .scalar_subquery()
    )
    row = conn.execute(
        sa.select(t.runs.c.run_id, done)
        .where(
            t.runs.c.table_name == table,
            t.runs.c.result_key == key,
            t.runs.c.status.in_(RESUMABLE),
        )
        .order_by(t.runs.c.run_id.desc())
        .limit(1)
    ).first()
    return None if row is None else (int(row[0]), int(row[1]))


def run_summaries(conn: sa.Connection, backend: Backend, run_ids: Sequence[int] | None = None):
    """One row per run: id, table, status, error, created, updated, iterations and stored bytes."""
    t = tables(backend.schema)
    it = t.run_iterations
    stats = (
        sa.select(
            it.c.run_id,
            sa.func.count().label("iterations"),
            sa.func.coalesce(
                sa.func.sum(
                    sa.func.octet_length(it.c.weights)
                    + sa.func.coalesce(sa.func.octet_length(it.c.rule_state), 0)
                    + sa.func.coalesce(sa.func.octet_length(it.c.optimizer), 0)
                ),
                0,
            ).label("stored_bytes"),
        )
        .group_by(it.c.run_id)
        .subquery()
    )
    query = (
        sa.select(
            t.runs.c.run_id,
            t.runs.c.table_name,
            t.runs.c.status,
            t.runs.c.error,
            t.runs.c.params,
            t.runs.c.created_at,
            t.runs.c.updated_at,
            sa.func.coalesce(stats.c.iterations, 0).label("iterations"),
            sa.func.coalesce(stats.c.stored_bytes, 0).label("stored_bytes"),
        )
        .select_from(t.runs.outerjoin(stats, stats.c.run_id == t.runs.c.run_id))
        .order_by(t.runs.c.run_id)
    )
    if run_ids is not None:
        query = query.where(t.runs.c.run_id.in_(list(run_ids)))
    return conn.execute(query).all()


def delete_runs(conn: sa.Connection, backend: Backend, run_ids: Sequence[int]) -> int:
    t = tables(backend.schema)
    ids = list(run_ids)
    for table in (t.segment_models, t.run_iterations):
        conn.execute(table.delete().where(table.c.run_id.in_(ids)))
    return conn.execute(t.runs.delete().where(t.runs.c.run_id.in_(ids))).rowcount
