"""The engine layer against the real server: the handle, versioned shapes, run status and resume
matching, and the lifecycle of runs, image tables and the installation."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import sqlalchemy as sa

import gpcnn
from gpcnn.data.tables import TableError, TableName, describe, list_tables, load_images
from gpcnn.engines import migrations, roles, shapes, table_records
from gpcnn.engines.catalog import Catalog
from gpcnn.engines.functions import existing
from gpcnn.engines.install import (
    InstallError,
    ensure_installed,
    install,
    installed_version,
    uninstall,
)
from gpcnn.engines.table_records import TableRecords
from gpcnn.estimator import GreenplumCNN
from gpcnn.fit import runs
from gpcnn.kernel import keras_setup
from gpcnn.result_key import result_key
from gpcnn.tools import cli

keras = keras_setup.keras_module()
DATA = "gpcnn_engine_layer_test"


def tiny_model():
    keras.utils.set_random_seed(3)
    return keras.Sequential(
        [
            keras.Input((6, 6, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )


@pytest.fixture(scope="module")
def table(db):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (40, 6, 6), dtype=np.uint8)
    y = rng.integers(0, 2, 40)
    return load_images(db, f"{DATA}.train", x, y, segments=2, replace=True, progress=False)


def fitted(db, table, **params) -> GreenplumCNN:
    params = {"iterations": 1, "seed": 1, "verbose": 0, "threads_per_segment": 1, **params}
    with GreenplumCNN(tiny_model(), database=db, **params) as est:
        est.fit(str(table.table))
    return est


# -- the handle ---------------------------------------------------------------------------------


def test_connect_gives_one_handle_per_server_schema_and_dispatch_until_closed(db):
    again = gpcnn.connect(db.url, schema=db.schema)
    assert again is db
    other = gpcnn.connect(db.url, schema="gpcnn_other_schema")
    statement = gpcnn.connect(db.url, schema=db.schema, dispatch="statement")
    assert len({id(db), id(other), id(statement)}) == 3
    other.close()
    assert other.closed and gpcnn.connect(db.url, schema="gpcnn_other_schema") is not other
    gpcnn.connect(db.url, schema="gpcnn_other_schema").close()
    with pytest.raises(ValueError, match="dispatch="):
        gpcnn.connect(db.url, dispatch="everywhere")


def test_handle_pickles_without_its_password_and_finds_it_again(db):
    data = pickle.dumps(db)
    if db.url.password:
        assert db.url.password.encode() not in data
    copy = pickle.loads(data)
    assert (copy.url.host, copy.url.port, copy.schema) == (
        db.url.host,
        db.url.port,
        db.schema,
    )
    with copy.connect() as conn:
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1
    assert copy.kind == db.kind
    copy.close()


def test_a_handle_names_a_registered_engine_or_detects_one(db):
    named = gpcnn.connect(db.url, schema=db.schema, engine_name=db.kind)
    assert named is not db and type(named.backend) is type(db.backend)
    copy = pickle.loads(pickle.dumps(named))
    assert copy.engine_name == db.kind and "engine_name=" in repr(copy)
    named.close()
    with pytest.raises(ValueError, match="engine_name='nosuch'"):
        gpcnn.connect(db.url, engine_name="nosuch")


@pytest.mark.slow
def test_an_estimator_with_a_handle_pickles(db, table):
    est = fitted(db, table)
    clone = pickle.loads(pickle.dumps(est))
    assert clone.database.schema == db.schema and clone.history_ == est.history_
    assert clone.score(str(table.table)) == est.score(str(table.table))


# -- shapes ---------------------------------------------------------------------------------------

# gpcnn 0.1's tables, as it created them (no schema_version table, runs without status).
SHAPE_1 = [
    "CREATE TABLE {s}.runs (run_id bigserial PRIMARY KEY, table_name text NOT NULL, "
    "params text NOT NULL, model_json text NOT NULL, gpcnn_version text NOT NULL, "
    "created_at timestamptz NOT NULL DEFAULT now())",
    "CREATE TABLE {s}.run_iterations (run_id bigint NOT NULL, iteration integer NOT NULL, "
    "metrics text NOT NULL, weights bytea NOT NULL, rule_state bytea, optimizer bytea, "
    "created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (run_id, iteration))",
]


@pytest.fixture
def old_schema(db):
    name = "gpcnn_shape_test"
    shape_1 = gpcnn.connect(db.url, schema=name)
    with shape_1.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {name}, {name}_staging CASCADE")
        conn.exec_driver_sql(f"CREATE SCHEMA {name}")
    yield shape_1
    with shape_1.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {name}, {name}_staging CASCADE")
    shape_1.close()


def test_install_migrates_shape_1_in_place(old_schema):
    db = old_schema
    with db.begin() as conn:
        for statement in SHAPE_1:
            conn.exec_driver_sql(statement.format(s=db.schema))
        for run_id, iterations, stored in ((1, 3, 1), (2, 2, 2)):
            params = {"merge": "average", "iterations": iterations, "progress": True}
            conn.execute(
                sa.text(
                    f"INSERT INTO {db.schema}.runs (run_id, table_name, params, model_json, "
                    "gpcnn_version) VALUES (:r, 'x.t', :p, '{}', '0.1.0')"
                ),
                {"r": run_id, "p": json.dumps(params)},
            )
            for i in range(1, stored + 1):
                conn.execute(
                    sa.text(
                        f"INSERT INTO {db.schema}.run_iterations (run_id, iteration, metrics, "
                        "weights) VALUES (:r, :i, '{}', '')"
                    ),
                    {"r": run_id, "i": i},
                )
    with db.connect() as conn:
        assert Catalog(conn, db.backend).shape() == 1
    install(db)
    with db.connect() as conn:
        assert Catalog(conn, db.backend).shape() == migrations.SHAPE_VERSION
        rows = conn.execute(
            sa.text(f"SELECT run_id, status, result_key FROM {db.schema}.runs ORDER BY 1")
        ).all()
    assert [(r.run_id, r.status) for r in rows] == [(1, "running"), (2, "finished")]
    assert rows[0].result_key == result_key({"merge": "average", "iterations": 9})
    assert ensure_installed(db)
    assert [r["run_id"] for r in gpcnn.list_runs(db)] == [1, 2]


def test_install_on_shape_9_gives_every_row_an_owner_and_secures_the_tables(old_schema):
    """Shape 9 (before row owners) as it was: no owner column, no prediction catalog, no row
    security, and the role allowed to create schemas."""
    db = old_schema
    install(db)
    s, role = db.schema, roles.role_name(db.schema)
    with db.begin() as conn:
        database = conn.execute(sa.text("SELECT current_database()")).scalar()
        conn.exec_driver_sql(f"DROP TABLE {s}.prediction_tables")
        conn.exec_driver_sql(f"DROP VIEW {s}.run_diagnostics, {s}.run_segment_diagnostics")
        for table in shapes.OWNED[:-1]:
            conn.exec_driver_sql(f"ALTER TABLE {s}.{table} DISABLE ROW LEVEL SECURITY")
            conn.exec_driver_sql(f"DROP POLICY IF EXISTS gpcnn_own_rows ON {s}.{table}")
            conn.exec_driver_sql(f"DROP POLICY IF EXISTS gpcnn_members_models ON {s}.{table}")
            conn.exec_driver_sql(f"ALTER TABLE {s}.{table} DROP COLUMN created_by")
        for table, key in (
            ("image_tables", "table_schema, table_name"),
            ("models", "name"),
            ("model_weights", "name, chunk"),
        ):
            conn.exec_driver_sql(f"ALTER TABLE {s}.{table} ADD PRIMARY KEY ({key})")
        conn.exec_driver_sql(f"GRANT CREATE ON DATABASE {database} TO {role}")
        conn.exec_driver_sql(f"GRANT INSERT, UPDATE, DELETE ON {s}.schema_version TO {role}")
        conn.exec_driver_sql(f"UPDATE {s}.schema_version SET version = 9")
        conn.exec_driver_sql(
            f"INSERT INTO {s}.runs (table_name, params, model_json, gpcnn_version) "
            "VALUES ('x.t', '{}', '{}', '0.2.0')"
        )
    install(db)
    with db.connect() as conn:
        assert Catalog(conn, db.backend).shape() == migrations.SHAPE_VERSION
        installer = conn.execute(sa.text("SELECT CAST(current_user AS text)")).scalar()
        assert conn.execute(sa.text(f"SELECT created_by FROM {s}.runs")).scalars().all() == [
            installer
        ]
        secured = conn.execute(
            sa.text(
                "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = "
                "c.relnamespace WHERE n.nspname = :s AND c.relrowsecurity ORDER BY 1"
            ),
            {"s": s},
        ).scalars()
        assert list(secured) == sorted(shapes.OWNED)
        policies = conn.execute(
            sa.text("SELECT count(*) FROM pg_policies WHERE schemaname = :s"), {"s": s}
        ).scalar()
        assert policies == len(roles.policies(db.backend, role))
        creates, writes_version = conn.execute(
            sa.text(
                "SELECT has_database_privilege(:r, current_database(), 'CREATE'), "
                "has_table_privilege(:r, :v, 'UPDATE')"
            ),
            {"r": role, "v": f"{s}.schema_version"},
        ).one()
    assert not creates and not writes_version
    install(db)  # again: nothing left to change, and no error


def test_a_newer_shape_is_refused_with_what_to_do(old_schema):
    db = old_schema
    install(db)
    with db.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {db.schema}.schema_version SET version = 99")
    with pytest.raises(migrations.ShapeError, match="shape 99, newer than this client"):
        install(db)
    with pytest.raises(InstallError, match="shape 99"):
        ensure_installed(db)


# -- run status and resume --------------------------------------------------------------------------


def test_run_status_follows_the_fit(db, table):
    est = fitted(db, table, iterations=2)
    assert runs.load_run(db, est.run_id_).status == "finished"
    diverged = GreenplumCNN(tiny_model(), database=db, iterations=3, learning_rate=1e38, verbose=0)
    with pytest.raises(gpcnn.TrainingError, match="diverged"), diverged:
        diverged.fit(str(table.table))
    (row,) = gpcnn.list_runs(db, [diverged.run_id_])
    assert row["status"] == "failed" and "diverged" in row["error"]


def test_resume_matches_result_parameters_and_never_a_run_stopped_on_purpose(db, table):
    est = fitted(db, table, iterations=1, merge="bmuf")
    name = str(table.table)
    wanted = {**est.stored_params(), "iterations": 3}
    assert runs.find_unfinished(db, name, wanted) is None  # finished: nothing to continue
    for status, expected in (
        ("running", est.run_id_),
        ("failed", est.run_id_),
        ("stopped_early", None),
    ):
        runs.set_status(db, est.run_id_, status)
        # progress, database and iterations do not change the result: still the same run
        again = {**wanted, "progress": True, "database": "elsewhere"}
        assert runs.find_unfinished(db, name, again) == expected
    assert runs.find_unfinished(db, name, {**wanted, "learning_rate": 0.5}) is None


# -- lifecycle --------------------------------------------------------------------------------------


def test_runs_list_show_delete(db, table, capsys):
    est = fitted(db, table, iterations=2)
    (row,) = gpcnn.list_runs(db, [est.run_id_])
    assert (row["iterations"], row["status"], row["table"]) == (2, "finished", str(table.table))
    assert row["stored_bytes"] >= 4 * (36 * 2 + 2)  # at least the last model: 74 float32
    shown = gpcnn.show_run(db, est.run_id_)
    assert [h["iteration"] for h in shown["history"]] == [1, 2]
    assert shown["params"]["iterations"] == 2
    url = db.url.render_as_string(hide_password=False)
    base = ["--database", url, "--schema", db.schema]
    assert cli.main(["runs", "list", *base]) == 0
    assert f"{est.run_id_:>5}  finished" in capsys.readouterr().out
    assert cli.main(["runs", "delete", str(est.run_id_), *base]) == 0
    assert "deleted 1 run(s)" in capsys.readouterr().out
    assert gpcnn.list_runs(db, [est.run_id_]) == []
    with db.connect() as conn:
        left = conn.execute(
            sa.text(f"SELECT count(*) FROM {db.schema}.run_iterations WHERE run_id = :r"),
            {"r": est.run_id_},
        ).scalar()
    assert left == 0
    with pytest.raises(ValueError, match="no run"):
        gpcnn.show_run(db, est.run_id_)


def test_tables_drop_and_the_catalog_repaired_after_a_drop_by_hand(db):
    x = np.zeros((8, 6, 6), np.uint8)
    y = np.arange(8) % 2
    kept = load_images(db, f"{DATA}.kept", x, y, segments=2, replace=True, progress=False)
    by_hand = load_images(db, f"{DATA}.by_hand", x, y, segments=2, replace=True, progress=False)
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {DATA}.by_hand")
    with pytest.raises(TableError, match="dropped by hand"):
        describe(db, str(by_hand.table))
    names = {str(t.table) for t in list_tables(db)}
    assert str(kept.table) in names and str(by_hand.table) not in names
    with db.connect() as conn:  # the stale entry is gone from the catalog
        assert TableRecords(conn, db.backend).image_table(DATA, "by_hand") is None
    assert gpcnn.drop_table(db, str(kept.table))
    with db.connect() as conn:
        assert table_records.relation_owner(conn, TableName(DATA, "kept")) is None
        if db.backend.partitioned:
            assert table_records.relation_owner(conn, TableName(DATA, "kept__seg0")) is None
    assert gpcnn.drop_table(db, str(kept.table), missing_ok=True) is False
    with pytest.raises(TableError, match="no image table"):
        gpcnn.drop_table(db, str(kept.table))
    with db.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {DATA}.foreign_table (a int)")
    with pytest.raises(TableError, match="not a gpcnn image table"):
        gpcnn.drop_table(db, f"{DATA}.foreign_table")
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {DATA}.foreign_table")


def test_installing_the_same_version_again_keeps_the_functions_and_repairs_a_missing_one(db):
    """Dropping and creating the functions again would fail every statement other sessions run
    on them ("cache lookup failed for function": a second study process's install broke a
    running fit); an install whose functions are not all there creates them again."""
    again = gpcnn.connect(db.url, schema="gpcnn_reinstall_test")

    def functions() -> dict[str, int]:
        with again.connect() as conn:
            query = (
                "SELECT p.oid::regprocedure::text, p.oid FROM pg_proc p JOIN pg_namespace s "
                "ON s.oid = p.pronamespace WHERE s.nspname = 'gpcnn_reinstall_test'"
            )
            return dict(conn.exec_driver_sql(query).all())

    install(again)
    first = functions()
    install(again)
    assert functions() == first
    with again.begin() as conn:
        kinds = dict(existing(conn, again.schema))
        dropped = next(sig for sig, kind in kinds.items() if kind == "f" and "version" not in sig)
        conn.exec_driver_sql(f"DROP FUNCTION {dropped} CASCADE")  # aggregates on it go too
    assert len(functions()) < len(first)
    install(again)
    assert functions().keys() == first.keys()
    uninstall(again)
    again.close()


def test_uninstall_removes_functions_and_tables_but_not_image_tables(db):
    uninstalled = gpcnn.connect(db.url, schema="gpcnn_uninstall_test")
    install(uninstalled)
    info = load_images(
        uninstalled,
        f"{DATA}.uninstall",
        np.zeros((4, 6, 6), np.uint8),
        [0, 1, 0, 1],
        segments=2,
        replace=True,
        progress=False,
    )
    uninstall(uninstalled, keep_data=True)
    assert installed_version(uninstalled) is None
    assert describe(uninstalled, str(info.table)).images == 4  # the catalog survived
    uninstall(uninstalled)
    with uninstalled.begin() as conn:
        assert (
            conn.execute(
                sa.text("SELECT count(*) FROM pg_namespace WHERE nspname = 'gpcnn_uninstall_test'")
            ).scalar()
            == 0
        )
        assert (
            table_records.relation_owner(conn, TableName(DATA, "uninstall")) is not None
        )  # the user's data stays
        # no catalog describes it any more: it is the user's own table, for them to drop
        conn.exec_driver_sql(f"DROP TABLE {DATA}.uninstall")
    uninstalled.close()
