"""The current shape of gpcnn's tables: their SQLAlchemy Core definitions (``tables``), how each is
distributed and stored, which rows have an owner, and their DDL (``create_ddl``). How an older
shape becomes this one is ``migrations``'.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import sqlalchemy as sa

from gpcnn.engines.backend import Backend
from gpcnn.engines.views import create_views_ddl


@dataclass(frozen=True)
class Tables:
    version: sa.Table
    image_tables: sa.Table
    runs: sa.Table
    run_iterations: sa.Table
    checkpoints: sa.Table
    transfers: sa.Table
    models: sa.Table
    model_weights: sa.Table
    prediction_tables: sa.Table

    def all(self) -> tuple[sa.Table, ...]:
        return (
            self.version,
            self.image_tables,
            self.runs,
            self.run_iterations,
            self.checkpoints,
            self.transfers,
            self.models,
            self.model_weights,
            self.prediction_tables,
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
    "models": ("name",),
    "model_weights": ("name",),
    "prediction_tables": ("table_schema", "table_name"),
}
# The tables whose rows belong to the role that wrote them (``created_by``): row-level security
# lets a member of the user role see and change only their own (``roles.secure_rows``).
OWNED = (
    "image_tables",
    "runs",
    "run_iterations",
    "checkpoints",
    "transfers",
    "models",
    "model_weights",
    "prediction_tables",
)
OWNER_COLUMN = "created_by"
# their data column: out of line, uncompressed
CHUNKED = ("checkpoints", "transfers", "model_weights")
RUN_PARTS = ("weights", "rule_state", "optimizer")  # a checkpoint's vectors (key -1)
SEGMENT_PARTS = ("segment_weights", "segment_optimizer")  # each key's next start


@cache
def tables(schema: str) -> Tables:
    """The Core tables of gpcnn's objects in ``schema`` (current shape)."""
    md = sa.MetaData(schema=schema)
    now = sa.func.now()

    def created_by(key: bool = False) -> sa.Column:
        # CURRENT_USER is SQL's keyword, not a function a search path could find elsewhere. In
        # the catalogs of tables and the model library it is part of the key: a row another role
        # writes for a name never blocks this role's (``Catalog.image_table`` reads the table
        # owner's row; each role has its own model names).
        return sa.Column(
            OWNER_COLUMN,
            sa.Text,
            primary_key=key,
            nullable=False,
            server_default=sa.text("CURRENT_USER"),
        )

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
        # the label skew of those counts (``label_skew``: largest segment's total-variation
        # distance from the table's mix, image-weighted mean); images of the shared sample that
        # every segment holds besides its own (0: none)
        sa.Column("label_skew_max", sa.Float),
        sa.Column("label_skew_mean", sa.Float),
        sa.Column("shared_images", sa.BigInteger, nullable=False, server_default="0"),
        created_by(key=True),
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
        created_by(),
    )
    run_iterations = sa.Table(
        "run_iterations",
        md,
        sa.Column("run_id", sa.BigInteger, primary_key=True),
        sa.Column("iteration", sa.Integer, primary_key=True),
        sa.Column("metrics", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
        created_by(),
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
        created_by(),
    )
    transfers = sa.Table(
        "transfers",
        md,
        sa.Column("transfer_id", sa.BigInteger, primary_key=True),
        sa.Column("__dist_key__", sa.Integer, primary_key=True),
        sa.Column("chunk", sa.Integer, primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
        # who wrote it (the writer's application_name, ``gpcnn/<client pid>``) and when: a
        # transfer whose owner has no backend left is a dead client's (``sweep_transfers``)
        sa.Column("owner", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
        created_by(),
        prefixes=["UNLOGGED"],  # rewritten every statement; nothing to recover after a crash
    )
    # the model library: a Keras model's JSON under a name, its weights (if stored) in chunks
    models = sa.Table(
        "models",
        md,
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("model_json", sa.Text, nullable=False),
        sa.Column("weights", sa.Boolean, nullable=False),
        sa.Column("description", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
        sa.Column("gpcnn_version", sa.Text, nullable=False),
        created_by(key=True),
    )
    model_weights = sa.Table(
        "model_weights",
        md,
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("chunk", sa.Integer, primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
        created_by(key=True),
    )
    # the tables gpcnn wrote predictions into: replace=True overwrites only these
    prediction_tables = sa.Table(
        "prediction_tables",
        md,
        sa.Column("table_schema", sa.Text, primary_key=True),
        sa.Column("table_name", sa.Text, primary_key=True),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
        sa.Column("gpcnn_version", sa.Text, nullable=False),
        created_by(key=True),
    )
    return Tables(
        version,
        image_tables,
        runs,
        run_iterations,
        checkpoints,
        transfers,
        models,
        model_weights,
        prediction_tables,
    )


def exists(conn: sa.Connection, backend: Backend, name: str) -> bool:
    found = conn.execute(
        sa.select(sa.func.to_regclass(f"{backend.qschema}.{backend.quote(name)}"))
    ).scalar()
    return found is not None


def create_ddl(backend: Backend) -> list[str]:
    """CREATE TABLE for every table, with the engine's distribution clause; then the views."""
    return [
        statement
        for table in tables(backend.schema).all()
        for statement in table_ddl(backend, table)
    ] + create_views_ddl(backend)


def table_ddl(backend: Backend, table: sa.Table) -> list[str]:
    text = str(sa.schema.CreateTable(table).compile(dialect=backend.engine.dialect)).strip()
    columns = DISTRIBUTION[table.name]
    distribution = backend.replicated() if columns is None else backend.distribution(*columns)
    ddl = [text + distribution]
    if table.name in CHUNKED:
        ddl.append(
            f"ALTER TABLE {qualified(backend, table.name)} ALTER COLUMN data SET STORAGE EXTERNAL"
        )
    return ddl


def qualified(backend: Backend, name: str) -> str:
    return f"{backend.qschema}.{backend.quote(name)}"
