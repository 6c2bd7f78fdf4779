"""Least privilege and isolation: after a superuser installed gpcnn, a login role granted the role
``install`` creates (``<schema>_user``) loads, fits, evaluates, predicts and resumes, and gets no
more: it cannot replace or drop gpcnn's functions, create schemas, change gpcnn's shape record, or
see and change another member's runs, checkpoints, transfers, models and catalog rows; a role
without it cannot run gpcnn at all. Real roles, created here; nothing mocked."""

from __future__ import annotations

import secrets

import numpy as np
import pytest
import sqlalchemy as sa
from tiny import dense_net

import gpcnn
from gpcnn.data.tables import TableError
from gpcnn.engines import shapes
from gpcnn.engines.install import InstallError, bundle_id, installed_version
from gpcnn.engines.roles import role_name

ALICE, BOB, MALLORY, STRANGER = (
    "gpcnn_test_alice",
    "gpcnn_test_bob",
    "gpcnn_test_mallory",
    "gpcnn_test_stranger",
)
MEMBERS = (ALICE, BOB, MALLORY)
DATA = {name: f"gpcnn_priv_{name.removeprefix('gpcnn_test_')}" for name in MEMBERS}
MISSING_SCHEMA = "gpcnn_priv_nobody_made_this"


@pytest.fixture(scope="module")
def superuser(db):
    with db.connect() as conn:
        if not conn.execute(
            sa.text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        ).scalar():
            pytest.skip("the test database's user is not a superuser: it cannot create roles")
    return db


def login(db, name: str, password: str, **query) -> gpcnn.Database:
    url = db.url.set(username=name, password=password)
    if query:
        url = url.update_query_dict(query)
    return gpcnn.connect(url, schema=db.schema)


@pytest.fixture(scope="module")
def password():
    return secrets.token_hex(16)


@pytest.fixture(scope="module")
def roles(superuser, password):
    """name -> gpcnn handle for three members of the user role (each with a schema an
    administrator made for them) and a stranger; all dropped at the end."""
    names = (*MEMBERS, STRANGER)
    _drop_roles(superuser, names)
    with superuser.begin() as conn:
        for name in names:
            conn.execute(sa.text(f"CREATE ROLE {name} LOGIN PASSWORD :p"), {"p": password})
        for name in MEMBERS:
            conn.exec_driver_sql(f"GRANT {role_name(superuser.schema)} TO {name}")
            conn.exec_driver_sql(f"CREATE SCHEMA {DATA[name]} AUTHORIZATION {name}")
    handles = {name: login(superuser, name, password) for name in names}
    yield handles
    for handle in handles.values():
        handle.close()
    _drop_roles(superuser, names)


def _drop_roles(superuser, names) -> None:
    """The roles, the objects they own and the rows they wrote into gpcnn's tables."""
    with superuser.begin() as conn:
        for table in shapes.OWNED:
            conn.execute(
                sa.text(f"DELETE FROM {superuser.schema}.{table} WHERE created_by = ANY(:names)"),
                {"names": list(names)},
            )
        for name in names:
            if conn.execute(
                sa.text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": name}
            ).scalar():
                conn.exec_driver_sql(f"DROP OWNED BY {name} CASCADE")
                conn.exec_driver_sql(f"DROP ROLE {name}")


def estimator(db, **params) -> gpcnn.GreenplumCNN:
    defaults = dict(iterations=1, seed=0, database=db, threads_per_segment=1, verbose=0)
    return gpcnn.GreenplumCNN(dense_net(), **{**defaults, **params})


def images(n=120, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 255, (n, 8, 8), dtype=np.uint8), rng.integers(0, 3, n)


@pytest.fixture(scope="module")
def alices_work(roles):
    """Alice's table, a finished run, predictions and a stored model."""
    alice = roles[ALICE]
    table = f"{DATA[ALICE]}.train"
    gpcnn.load_images(alice, table, *images(), segments=2, replace=True, progress=False)
    est = estimator(alice).fit(table)
    est.predict(table, output_table=f"{DATA[ALICE]}.predictions", replace=True)
    gpcnn.store_model(alice, "alices_model", dense_net(), replace=True)
    return {"table": table, "run_id": est.run_id_}


def test_a_member_of_the_user_role_loads_fits_evaluates_predicts_and_resumes(roles):
    alice = roles[ALICE]
    x, y = images()
    table = f"{DATA[ALICE]}.resumed"
    gpcnn.load_images(alice, table, x, y, segments=2, progress=False)
    with pytest.raises(TableError, match="exists"):
        gpcnn.load_images(alice, table, x, y, segments=2, progress=False)
    first = estimator(alice).fit(table)
    assert first.evaluate(table)["loss"] > 0
    assert first.predict(table).shape == (120,)
    resumed = estimator(alice, iterations=2).fit(table, resume=first.run_id_)
    assert [r["iteration"] for r in resumed.history_] == [1, 2]
    assert gpcnn.show_run(alice, first.run_id_)["status"] == "finished"
    gpcnn.load_images(alice, table, x[:60], y[:60], segments=2, replace=True, progress=False)
    assert gpcnn.drop_table(alice, table)
    with estimator(alice) as from_arrays:  # staged in the staging schema install made
        assert from_arrays.fit(x, y).predict(x).shape == (120,)


def test_a_member_cannot_create_a_schema_and_is_told_who_can(roles, superuser):
    alice = roles[ALICE]
    with pytest.raises(PermissionError) as refused:
        gpcnn.load_images(alice, f"{MISSING_SCHEMA}.t", *images(), segments=2, progress=False)
    message = str(refused.value)
    assert f"schema {MISSING_SCHEMA!r} does not exist" in message
    assert f"CREATE SCHEMA {MISSING_SCHEMA} AUTHORIZATION {ALICE}" in message
    with superuser.connect() as conn:
        made = conn.execute(
            sa.text("SELECT 1 FROM pg_namespace WHERE nspname = :s"), {"s": MISSING_SCHEMA}
        ).scalar()
        creates = conn.execute(
            sa.text("SELECT has_database_privilege(:r, current_database(), 'CREATE')"),
            {"r": role_name(superuser.schema)},
        ).scalar()
    assert made is None and creates is False


def test_a_member_cannot_replace_or_drop_gpcnns_functions(roles, schema):
    alice = roles[ALICE]
    replace = (
        f"CREATE OR REPLACE FUNCTION {schema}.probe(threads integer) RETURNS text AS "
        "$$ return 'mine' $$ LANGUAGE plpython3u"
    )
    for statement in (
        f"DROP FUNCTION {schema}.probe(integer)",
        f"DROP AGGREGATE {schema}.merge(bytea)",
        replace,
        f"DROP TABLE {schema}.runs",
    ):
        with (
            alice.connect() as conn,
            pytest.raises(sa.exc.ProgrammingError, match=r"permission denied|must be owner"),
        ):
            conn.exec_driver_sql(statement)
    with pytest.raises(InstallError, match=f"needs a superuser.*{ALICE!r} is not one"):
        gpcnn.install(alice)
    assert installed_version(alice) == bundle_id()  # what the superuser installed, unchanged


def test_a_member_cannot_change_the_shape_record(roles, schema):
    for statement in (
        f"UPDATE {schema}.schema_version SET version = 999",
        f"DELETE FROM {schema}.schema_version",
        f"INSERT INTO {schema}.schema_version VALUES (999)",
    ):
        with (
            roles[MALLORY].connect() as conn,
            pytest.raises(sa.exc.ProgrammingError, match="permission denied"),
        ):
            conn.exec_driver_sql(statement)


def test_a_role_without_the_user_role_cannot_run_gpcnn(roles, schema):
    with (
        roles[STRANGER].connect() as conn,
        pytest.raises(sa.exc.ProgrammingError, match="permission denied"),
    ):
        conn.execute(sa.text(f"SELECT {schema}.probe(1)"))


def test_every_installed_function_runs_under_the_pinned_search_path(superuser, schema):
    with superuser.connect() as conn:
        found = conn.execute(
            sa.text(
                "SELECT p.oid::regprocedure::text, p.proconfig FROM pg_proc p "
                "JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = :s AND p.prokind = 'f'"
            ),
            {"s": schema},
        ).all()
    assert len(found) > 10
    unpinned = [f for f, config in found if "search_path=pg_catalog, pg_temp" not in (config or [])]
    assert unpinned == []


def _count(db, table: str, where: str = "true") -> int:
    with db.connect() as conn:
        return conn.execute(
            sa.text(f"SELECT count(*) FROM {db.schema}.{table} WHERE {where}")
        ).scalar()


def test_another_members_rows_are_invisible_and_unchangeable(roles, alices_work, superuser):
    run_id = alices_work["run_id"]
    schema = superuser.schema
    for table in ("runs", "run_iterations", "checkpoints"):
        assert _count(superuser, table, f"run_id = {run_id}") > 0  # the installer sees all
        assert _count(roles[MALLORY], table, f"run_id = {run_id}") == 0
    assert _count(roles[MALLORY], "models", "name = 'alices_model'") == 0
    assert _count(roles[MALLORY], "image_tables", f"table_schema = '{DATA[ALICE]}'") == 0
    assert _count(roles[MALLORY], "prediction_tables", f"table_schema = '{DATA[ALICE]}'") == 0
    assert _count(roles[MALLORY], "run_diagnostics", f"run_id = {run_id}") == 0
    with roles[MALLORY].begin() as conn:
        for statement in (
            f"UPDATE {schema}.runs SET status = 'failed' WHERE run_id = {run_id}",
            f"DELETE FROM {schema}.checkpoints WHERE run_id = {run_id}",
            f"DELETE FROM {schema}.run_iterations WHERE run_id = {run_id}",
            f"UPDATE {schema}.models SET model_json = '{{}}' WHERE name = 'alices_model'",
            f"DELETE FROM {schema}.image_tables WHERE table_schema = '{DATA[ALICE]}'",
            f"DELETE FROM {schema}.transfers",
        ):
            assert conn.exec_driver_sql(statement).rowcount == 0
    with (
        roles[MALLORY].begin() as conn,
        pytest.raises(sa.exc.ProgrammingError, match="row-level security"),
    ):
        conn.exec_driver_sql(
            f"INSERT INTO {schema}.runs (table_name, params, model_json, gpcnn_version, "
            f"created_by) VALUES ('t', '{{}}', '{{}}', 'x', '{ALICE}')"
        )
    alice = roles[ALICE]
    assert gpcnn.show_run(alice, run_id)["status"] == "finished"
    assert gpcnn.load_model(alice, "alices_model") is not None
    with pytest.raises(Exception, match="alices_model"):
        gpcnn.load_model(roles[BOB], "alices_model")


def test_planted_catalog_rows_list_drop_and_block_nothing(roles, alices_work, superuser):
    """Mallory records Alice's plain table, and Alice's image table, as image tables of her own:
    no one lists them through her rows, gpcnn refuses to drop or replace them for her, and Alice
    keeps using both names."""
    alice, mallory = roles[ALICE], roles[MALLORY]
    plain = f"{DATA[ALICE]}.plain"
    with alice.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {plain} AS SELECT 1 AS a")
        conn.exec_driver_sql(f"GRANT SELECT ON {plain} TO PUBLIC")
    table = shapes.tables(superuser.schema).image_tables
    with mallory.begin() as conn:
        for name in (plain, alices_work["table"]):
            schema_name, table_name = name.split(".")
            conn.execute(
                table.insert().values(
                    table_schema=schema_name,
                    table_name=table_name,
                    image_shape=[8, 8, 1],
                    num_classes=3,
                    dist_keys=[0, 1],
                    images_per_segment=[60, 60],
                    buffer_size=60,
                    images=120,
                    gpcnn_version="planted",
                )
            )
    try:
        for who in (mallory, superuser, alice):
            listed = [str(t.table) for t in gpcnn.list_tables(who)]
            assert plain not in listed
            assert listed.count(alices_work["table"]) == (0 if who is mallory else 1)
        for name in (plain, alices_work["table"]):
            with pytest.raises(TableError, match="not a gpcnn image table"):
                gpcnn.drop_table(mallory, name)
        with pytest.raises(TableError, match="not a gpcnn image table"):
            gpcnn.drop_table(alice, plain)
        assert gpcnn.describe_table(alice, alices_work["table"]).images == 120
    finally:
        with mallory.begin() as conn:
            conn.execute(table.delete().where(table.c.gpcnn_version == "planted"))
        with alice.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {plain}")


def test_a_model_stored_as_a_team_role_is_every_members_to_load(roles, superuser, password):
    team = "gpcnn_test_team"
    _drop_roles(superuser, [team])
    with superuser.begin() as conn:
        conn.exec_driver_sql(f"CREATE ROLE {team} NOLOGIN")
        conn.exec_driver_sql(f"GRANT {role_name(superuser.schema)} TO {team}")
        conn.exec_driver_sql(f"GRANT {team} TO {ALICE}, {BOB}")
    as_team = login(superuser, ALICE, password, options=f"-c role={team}")
    try:
        gpcnn.store_model(as_team, "team_model", dense_net(), replace=True)
        loaded = gpcnn.load_model(roles[BOB], "team_model")
        assert loaded.count_params() == dense_net().count_params()
        with pytest.raises(Exception, match="team_model"):
            gpcnn.load_model(roles[MALLORY], "team_model")
        with roles[BOB].begin() as conn:  # shared to read, not to change
            changed = conn.exec_driver_sql(
                f"DELETE FROM {superuser.schema}.models WHERE name = 'team_model'"
            ).rowcount
        assert changed == 0
    finally:
        as_team.close()
        _drop_roles(superuser, [team])


def _session(db):
    """A new server process, outside gpcnn's connections (so ``jit`` is the server's default)."""
    import psycopg2

    url = db.url
    conn = psycopg2.connect(
        host=url.host, port=url.port, user=url.username, password=url.password, dbname=url.database
    )
    conn.autocommit = True
    return conn


def test_gpcnns_functions_refuse_to_start_tensorflow_beside_the_jit(superuser, schema):
    import psycopg2

    jitting = (
        "SET jit = on",
        "SET jit_above_cost = 0",
        "SELECT sum(x) FROM generate_series(1, 1000) x",
    )
    with _session(superuser) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT pg_jit_available()")
        if not cursor.fetchone()[0]:
            pytest.skip("this server offers no JIT: nothing to refuse")
    for before in (("SET jit = on",), (*jitting, "SET jit = off")):
        conn = _session(superuser)
        with conn.cursor() as cursor:
            for statement in before:
                cursor.execute(statement)
            with pytest.raises(psycopg2.Error, match="do not start TensorFlow in a session"):
                cursor.execute(f"SELECT {schema}.probe(1)")
        conn.close()
    conn = _session(superuser)
    with conn.cursor() as cursor:
        cursor.execute("SET jit = off")
        cursor.execute(f"SELECT {schema}.probe(1)")
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
    conn.close()
    with _session(superuser) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT 1")  # the server is still up
