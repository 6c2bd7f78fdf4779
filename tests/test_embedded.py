"""The embedded cluster on its own: a private cluster per test module, in a temporary home."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
import sqlalchemy as sa

from gpcnn.tools import embedded

pytestmark = [
    pytest.mark.db,
    pytest.mark.skipif(
        not Path(f"/usr/lib/postgresql/{embedded.PG_MAJOR}/bin/pg_ctl").exists(),
        reason="PostgreSQL server programs not installed",
    ),
]


@pytest.fixture(scope="module")
def cluster():
    # Not under /tmp/pytest-of-root: that is 0700 and the server's OS user could not enter it.
    home = Path(tempfile.mkdtemp(prefix="gpcnn-test-", dir="/var/tmp"))
    os.chmod(home, 0o755)
    c = embedded.Cluster(home=home / "cluster", user=embedded.cluster().user)
    yield c
    embedded.stop(c)
    shutil.rmtree(home, ignore_errors=True)


def _select_one(c: embedded.Cluster) -> int:
    engine = sa.create_engine(c.url(), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT 1")).scalar()
    finally:
        engine.dispose()


def test_start_stop_restart(cluster):
    embedded.start(cluster)
    assert embedded.is_running(cluster)
    assert _select_one(cluster) == 1
    embedded.start(cluster)  # idempotent
    embedded.stop(cluster)
    assert not embedded.is_running(cluster)
    embedded.stop(cluster)  # idempotent
    embedded.start(cluster)
    assert _select_one(cluster) == 1
    assert embedded.status(cluster)["running"] is True


def test_server_environment_has_plpython_and_fixed_tf_settings(cluster):
    embedded.start(cluster)
    engine = sa.create_engine(cluster.url(), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE OR REPLACE FUNCTION pg_temp.env(k text) RETURNS text AS "
                "$$ import os; return os.environ.get(k) $$ LANGUAGE plpython3u"
            )
        )
        onednn = conn.execute(sa.text("SELECT pg_temp.env('TF_ENABLE_ONEDNN_OPTS')")).scalar()
        home = conn.execute(sa.text("SELECT pg_temp.env('HOME')")).scalar()
    engine.dispose()
    assert onednn == "0"
    assert home and Path(home).is_dir()


def test_stale_pid_file_is_recovered(cluster):
    embedded.stop(cluster)
    pid_file = cluster.data_dir / "postmaster.pid"
    pid_file.write_text("999999999\n")  # a server that died without cleaning up
    embedded.start(cluster)
    assert _select_one(cluster) == 1


def test_port_in_use_moves_to_a_free_port(cluster):
    embedded.stop(cluster)
    port = cluster.config()["port"]
    with socket.socket() as squatter:
        squatter.setsockopt(
            socket.SOL_SOCKET, socket.SO_REUSEADDR, 1
        )  # the port may be in TIME_WAIT
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        embedded.start(cluster)
        assert cluster.config()["port"] != port
        assert _select_one(cluster) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only: the server runs as another user")
def test_a_home_the_server_user_cannot_reach_is_a_clear_error_before_initdb(tmp_path):
    """pytest's tmp_path lies under a 0700 folder of root's, as a ``mktemp -d`` folder does."""
    c = embedded.Cluster(home=tmp_path / "cluster", user=embedded.cluster().user)
    with pytest.raises(embedded.EmbeddedError) as raised:
        embedded.init(c)
    message = str(raised.value)
    assert f"'{c.user}' cannot read the cluster's folder {c.home}" in message
    assert f"({tmp_path} is not readable by others). Set GPCNN_HOME" in message
    assert not c.data_dir.exists()


def test_data_dir_of_another_version_is_a_clear_error(tmp_path):
    c = embedded.Cluster(home=tmp_path, user=embedded.cluster().user)
    c.data_dir.mkdir(parents=True)
    (c.data_dir / "PG_VERSION").write_text("14\n")
    (c.config_file).write_text(json.dumps({"password": "x", "port": 1}))
    with pytest.raises(embedded.EmbeddedError, match="PostgreSQL 14"):
        embedded.start(c)
