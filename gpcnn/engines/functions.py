"""The DDL of gpcnn's plpython3u functions and aggregates, and the statements that manage them.

The bodies come from ``gpcnn.install`` (the in-database sources and their loader); this module says
what the functions are called, what they take and return, and how the aggregates are built on them.
DDL runs through the driver as text without parameters, so the ``%`` of Python bodies is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from gpcnn.engines.backend import Backend

DOLLAR_TAG = "$gpcnn$"
# Every function runs under this search path, whatever the caller's: nothing a user can create
# objects in is searched, so no function or operator of theirs stands in for a built-in.
PINNED = "SET search_path = pg_catalog, pg_temp"


@dataclass(frozen=True)
class Function:
    name: str
    args: tuple[tuple[str, str], ...]
    returns: str
    call: str  # the Python expression the body returns
    strict: bool = False

    def ddl(self, qschema: str, body_prefix: str) -> str:
        signature = ", ".join(f"{arg} {sql_type}" for arg, sql_type in self.args)
        strict = " STRICT" if self.strict else ""
        body = body_prefix + f"return {self.call}\n"
        if DOLLAR_TAG in body:
            raise ValueError(f"the in-database sources contain the dollar-quote tag {DOLLAR_TAG}")
        return (
            f"CREATE FUNCTION {qschema}.{self.name}({signature}) RETURNS {self.returns} AS "
            f"{DOLLAR_TAG}{body}{DOLLAR_TAG} LANGUAGE plpython3u{strict} {PINNED}"
        )


_START_ARGS = (("key", "integer"), ("chunk", "integer"), ("data", "bytea"))
_ROW_ARGS = (("x", "bytea"), ("y", "bytea"), ("n", "integer"))
_MODEL_ARGS = (("model_json", "text"), ("options_json", "text"))
_EVAL_ARGS = (*_START_ARGS, *_ROW_ARGS, *_MODEL_ARGS)
_TRAIN_ARGS = (*_EVAL_ARGS, ("expected", "bigint"))
_PREDICT_ARGS = (*_START_ARGS, ("x", "bytea"), ("n", "integer"), *_MODEL_ARGS)
_MERGE_CHUNK_ARGS = (("chunk", "integer"), ("count", "bigint"), ("data", "bytea"))

FUNCTIONS = (
    Function("probe", (("threads", "integer"),), "text", "keras_state.probe(threads)"),
    Function(
        "train_transition",
        (("state", "bytea"), *_TRAIN_ARGS),
        "bytea",
        "segment_errors.on_segment(key, segment.train_transition, state, key, chunk, data, x, y, n, "
        "model_json, options_json, expected)",
    ),
    Function(
        "evaluate_transition",
        (("state", "bytea"), *_EVAL_ARGS),
        "bytea",
        "segment.evaluate_transition(state, key, chunk, data, x, y, n, model_json, options_json)",
    ),
    Function(
        "state_chunks",
        (("state", "bytea"), ("chunk_values", "integer")),
        "TABLE (chunk integer, count bigint, data bytea)",
        "states.state_chunks(state, chunk_values)",
    ),
    Function("merge_states", (("a", "bytea"), ("b", "bytea")), "bytea", "states.add_states(a, b)"),
    Function("final_state", (("state", "bytea"),), "bytea", "states.state_result(state)"),
    Function(
        "merge_chunk_transition",
        (("state", "bytea"), *_MERGE_CHUNK_ARGS),
        "bytea",
        "merging.merge_chunk_transition(state, chunk, count, data)",
    ),
    Function(
        "merge_chunk_final",
        (("state", "bytea"),),
        "bytea",
        "merging.merge_chunk_final(state)",
    ),
    Function(
        "predict_transition",
        (("state", "bytea"), *_PREDICT_ARGS),
        "bytea",
        "segment_errors.on_segment(key, segment.predict_transition, state, key, chunk, data, x, n, "
        "model_json, options_json)",
    ),
    Function("predicted", (("state", "bytea"),), "bytea", "segment.predicted(state)"),
    Function(
        "prediction_rows",
        (("probabilities", "bytea"), ("ids", "bytea"), ("top_k", "integer")),
        "TABLE (id bigint, rank integer, class_value integer, prob double precision)",
        "segment.prediction_rows(probabilities, ids, top_k)",
        strict=True,
    ),
    Function(
        "first_out_of_range",
        (
            ("data", "bytea"),
            ("n", "integer"),
            ("length", "integer"),
            ("top", "double precision"),
        ),
        "bigint",
        "sql_arrays.first_out_of_range(data, n, length, top)",
        strict=True,
    ),
    Function(
        "pixel_bytes",
        (("data", "bytea"), ("n", "integer"), ("length", "integer"), ("normalized", "boolean")),
        "bytea",
        "sql_arrays.pixel_bytes(data, n, length, normalized)",
        strict=True,
    ),
    Function(
        "image_bytes",
        (("data", "bytea"), ("n", "integer")),
        "bytea",
        "sql_arrays.image_bytes(data, n)",
        strict=True,
    ),
    Function(
        "little_endian",
        (("data", "bytea"), ("n", "integer"), ("width", "integer")),
        "bytea",
        "sql_arrays.little_endian(data, n, width)",
        strict=True,
    ),
)

# An array's in-memory form as bytea, for ``sql_arrays.array_values``: the server's ``byteasend``
# copies any varlena as it is (PL/Python would convert an array element by element).
ARRAY_BYTES = (
    "CREATE FUNCTION {qschema}.array_bytes(anyarray) RETURNS bytea AS 'byteasend' "
    f"LANGUAGE internal IMMUTABLE STRICT {PINNED}"
)


def aggregates_ddl(qschema: str) -> list[str]:
    """``train`` and ``evaluate`` return one segment's small state; they have no combine
    function: the start vector arrives as the first rows of the group, and the trained vector
    waits in the process that trained it, so a group is never split across processes.
    ``merge`` adds small states and applies ``final_state``; ``merge_chunks`` merges one chunk of
    the segments' vectors (or, for chunk -1, their small states). ``predict`` runs as a window
    over a key's buffers (one output per row): its weights arrive like ``train``'s start."""

    def aggregate(name: str, args: tuple[tuple[str, str], ...], sfunc: str, extra: str) -> str:
        types = ", ".join(sql_type for _, sql_type in args)
        return (
            f"CREATE AGGREGATE {qschema}.{name}({types}) (SFUNC = {qschema}.{sfunc}, "
            f"STYPE = bytea{extra})"
        )

    return [
        aggregate("train", _TRAIN_ARGS, "train_transition", ""),
        aggregate("evaluate", _EVAL_ARGS, "evaluate_transition", ""),
        aggregate(
            "predict", _PREDICT_ARGS, "predict_transition", f", FINALFUNC = {qschema}.predicted"
        ),
        aggregate(
            "merge",
            (("state", "bytea"),),
            "merge_states",
            f", COMBINEFUNC = {qschema}.merge_states, FINALFUNC = {qschema}.final_state",
        ),
        aggregate(
            "merge_chunks",
            _MERGE_CHUNK_ARGS,
            "merge_chunk_transition",
            f", FINALFUNC = {qschema}.merge_chunk_final",
        ),
    ]


def install_ddl(qschema: str, body_prefix: str, version: str) -> list[str]:
    """Every function and aggregate, then ``version()``, into a schema that has none of them."""
    ddl = [f.ddl(qschema, body_prefix) for f in FUNCTIONS]
    ddl.append(ARRAY_BYTES.format(qschema=qschema))
    ddl += aggregates_ddl(qschema)
    literal = version.replace("'", "''")
    ddl.append(
        f"CREATE FUNCTION {qschema}.version() RETURNS text AS $$ SELECT '{literal}'::text $$ "
        f"LANGUAGE sql IMMUTABLE {PINNED}"
    )
    return ddl


def run_ddl(conn: sa.Connection, statement: str) -> None:
    """Run DDL text as is: no parameters, so psycopg2 leaves the ``%`` of Python bodies alone."""
    driver = conn.connection.driver_connection
    assert driver is not None  # None only once the connection was closed or invalidated
    with driver.cursor() as cursor:
        cursor.execute(statement)


def existing(conn: sa.Connection, schema: str) -> list[tuple[str, str]]:
    """(signature, 'a' for aggregates / 'f') of every function in the schema, aggregates first."""
    return [
        (signature, kind)
        for signature, kind in conn.execute(
            sa.text(
                "SELECT p.oid::regprocedure::text, p.prokind FROM pg_proc p "
                "JOIN pg_namespace s ON s.oid = p.pronamespace WHERE s.nspname = :schema "
                "ORDER BY p.prokind = 'a' DESC"
            ),
            {"schema": schema},
        )
    ]


def drop_existing(conn: sa.Connection, schema: str) -> None:
    """Drop every function and aggregate of the schema, so an upgrade may change signatures."""
    for signature, kind in existing(conn, schema):
        run_ddl(conn, f"DROP {'AGGREGATE' if kind == 'a' else 'FUNCTION'} {signature}")


def installed_version(backend: Backend) -> str | None:
    with backend.engine.connect() as conn:
        found = conn.execute(
            sa.text(
                "SELECT 1 FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace "
                "WHERE s.nspname = :schema AND p.proname = 'version'"
            ),
            {"schema": backend.schema},
        ).scalar()
        if not found:
            return None
        return conn.execute(sa.text(f"SELECT {backend.qschema}.version()")).scalar()


def create_plpython(conn: sa.Connection) -> None:
    """CREATE EXTENSION plpython3u in a savepoint (it may fail for want of privilege)."""
    with conn.begin_nested():
        conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS plpython3u"))


def has_plpython(conn: sa.Connection) -> bool:
    return bool(
        conn.execute(sa.text("SELECT 1 FROM pg_language WHERE lanname = 'plpython3u'")).scalar()
    )
