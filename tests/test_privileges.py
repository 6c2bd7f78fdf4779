"""Least privilege (issue 9): after a superuser installed gpcnn, a login role granted the role
``install`` creates (``<schema>_user``) loads, fits, evaluates, predicts and resumes, and cannot
replace or drop gpcnn's functions; a role without it cannot run them. Real roles, created here."""

from __future__ import annotations

import secrets

import numpy as np
import pytest
import sqlalchemy as sa
from tiny import dense_net

import gpcnn
from gpcnn.data.tables import TableError
from gpcnn.engines.install import InstallError, bundle_id, installed_version
from gpcnn.engines.roles import role_name

DATA = "gpcnn_privileges_data"
USER, STRANGER = "gpcnn_test_alice", "gpcnn_test_mallory"


@pytest.fixture(scope="module")
def superuser(db):
    with db.connect() as conn:
        if not conn.execute(
            sa.text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        ).scalar():
            pytest.skip("the test database's user is not a superuser: it cannot create roles")
    return db


def _login(db, name: str, password: str) -> gpcnn.Database:
    url = db.url.set(username=name, password=password)
    return gpcnn.connect(url, schema=db.schema)


@pytest.fixture(scope="module")
def roles(superuser):
    """(alice: granted the user role, mallory: not), as gpcnn handles; dropped at the end."""
    password = secrets.token_hex(16)
    with superuser.begin() as conn:
        for name in (USER, STRANGER):
            conn.exec_driver_sql(f"DROP ROLE IF EXISTS {name}")
            conn.execute(sa.text(f"CREATE ROLE {name} LOGIN PASSWORD :p"), {"p": password})
        conn.exec_driver_sql(f"GRANT {role_name(superuser.schema)} TO {USER}")
    alice, mallory = (_login(superuser, name, password) for name in (USER, STRANGER))
    yield alice, mallory
    for handle in (alice, mallory):
        handle.close()
    gpcnn.drop_table(superuser, f"{DATA}.train", missing_ok=True)
    with superuser.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {DATA} CASCADE")
        for name in (USER, STRANGER):
            conn.exec_driver_sql(f"DROP OWNED BY {name}")
            conn.exec_driver_sql(f"DROP ROLE {name}")


def estimator(db, **params) -> gpcnn.GreenplumCNN:
    defaults = dict(iterations=1, seed=0, database=db, threads_per_segment=1, verbose=0)
    return gpcnn.GreenplumCNN(dense_net(), **{**defaults, **params})


def test_a_member_of_the_user_role_loads_fits_evaluates_predicts_and_resumes(roles):
    alice, _ = roles
    rng = np.random.default_rng(1)
    images = rng.integers(0, 255, (120, 8, 8), dtype=np.uint8)
    labels = rng.integers(0, 3, 120)
    table = f"{DATA}.train"
    gpcnn.load_images(alice, table, images, labels, segments=2, progress=False)  # a new schema
    with pytest.raises(TableError, match="exists"):
        gpcnn.load_images(alice, table, images, labels, segments=2, progress=False)
    first = estimator(alice).fit(table)
    assert first.evaluate(table)["loss"] > 0
    assert first.predict(table).shape == (120,)
    resumed = estimator(alice, iterations=2).fit(table, resume=first.run_id_)
    assert [r["iteration"] for r in resumed.history_] == [1, 2]
    assert gpcnn.show_run(alice, first.run_id_)["status"] == "finished"
    gpcnn.load_images(
        alice, table, images[:60], labels[:60], segments=2, replace=True, progress=False
    )


def test_a_member_cannot_replace_or_drop_gpcnns_functions(roles, schema):
    alice, _ = roles
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
    with pytest.raises(InstallError, match=f"needs a superuser.*{USER!r} is not one"):
        gpcnn.install(alice)
    assert installed_version(alice) == bundle_id()  # what the superuser installed, unchanged


def test_a_role_without_the_user_role_cannot_run_gpcnn(roles, schema):
    _, mallory = roles
    with (
        mallory.connect() as conn,
        pytest.raises(sa.exc.ProgrammingError, match="permission denied"),
    ):
        conn.execute(sa.text(f"SELECT {schema}.probe(1)"))
