"""gpcnn's own tables and every statement on them, in SQLAlchemy Core.

The tables: ``image_tables`` (the catalog of image tables), ``runs``, ``run_iterations`` (each
iteration's metrics), ``checkpoints`` (stored vectors in chunks: an iteration's model, rule state
and optimizer state, and each segment's next start for rules that keep per-segment models) and
``transfers`` (the vectors one statement sends to the segments, in chunks the query joins; on
Greenplum replicated, so every segment reads them locally). No value is bigger than a chunk, and
weights reach the server by binary COPY, never inside statement text.

Their shape is versioned (``schema_version``), like the functions are:
``ensure_tables`` creates them, migrates an older shape in the caller's transaction, or refuses a
newer one. Functions here take an open connection (the caller owns the transaction) and the
handle's backend for the engine's DDL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import sqlalchemy as sa

from gpcnn.engines.base import EVERY_KEY, Backend, text_safe
from gpcnn.engines.copy import CopyStream, chunk_rows

SHAPE_VERSION = 5
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
    checkpoints: sa.Table
    transfers: sa.Table

    def all(self) -> tuple[sa.Table, ...]:
        return (
            self.version,
            self.image_tables,
            self.runs,
            self.run_iterations,
            self.checkpoints,
            self.transfers,
        )


# What follows CREATE TABLE on Greenplum: distributed like the rows they are joined with; None:
# replicated (every segment reads its own copy).
DISTRIBUTION = {
    "schema_version": (),
    "image_tables": ("table_schema", "table_name"),
    "runs": ("run_id",),
    "run_iterations": ("run_id",),
    "checkpoints": ("run_id",),
    "transfers": None,
}
CHUNKED = ("checkpoints", "transfers")  # their data column: out of line, uncompressed
RUN_PARTS = ("weights", "rule_state", "optimizer")  # a checkpoint's vectors (key -1)
SEGMENT_PARTS = ("segment_weights", "segment_optimizer")  # each key's next start

CHECKPOINT_PREFIX = (
    ("run_id", "bigint"),
    ("iteration", "integer"),
    ("part", "text"),
    ("__dist_key__", "integer"),
)


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
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
    )
    checkpoints = sa.Table(
        "checkpoints",
        md,
        sa.Column("run_id", sa.BigInteger, primary_key=True),
        sa.Column("iteration", sa.Integer, primary_key=True),
        sa.Column("part", sa.Text, primary_key=True),
        sa.Column("__dist_key__", sa.Integer, primary_key=True),
        sa.Column("chunk", sa.Integer, primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )
    transfers = sa.Table(
        "transfers",
        md,
        sa.Column("transfer_id", sa.BigInteger, primary_key=True),
        sa.Column("__dist_key__", sa.Integer, primary_key=True),
        sa.Column("chunk", sa.Integer, primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
        prefixes=["UNLOGGED"],  # rewritten every statement; nothing to recover after a crash
    )
    return Tables(version, image_tables, runs, run_iterations, checkpoints, transfers)


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
    return [
        statement
        for table in tables(backend.schema).all()
        for statement in table_ddl(backend, table)
    ]


def table_ddl(backend: Backend, table: sa.Table) -> list[str]:
    text = str(sa.schema.CreateTable(table).compile(dialect=backend.engine.dialect)).strip()
    columns = DISTRIBUTION[table.name]
    distribution = backend.replicated() if columns is None else backend.distribution(*columns)
    ddl = [text + distribution]
    if table.name in CHUNKED:
        ddl.append(
            f"ALTER TABLE {_qualified(backend, table.name)} ALTER COLUMN data SET STORAGE EXTERNAL"
        )
    return ddl


# Parameters that do not change what a run computes: a run may be resumed with other values.
NON_RESULT_PARAMS = frozenset(
    {
        "progress",  # gpcnn 0.1
        "verbose",
        "database",
        "schema",  # gpcnn 0.1
        "iterations",
        "warm_start",
        "validation_table",
        "validation_data",  # gpcnn 0.1
        "validation_freq",
    }
)


def result_key(params: dict) -> str:
    """A digest of the parameters that change the result (what resume matches on)."""
    kept = {k: v for k, v in params.items() if k not in NON_RESULT_PARAMS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _qualified(backend: Backend, name: str) -> str:
    return f"{backend.qschema}.{backend.quote(name)}"


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
        if not _exists(conn, backend, table.name):
            for statement in table_ddl(backend, table):
                conn.exec_driver_sql(statement)


def _migrate_4_to_5(conn: sa.Connection, backend: Backend) -> None:
    """Shapes 2 to 4 kept each vector as one bytea value (``run_iterations.weights``, ``rule_state``,
    ``optimizer``; ``segment_models``): they move into ``checkpoints`` in chunks, inside the
    server, and the old columns and table go."""
    _create_missing(conn, backend)
    iterations, old_segments = _qualified(backend, "run_iterations"), "segment_models"
    moves = []
    if "weights" in _columns(conn, backend, "run_iterations"):
        moves += [(iterations, part, part, str(EVERY_KEY)) for part in RUN_PARTS]
    if _exists(conn, backend, old_segments):
        source = _qualified(backend, old_segments)
        moves += [
            (source, part, part.removeprefix("segment_"), "s.__dist_key__")
            for part in SEGMENT_PARTS
        ]
    target = _qualified(backend, "checkpoints")
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
    if _exists(conn, backend, old_segments):
        conn.exec_driver_sql(f"DROP TABLE {_qualified(backend, old_segments)}")


# MIGRATIONS[i] takes shape i + 1 to shape i + 2.
MIGRATIONS = (_migrate_1_to_2, _migrate_2_to_3, _migrate_3_to_4, _migrate_4_to_5)


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
    return [
        f"DROP TABLE IF EXISTS {_qualified(backend, x.name)}"
        for x in reversed(tables(backend.schema).all())
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
    from gpcnn.version import __version__

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


def _copy_chunks(
    conn: sa.Connection,
    backend: Backend,
    table: sa.Table,
    prefix: tuple[tuple[str, str], ...],
    vectors: Iterable[tuple[tuple, np.ndarray]],
) -> None:
    """Write vectors as chunk rows by binary COPY in the caller's transaction: the weights travel
    as data, never as statement text."""
    sql = backend.chunk_copy_sql(_qualified(backend, table.name), [name for name, _ in prefix])
    types = tuple(sql_type for _, sql_type in prefix)
    stream = CopyStream(chunk_rows(types, vectors, backend.chunk_values))
    with conn.connection.driver_connection.cursor() as cursor:
        cursor.copy_expert(sql, stream, size=backend.chunk_bytes + 64)
    if stream.error is not None:
        raise stream.error


def _read_chunks(conn: sa.Connection, query) -> dict[tuple, np.ndarray]:
    """(part, key) -> the vector assembled from its chunks (rows: part, key, chunk, data)."""
    parts: dict[tuple, list] = {}
    for part, key, chunk, data in conn.execute(query):
        found = parts.setdefault((part, key), [])
        if chunk != len(found):
            raise ValueError(f"stored vector {part} of key {key} lacks chunk {len(found)}")
        found.append(np.frombuffer(data, dtype="<f4"))
    return {k: np.concatenate(v) for k, v in parts.items()}


def store_checkpoint(
    conn: sa.Connection,
    backend: Backend,
    run_id: int,
    iteration: int,
    vectors: dict[str, np.ndarray | None],
) -> None:
    """An iteration's checkpoint (``RUN_PARTS`` -> vector or None), replacing any left by an
    attempt at the same iteration that stopped before its row was written."""
    c = tables(backend.schema).checkpoints
    conn.execute(c.delete().where(c.c.run_id == run_id, c.c.iteration == iteration))
    stored = [
        ((run_id, iteration, part, EVERY_KEY), vector)
        for part, vector in vectors.items()
        if vector is not None
    ]
    _copy_chunks(conn, backend, c, CHECKPOINT_PREFIX, stored)


def insert_iteration(conn: sa.Connection, backend: Backend, run_id: int, row: dict) -> None:
    """The iteration's metrics: from now on its checkpoint counts (``last_checkpoint``)."""
    conn.execute(
        tables(backend.schema)
        .run_iterations.insert()
        .values(run_id=run_id, iteration=row["iteration"], metrics=json.dumps(row))
    )


def replace_segment_models(
    conn: sa.Connection,
    backend: Backend,
    run_id: int,
    iteration: int,
    starts: dict[int, tuple[np.ndarray, np.ndarray | None]],
) -> None:
    """Each key's next start (weights, optimizer state or None) replaces the previous ones."""
    c = tables(backend.schema).checkpoints
    conn.execute(c.delete().where(c.c.run_id == run_id, c.c.part.in_(SEGMENT_PARTS)))
    stored = [
        ((run_id, iteration, part, key), vector)
        for key, pair in starts.items()
        for part, vector in zip(SEGMENT_PARTS, pair, strict=True)
        if vector is not None
    ]
    _copy_chunks(conn, backend, c, CHECKPOINT_PREFIX, stored)


def prune_checkpoints(
    conn: sa.Connection, backend: Backend, run_id: int, keep: Sequence[int], up_to: int
) -> int:
    """Delete the run's checkpoints of every iteration up to ``up_to`` not in ``keep``; the rows
    deleted. Later ones are left alone: the next iteration may be storing its own meanwhile."""
    c = tables(backend.schema).checkpoints
    return conn.execute(
        c.delete().where(
            c.c.run_id == run_id,
            c.c.part.in_(RUN_PARTS),
            c.c.iteration <= up_to,
            c.c.iteration.not_in(list(keep)),
        )
    ).rowcount


def run_row(conn: sa.Connection, backend: Backend, run_id: int):
    t = tables(backend.schema).runs
    return conn.execute(sa.select(t).where(t.c.run_id == run_id)).first()


def iteration_metrics(conn: sa.Connection, backend: Backend, run_id: int) -> list[str]:
    t = tables(backend.schema).run_iterations
    query = sa.select(t.c.metrics).where(t.c.run_id == run_id).order_by(t.c.iteration)
    return list(conn.execute(query).scalars())


def last_checkpoint(
    conn: sa.Connection, backend: Backend, run_id: int
) -> tuple[int, dict[str, np.ndarray]] | None:
    """(iteration, part -> vector) of the newest stored checkpoint whose iteration row exists,
    or None."""
    t = tables(backend.schema)
    c, it = t.checkpoints, t.run_iterations
    latest = conn.execute(
        sa.select(sa.func.max(c.c.iteration))
        .select_from(c.join(it, (it.c.run_id == c.c.run_id) & (it.c.iteration == c.c.iteration)))
        .where(c.c.run_id == run_id, c.c.part == "weights")
    ).scalar()
    if latest is None:
        return None
    return int(latest), checkpoint(conn, backend, run_id, int(latest))


def checkpoint(
    conn: sa.Connection, backend: Backend, run_id: int, iteration: int
) -> dict[str, np.ndarray]:
    """part -> vector of one stored iteration (empty if its checkpoint was not kept)."""
    c = tables(backend.schema).checkpoints
    query = (
        sa.select(c.c.part, c.c["__dist_key__"], c.c.chunk, c.c.data)
        .where(c.c.run_id == run_id, c.c.iteration == iteration, c.c.part.in_(RUN_PARTS))
        .order_by(c.c.part, c.c.chunk)
    )
    return {part: v for (part, _), v in _read_chunks(conn, query).items()}


def stored_parts(conn: sa.Connection, backend: Backend, run_id: int) -> list:
    """(part, iterations, chunks, bytes) of what the run stores, one row per part."""
    c = tables(backend.schema).checkpoints
    return conn.execute(
        sa.select(
            c.c.part,
            sa.func.array_agg(sa.distinct(c.c.iteration)),
            sa.func.count(),
            sa.func.sum(sa.func.octet_length(c.c.data)),
        )
        .where(c.c.run_id == run_id)
        .group_by(c.c.part)
        .order_by(c.c.part)
    ).all()


def segment_models(
    conn: sa.Connection, backend: Backend, run_id: int
) -> dict[int, tuple[np.ndarray, np.ndarray | None]]:
    """Each key's stored next start: (weights, optimizer state or None)."""
    c = tables(backend.schema).checkpoints
    query = (
        sa.select(c.c.part, c.c["__dist_key__"], c.c.chunk, c.c.data)
        .where(c.c.run_id == run_id, c.c.part.in_(SEGMENT_PARTS))
        .order_by(c.c["__dist_key__"], c.c.part, c.c.chunk)
    )
    found = _read_chunks(conn, query)
    weights, optimizer = SEGMENT_PARTS
    return {
        key: (vector, found.get((optimizer, key)))
        for (part, key), vector in found.items()
        if part == weights
    }


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
    it, c = t.run_iterations, t.checkpoints
    counts = (
        sa.select(it.c.run_id, sa.func.count().label("iterations")).group_by(it.c.run_id).subquery()
    )
    sizes = (
        sa.select(
            c.c.run_id,
            sa.func.count(sa.distinct(c.c.iteration))
            .filter(c.c.part.in_(RUN_PARTS))
            .label("checkpoints"),
            sa.func.sum(sa.func.octet_length(c.c.data)).label("stored_bytes"),
        )
        .group_by(c.c.run_id)
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
            sa.func.coalesce(counts.c.iterations, 0).label("iterations"),
            sa.func.coalesce(sizes.c.checkpoints, 0).label("checkpoints"),
            sa.func.coalesce(sizes.c.stored_bytes, 0).label("stored_bytes"),
        )
        .select_from(
            t.runs.outerjoin(counts, counts.c.run_id == t.runs.c.run_id).outerjoin(
                sizes, sizes.c.run_id == t.runs.c.run_id
            )
        )
        .order_by(t.runs.c.run_id)
    )
    if run_ids is not None:
        query = query.where(t.runs.c.run_id.in_(list(run_ids)))
    return conn.execute(query).all()


def delete_runs(conn: sa.Connection, backend: Backend, run_ids: Sequence[int]) -> int:
    t = tables(backend.schema)
    ids = list(run_ids)
    for table in (t.checkpoints, t.run_iterations):
        conn.execute(table.delete().where(table.c.run_id.in_(ids)))
    return conn.execute(t.runs.delete().where(t.runs.c.run_id.in_(ids))).rowcount
