"""Installs gpcnn's plpython3u functions and aggregates, generated from plain modules of gpcnn/.

Every function body carries the source of the in-database modules (``weights``, ``merge``,
``segment``) and loads them once per server process into ``GD`` as a private package, keyed by a hash
of the sources; then it calls one function of ``segment``. So the server needs only TensorFlow, Keras
and numpy, never gpcnn itself, and what runs inside the database is exactly what the tests import.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

import sqlalchemy as sa

from . import __version__

IN_DATABASE_MODULES = ("weights", "merge", "segment")  # dependencies first


class InstallError(RuntimeError):
    """The database lacks what gpcnn needs, or holds another version of it."""


def _sources() -> list[tuple[str, str]]:
    package = resources.files("gpcnn")
    return [(name, (package / f"{name}.py").read_text()) for name in IN_DATABASE_MODULES]


def bundle_id() -> str:
    """Identifies the installed code: the gpcnn version plus a hash of the in-database sources."""
    digest = hashlib.sha256(repr(_sources()).encode()).hexdigest()[:12]
    return f"{__version__}+{digest}"


_BOOTSTRAP = """\
_bundle = {bundle!r}
_package = GD.get(_bundle)
if _package is None:
    import sys, types
    _name = "_gpcnn_" + _bundle.replace(".", "_").replace("+", "_")
    _package = types.ModuleType(_name)
    _package.__path__ = []
    sys.modules[_name] = _package
    for _module, _source in {sources!r}:
        _m = types.ModuleType(_name + "." + _module)
        _m.__package__ = _name
        sys.modules[_m.__name__] = _m
        exec(compile(_source, "gpcnn/" + _module + ".py", "exec"), _m.__dict__)
        setattr(_package, _module, _m)
    GD[_bundle] = _package
segment = _package.segment
"""


@dataclass(frozen=True)
class Function:
    name: str
    args: tuple[tuple[str, str], ...]
    returns: str
    call: str
    strict: bool = False

    def ddl(self, schema: str, body_prefix: str) -> str:
        signature = ", ".join(f"{arg} {sql_type}" for arg, sql_type in self.args)
        strict = " STRICT" if self.strict else ""
        body = body_prefix + f"return {self.call}\n"
        if "$gpcnn$" in body:
            raise InstallError("the in-database sources contain the dollar-quote tag $gpcnn$")
        return (
            f"CREATE FUNCTION {schema}.{self.name}({signature}) RETURNS {self.returns} AS "
            f"$gpcnn${body}$gpcnn$ LANGUAGE plpython3u{strict}"
        )


_EVAL_ARGS = (
    ("x", "bytea"),
    ("y", "bytea"),
    ("n", "integer"),
    ("model_json", "text"),
    ("options_json", "text"),
    ("weights", "bytea"),
)
_TRAIN_ARGS = (("key", "integer"), *_EVAL_ARGS, ("optimizer", "bytea"), ("expected", "bigint"))

FUNCTIONS = (
    Function("probe", (("threads", "integer"),), "text", "segment.probe(threads)"),
    Function(
        "train_transition",
        (("state", "bytea"), *_TRAIN_ARGS),
        "bytea",
        "segment.train_transition(state, key, x, y, n, model_json, options_json, weights, optimizer, "
        "expected)",
    ),
    Function(
        "evaluate_transition",
        (("state", "bytea"), *_EVAL_ARGS),
        "bytea",
        "segment.evaluate_transition(state, x, y, n, model_json, options_json, weights)",
    ),
    Function("merge_states", (("a", "bytea"), ("b", "bytea")), "bytea", "segment.merge(a, b)"),
    Function("final_state", (("state", "bytea"),), "bytea", "segment.final(state)"),
    Function(
        "predict",
        (
            ("x", "bytea"),
            ("n", "integer"),
            ("model_json", "text"),
            ("options_json", "text"),
            ("weights", "bytea"),
        ),
        "bytea",
        "segment.predict(x, n, model_json, options_json, weights)",
        strict=True,
    ),
)


def _aggregates(schema: str) -> list[str]:
    """``train`` and ``evaluate`` return the raw state (per segment, or combined on a Greenplum
    coordinator through COMBINEFUNC); ``merge`` adds states and applies ``final_state``."""

    def aggregate(name: str, args: tuple[tuple[str, str], ...], sfunc: str, final: str) -> str:
        types = ", ".join(sql_type for _, sql_type in args)
        return (
            f"CREATE AGGREGATE {schema}.{name}({types}) (SFUNC = {schema}.{sfunc}, STYPE = bytea, "
            f"COMBINEFUNC = {schema}.merge_states{final})"
        )

    return [
        aggregate("train", _TRAIN_ARGS, "train_transition", ""),
        aggregate("evaluate", _EVAL_ARGS, "evaluate_transition", ""),
        aggregate(
            "merge", (("state", "bytea"),), "merge_states", f", FINALFUNC = {schema}.final_state"
        ),
    ]


def statements(schema: str = "gpcnn", quote=None) -> list[str]:
    """The DDL that installs (or upgrades) gpcnn into ``schema``, in order."""
    q = quote(schema) if quote else f'"{schema}"'
    prefix = _BOOTSTRAP.format(bundle=bundle_id(), sources=_sources())
    version = bundle_id().replace("'", "''")
    ddl = [f"CREATE SCHEMA IF NOT EXISTS {q}"]
    ddl += [f.ddl(q, prefix) for f in FUNCTIONS]
    ddl += _aggregates(q)
    ddl.append(
        f"CREATE FUNCTION {q}.version() RETURNS text AS $$ SELECT '{version}'::text $$ "
        "LANGUAGE sql IMMUTABLE"
    )
    return ddl


def run_ddl(conn: sa.Connection, statement: str) -> None:
    """Run DDL text as is: no parameters, so psycopg2 leaves the ``%`` of Python bodies alone."""
    with conn.connection.driver_connection.cursor() as cursor:
        cursor.execute(statement)


def _drop_existing(conn: sa.Connection, schema: str) -> None:
    """Drop every function and aggregate of the schema, so an upgrade may change signatures."""
    rows = conn.execute(
        sa.text(
            "SELECT p.oid::regprocedure::text, p.prokind FROM pg_proc p "
            "JOIN pg_namespace s ON s.oid = p.pronamespace WHERE s.nspname = :schema "
            "ORDER BY p.prokind = 'a' DESC"
        ),
        {"schema": schema},
    ).all()
    for signature, kind in rows:
        run_ddl(conn, f"DROP {'AGGREGATE' if kind == 'a' else 'FUNCTION'} {signature}")


def ensure_plpython(conn: sa.Connection) -> None:
    try:
        with conn.begin_nested():
            conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS plpython3u")
    except sa.exc.DBAPIError as e:
        raise InstallError(
            f"plpython3u is not available in this database ({str(e.orig).strip()}). Install the "
            "server package (Debian: postgresql-plpython3-15; Greenplum: the plpython3 extension on "
            "every host) and run as a superuser: CREATE EXTENSION plpython3u; then "
            "`gpcnn doctor` checks the rest."
        ) from e


def install(engine: sa.Engine, schema: str = "gpcnn") -> str:
    """Create or upgrade gpcnn's functions in ``schema``, in one transaction; returns the version."""
    quote = engine.dialect.identifier_preparer.quote
    with engine.begin() as conn:
        ensure_plpython(conn)
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")
        _drop_existing(conn, schema)
        for statement in statements(schema, quote)[1:]:
            run_ddl(conn, statement)
    return bundle_id()


def installed_version(engine: sa.Engine, schema: str = "gpcnn") -> str | None:
    with engine.connect() as conn:
        exists = conn.execute(
            sa.text(
                "SELECT 1 FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace "
                "WHERE s.nspname = :schema AND p.proname = 'version'"
            ),
            {"schema": schema},
        ).scalar()
        if not exists:
            return None
        quote = engine.dialect.identifier_preparer.quote
        return conn.exec_driver_sql(f"SELECT {quote(schema)}.version()").scalar()


def ensure_installed(engine: sa.Engine, schema: str = "gpcnn") -> str:
    """Install when absent; refuse to run against another installed version."""
    found = installed_version(engine, schema)
    if found is None:
        return install(engine, schema)
    if found != bundle_id():
        raise InstallError(
            f"schema {schema!r} holds gpcnn {found}, but this client is gpcnn {bundle_id()}. "
            f"Upgrade the database with `gpcnn install --schema {schema}` "
            "(or gpcnn.install(engine, schema))."
        )
    return found
