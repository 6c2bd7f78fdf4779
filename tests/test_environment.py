"""connect() and check_environment() against the real server."""

from __future__ import annotations

import keras
import pytest
import sqlalchemy as sa
import tensorflow as tf

import gpcnn
from gpcnn.tools import embedded
from gpcnn.tools.environment import ServerPythonError


def test_connect_prefers_explicit_url_then_env_then_embedded(monkeypatch):
    monkeypatch.setenv("GPCNN_DATABASE_URL", "postgresql://someone@127.0.0.1:1/elsewhere")
    explicit = gpcnn.connect("postgresql://me@127.0.0.1:2/mine")
    assert (explicit.url.port, explicit.url.database) == (2, "mine")
    assert explicit.url.drivername == "postgresql+psycopg2"
    from_env = gpcnn.connect()
    assert (from_env.url.port, from_env.url.database) == (1, "elsewhere")
    monkeypatch.delenv("GPCNN_DATABASE_URL")
    default = gpcnn.connect()
    assert default.url.port == embedded.cluster().config()["port"]
    with default.connect() as conn:
        assert conn.execute(sa.text("SELECT current_database()")).scalar() == embedded.DATABASE


def test_check_environment_reports_tensorflow_from_inside_the_server(engine, schema):
    report = gpcnn.check_environment(engine)
    assert report.engine_kind in ("postgresql", "greenplum")
    assert report.segments >= 1
    assert report.probes
    for probe in report.probes:
        assert probe["tensorflow"] == tf.__version__
        assert probe["keras"] == keras.__version__
        assert probe["python"].startswith("3.")
    assert "TensorFlow" in str(report)


def test_missing_tensorflow_in_the_server_names_the_fix(tmp_path, monkeypatch):
    import os
    import shutil
    import tempfile
    from pathlib import Path

    home = Path(tempfile.mkdtemp(prefix="gpcnn-notf-", dir="/var/tmp"))
    os.chmod(home, 0o755)
    empty = home / "empty-site-packages"
    empty.mkdir()
    os.chmod(empty, 0o755)
    monkeypatch.setattr(embedded, "server_site_packages", lambda: empty)
    c = embedded.Cluster(home=home / "cluster", user=embedded.cluster().user)
    try:
        embedded.start(c)
        with (
            gpcnn.connect(c.url()) as db,
            pytest.raises(ServerPythonError, match="TensorFlow cannot be imported"),
        ):
            gpcnn.check_environment(db)
    finally:
        embedded.stop(c)
        shutil.rmtree(home, ignore_errors=True)


def test_another_installed_version_is_named_with_the_fix(engine):
    from gpcnn.engines.install import InstallError, ensure_installed, install

    schema = "gpcnn_version_test"
    db = gpcnn.connect(engine.url, schema=schema)
    install(db)
    assert ensure_installed(db)  # same version: accepted
    with db.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE OR REPLACE FUNCTION {schema}.version() RETURNS text AS "
                "$$ SELECT '0.0.1+old'::text $$ LANGUAGE sql"
            )
        )
    with pytest.raises(InstallError, match=r"holds gpcnn 0\.0\.1\+old.*gpcnn install"):
        ensure_installed(db)
    install(db)  # upgrading over it works, in place
    assert ensure_installed(db)
    with db.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    db.close()
