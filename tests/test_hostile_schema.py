"""No object of another role's stands in for a built-in (the attack class of CVE-2018-1058).

Mallory, a member of the user role, owns a schema named after her victim (first in the victim's
default search path) and may create in ``public``. There she creates, for every function and
operator that gpcnn's statements use — collected from the statements a first, unattacked run of
the same work sends, not from a list kept by hand — same-named overloads with the built-ins'
argument types and with every common type in each position (the exact match that beats a
built-in needing a cast). Each overload records its call. The victim, a member and then a
superuser without a schema of its own name, runs the whole workflow: it succeeds and none of
Mallory's objects runs. A check first shows that the same overloads do run for a connection that
does not pin its search path, so the test can fail."""

from __future__ import annotations

import re
import secrets

import numpy as np
import psycopg2.extensions
import pytest
import sqlalchemy as sa
from tiny import dense_net, image_rows, packed

import gpcnn
from gpcnn.engines import backend, database, sessions, shapes
from gpcnn.engines.roles import role_name

VICTIM, ROOT, MALLORY = "gpcnn_test_victim", "gpcnn_test_root", "gpcnn_test_planter"
LOG = "gpcnn_hostile_log"
COMMON_TYPES = (
    "int2",
    "int4",
    "int8",
    "numeric",
    "float8",
    "text",
    "varchar",
    "name",
    "bool",
    "bytea",
)
CALL = re.compile(r"(?<![\w.\"$])([A-Za-z_][A-Za-z0-9_]*)\s*\(")
OPERATOR = re.compile(r"[-+*/<>=~!@#^&|?]+")

seen: list[str] = []


class RecordingCursor(psycopg2.extensions.cursor):
    def execute(self, query, vars=None):
        seen.append(query if isinstance(query, str) else query.decode())
        return super().execute(query, vars)

    def copy_expert(self, sql, file, size=8192):
        seen.append(sql)
        return super().copy_expert(sql, file, size)


class RecordingConnection(psycopg2.extensions.connection):
    def cursor(self, *args, **kwargs):
        kwargs.setdefault("cursor_factory", RecordingCursor)
        return super().cursor(*args, **kwargs)


@pytest.fixture(scope="module")
def superuser(native_db):
    with native_db.connect() as conn:
        if not conn.execute(
            sa.text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        ).scalar():
            pytest.skip("the test database's user is not a superuser: it cannot create roles")
    return native_db


def _drop(superuser) -> None:
    drop_planted(superuser)
    with superuser.begin() as conn:
        for table in shapes.OWNED:
            conn.execute(
                sa.text(f"DELETE FROM {superuser.schema}.{table} WHERE created_by = ANY(:n)"),
                {"n": [VICTIM, ROOT, MALLORY]},
            )
        for name in (VICTIM, ROOT, MALLORY):
            if conn.execute(
                sa.text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": name}
            ).scalar():
                conn.exec_driver_sql(f"DROP OWNED BY {name} CASCADE")
                conn.exec_driver_sql(f"DROP ROLE {name}")


@pytest.fixture(scope="module")
def cast(superuser):
    """name -> (handle, its data schema, password) for the member victim and the superuser
    victim; Mallory's handle under 'mallory'. Roles, schemas and objects dropped at the end."""
    password = secrets.token_hex(16)
    _drop(superuser)
    with superuser.begin() as conn:
        for name in (VICTIM, ROOT, MALLORY):
            conn.execute(sa.text(f"CREATE ROLE {name} LOGIN PASSWORD :p"), {"p": password})
        conn.exec_driver_sql(f"ALTER ROLE {ROOT} SUPERUSER")
        for name in (VICTIM, MALLORY):
            conn.exec_driver_sql(f"GRANT {role_name(superuser.schema)} TO {name}")
        for name in (VICTIM, ROOT):
            conn.exec_driver_sql(f"CREATE SCHEMA {name}_data AUTHORIZATION {name}")
        # what an administrator might have allowed, or an older server's default
        conn.exec_driver_sql(f"CREATE SCHEMA {VICTIM} AUTHORIZATION {MALLORY}")
        conn.exec_driver_sql(f"GRANT CREATE ON SCHEMA public TO {MALLORY}")
        conn.exec_driver_sql(f"CREATE SCHEMA {LOG} AUTHORIZATION {MALLORY}")
    handles = {
        name: gpcnn.connect(
            superuser.url.set(username=name, password=password), schema=superuser.schema
        )
        for name in (VICTIM, ROOT, MALLORY)
    }
    yield handles
    for handle in handles.values():
        handle.close()
    with superuser.begin() as conn:
        conn.exec_driver_sql(f"REVOKE CREATE ON SCHEMA public FROM {MALLORY}")
    _drop(superuser)


def workflow(db: gpcnn.Database, data: str) -> None:
    """What a user does with gpcnn, end to end, in both dispatch modes."""
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 255, (80, 8, 8), dtype=np.uint8), rng.integers(0, 3, 80)
    table = f"{data}.train"
    gpcnn.load_images(db, table, x, y, segments=2, replace=True, progress=False)
    image_rows(db, f"{data}.rows", x[:40], y[:40])
    packed(db, f"{data}.rows", f"{data}.packed")
    gpcnn.add_shared_sample(db, table, f"{data}.shared", 0.1, replace=True)
    for dispatch in (None, "statement"):
        handle = gpcnn.connect(db.url, schema=db.schema, dispatch=dispatch)
        est = gpcnn.GreenplumCNN(
            dense_net(),
            iterations=2,
            seed=0,
            database=handle,
            threads_per_segment=1,
            verbose=0,
            validation_table=f"{data}.packed",
        )
        est.fit(table)
        est.evaluate(table)
        est.predict(table, output_table=f"{data}.predictions", replace=True)
        gpcnn.GreenplumCNN(
            dense_net(), iterations=3, seed=0, database=handle, threads_per_segment=1, verbose=0
        ).fit(table, resume=est.run_id_)
    gpcnn.store_model(db, "hostile_test_model", dense_net(), replace=True)
    gpcnn.load_model(db, "hostile_test_model")
    gpcnn.list_runs(db)
    gpcnn.show_run(db, est.run_id_)
    gpcnn.list_tables(db)
    gpcnn.describe_table(db, table)
    gpcnn.drop_table(db, f"{data}.shared")


def recorded(monkeypatch) -> None:
    def recording(url, pinned=True):
        return {**original(url, pinned), "connection_factory": RecordingConnection}

    original = sessions.connect_arguments
    for module in (sessions, database, backend):
        monkeypatch.setattr(module, "connect_arguments", recording)


def used_names(conn) -> tuple[list[str], list[str]]:
    """The built-in functions and operators the recorded statements name."""
    text = "\n".join(seen)
    text = re.sub(r"'(?:[^']|'')*'", "''", text)  # no literal's content is a name
    calls = sorted({m.lower() for m in CALL.findall(text)})
    operators = sorted(set(OPERATOR.findall(text)))
    functions = (
        conn.execute(
            sa.text(
                "SELECT DISTINCT proname::text FROM pg_proc WHERE pronamespace = "
                "'pg_catalog'::regnamespace AND proname = ANY(:n) ORDER BY 1"
            ),
            {"n": calls},
        )
        .scalars()
        .all()
    )
    operators = (
        conn.execute(
            sa.text(
                "SELECT DISTINCT oprname::text FROM pg_operator WHERE oprnamespace = "
                "'pg_catalog'::regnamespace AND oprname = ANY(:n) ORDER BY 1"
            ),
            {"n": operators},
        )
        .scalars()
        .all()
    )
    return list(functions), list(operators)


def plant(mallory: gpcnn.Database, schemas, functions, operators) -> int:
    """Mallory's overloads in each schema, each in a transaction of its own (thousands in one
    would fill the server's lock table); returns how many she made. Overloads that cannot exist
    (a pseudo-type PL/pgSQL refuses, a duplicate) are skipped; any other error fails the test."""
    raw = sa.create_engine(mallory.url, poolclass=sa.pool.NullPool)
    with raw.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE IF NOT EXISTS {LOG}.calls (what text)")
        conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA {LOG} TO PUBLIC")
        conn.exec_driver_sql(f"GRANT INSERT ON {LOG}.calls TO PUBLIC")
        types = {"functions": functions, "operators": operators, "types": list(COMMON_TYPES)}
        overloads = conn.execute(sa.text(FUNCTION_VARIANTS), types).all()
        operator_pairs = conn.execute(sa.text(OPERATOR_VARIANTS), types).all()
    raw.dispose()
    statements = [
        ddl
        for schema in schemas
        for ddl in [
            *(_function_ddl(schema, *row) for row in overloads),
            *(_operator_ddl(schema, i, *row) for i, row in enumerate(operator_pairs)),
        ]
    ]
    made = 0
    with _autocommit(mallory) as cursor:
        for ddl in statements:
            try:
                for statement in ddl:
                    cursor.execute(statement)
                made += 1
            except (
                psycopg2.errors.InvalidFunctionDefinition,
                psycopg2.errors.DuplicateFunction,
                psycopg2.errors.DuplicateObject,
                psycopg2.errors.DatatypeMismatch,
                psycopg2.errors.FeatureNotSupported,
                psycopg2.errors.InvalidObjectDefinition,
            ):
                pass
    return made


def _autocommit(db: gpcnn.Database):
    url = db.url
    conn = psycopg2.connect(
        host=url.host, port=url.port, user=url.username, password=url.password, dbname=url.database
    )
    conn.autocommit = True
    return _Closing(conn)


class _Closing:
    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        return self.conn.cursor()

    def __exit__(self, *exc):
        self.conn.close()


PSEUDO_RETURNS = {"internal", "trigger", "event_trigger", "language_handler", "cstring", "record"}


def _returned(ret: str, args: str) -> str:
    """A return type PL/pgSQL accepts for these arguments."""
    if ret in PSEUDO_RETURNS or ("any" in ret and "any" not in args):
        return "text"
    return ret


def _body(what: str, tail: str) -> str:
    return f"$h$ BEGIN INSERT INTO {LOG}.calls VALUES ('{what}'); {tail} END $h$"


def _function_ddl(schema, name, args, ret, setof) -> list[str]:
    ret = _returned(ret, args)
    tail = "RETURN;" if setof or ret == "void" else "RETURN NULL;"
    returns = f"SETOF {ret}" if setof else ret
    return [
        f'CREATE FUNCTION "{schema}"."{name}"({args}) RETURNS {returns} LANGUAGE plpgsql '
        f"AS {_body(name, tail)}"
    ]


def _operator_ddl(schema, i, name, left, right, ret) -> list[str]:
    function = f'"{schema}".gpcnn_op_{i}'
    ret = _returned(ret, left + right)
    return [
        f"CREATE FUNCTION {function}({left}, {right}) RETURNS {ret} LANGUAGE plpgsql "
        f"AS {_body(name, 'RETURN NULL;')}",
        f'CREATE OPERATOR "{schema}".{name} (LEFTARG = {left}, RIGHTARG = {right}, '
        f"FUNCTION = {function})",
    ]


def drop_planted(superuser) -> None:
    """Every object Mallory made, one statement each (one DROP OWNED would lock them all)."""
    with superuser.connect() as conn:
        owned = (
            conn.execute(
                sa.text(
                    "SELECT 'OPERATOR ' || o.oid::regoperator::text FROM pg_operator o JOIN pg_roles r "
                    "ON r.oid = o.oprowner WHERE r.rolname = :m UNION ALL "
                    "SELECT 'FUNCTION ' || p.oid::regprocedure::text FROM pg_proc p JOIN pg_roles r "
                    "ON r.oid = p.proowner WHERE r.rolname = :m"
                ),
                {"m": MALLORY},
            )
            .scalars()
            .all()
        )
    with _autocommit(superuser) as cursor:
        for what in sorted(owned, key=lambda w: not w.startswith("OPERATOR")):
            cursor.execute(f"DROP {what} CASCADE")


# Each built-in signature of the names (at most 3 arguments), then each with one argument replaced
# by each common type; for operators, every pair of common types.
FUNCTION_VARIANTS = """
WITH sigs AS (
  SELECT p.proname::text AS name, p.proargtypes::oid[] AS args, p.prorettype AS ret,
         p.proretset AS setof
  FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace
   AND p.proname = ANY(CAST(:functions AS text[])) AND p.pronargs <= 3
), common AS (SELECT CAST(t AS regtype)::oid AS t FROM unnest(CAST(:types AS text[])) t),
variants AS (
  SELECT name, args, ret, setof FROM sigs
  UNION
  SELECT s.name, s.args[1:i-1] || c.t || s.args[i+1:array_length(s.args, 1)], s.ret, s.setof
  FROM sigs s CROSS JOIN generate_subscripts(s.args, 1) i CROSS JOIN common c
)
SELECT name, array_to_string(ARRAY(SELECT format_type(a, NULL) FROM unnest(args) a), ', '),
       format_type(ret, NULL), setof
FROM variants ORDER BY 1, 2
"""
OPERATOR_VARIANTS = """
WITH common AS (SELECT format_type(CAST(t AS regtype), NULL) AS t
                FROM unnest(CAST(:types AS text[])) t)
SELECT DISTINCT o.oprname::text, l.t, r.t, 'bool'
FROM pg_operator o CROSS JOIN common l CROSS JOIN common r
WHERE o.oprnamespace = 'pg_catalog'::regnamespace AND o.oprname = ANY(CAST(:operators AS text[]))
  AND o.oprleft <> 0 AND o.oprright <> 0
ORDER BY 1, 2, 3
"""


def calls(superuser) -> list[str]:
    with superuser.begin() as conn:
        found = conn.exec_driver_sql(f"SELECT what FROM {LOG}.calls").scalars().all()
        conn.exec_driver_sql(f"TRUNCATE {LOG}.calls")
    return list(found)


@pytest.fixture(scope="module")
def planted(cast, superuser):
    """Mallory's overloads of every built-in that gpcnn's statements use, collected from a first
    run of the workflow by the superuser victim before any overload exists."""
    monkeypatch = pytest.MonkeyPatch()
    recorded(monkeypatch)
    try:
        seen.clear()
        workflow(gpcnn.connect(cast[ROOT].url, schema=superuser.schema), f"{ROOT}_data")
    finally:
        monkeypatch.undo()
    with superuser.connect() as conn:
        functions, operators = used_names(conn)
    assert {"pg_advisory_xact_lock", "hashtext", "array_position"} <= set(functions)
    assert "=" in operators
    made = plant(cast[MALLORY], (VICTIM, "public"), functions, operators)
    return {"functions": functions, "operators": operators, "made": made}


def test_the_overloads_run_for_a_connection_that_does_not_pin_its_path(cast, planted, superuser):
    assert planted["made"] > 1000
    plain = sa.create_engine(cast[VICTIM].url, poolclass=sa.pool.NullPool)
    with plain.begin() as conn:
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtext('x'))")
    plain.dispose()
    assert "pg_advisory_xact_lock" in calls(superuser)


@pytest.mark.slow
@pytest.mark.parametrize("victim", [VICTIM, ROOT])
def test_no_overload_of_a_built_in_runs_in_gpcnns_statements(cast, planted, superuser, victim):
    calls(superuser)
    workflow(cast[victim], f"{victim}_data")
    assert calls(superuser) == [], (
        f"the statements name {len(planted['functions'])} built-in functions and "
        f"{len(planted['operators'])} operators: {planted['functions']} {planted['operators']}"
    )
