"""connect() and check_environment() against the real server."""

from __future__ import annotations

import keras
import pytest
import sqlalchemy as sa
import tensorflow as tf

import gpcnn
from gpcnn.engines.greenplum import GreenplumBackend, mirror_lines, mirror_states
from gpcnn.tools import embedded
from gpcnn.tools.environment import EnvironmentReport, ServerPythonError


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


def test_check_environment_reports_tensorflow_from_inside_the_server(db, schema):
    report = gpcnn.check_environment(db)
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


def test_another_installed_version_is_named_with_the_fix(db):
    from gpcnn.engines.install import InstallError, ensure_installed, install

    schema = "gpcnn_version_test"
    other_version = gpcnn.connect(db.url, schema=schema)
    install(other_version)
    assert ensure_installed(other_version)  # same version: accepted
    with other_version.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE OR REPLACE FUNCTION {schema}.version() RETURNS text AS "
                "$$ SELECT '0.0.1+old'::text $$ LANGUAGE sql"
            )
        )
    with pytest.raises(InstallError, match=r"holds gpcnn 0\.0\.1\+old.*gpcnn install"):
        ensure_installed(other_version)
    install(other_version)  # upgrading over it works, in place
    assert ensure_installed(other_version)
    with other_version.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {schema}, {schema}_staging CASCADE"))
    other_version.close()


def test_doctor_reports_autovacuum_and_the_disk_gpcnns_tables_take(db, schema):
    report = gpcnn.check_environment(db)
    facts = report.facts
    autovacuum = facts["settings"]["autovacuum"]
    assert autovacuum in ("on", "off")
    assert {"checkpoints", "transfers", "runs"} <= set(facts["table_bytes"])
    text = str(report)
    assert f"autovacuum: {autovacuum}: " in text and "MB now" in text
    if autovacuum == "off":
        assert f"VACUUM FULL {schema}.checkpoints, {schema}.transfers" in text


@pytest.mark.greenplum  # reads gp_segment_configuration and each primary's settings
def test_doctor_on_greenplum_reports_primaries_hosts_memory_limits_and_resources(db):
    report = gpcnn.check_environment(db)
    facts = report.facts
    assert facts["primaries"] == report.segments == len(facts["vmem_protect_limit_mb"])
    assert sorted(facts["vmem_protect_limit_mb"]) == [p["segment"] for p in report.probes]
    assert facts["hosts"] >= 1 and facts["mirrors"] >= 0
    assert facts["settings"]["gp_resource_manager"] in ("queue", "group", "none")
    text = str(report)
    assert f"TensorFlow imported on {facts['primaries']} of {facts['primaries']} primaries" in text
    assert "gp_vmem_protect_limit" in text and "not TensorFlow's" in text
    # each primary (and the coordinator, -1) with its mirror or standby, if any
    mirroring = facts["mirroring"]
    assert [p["content"] for p in mirroring] == list(range(-1, facts["primaries"]))
    assert facts["mirrors"] == sum(p["mirror"] is not None for p in mirroring[1:])
    assert "mirrors:  " in text and "failover: " in text


def test_doctor_on_postgresql_says_which_replicas_stream_and_what_a_fit_does_if_it_fails(db):
    report = gpcnn.check_environment(db)
    if report.engine_kind != "postgresql":
        pytest.skip("PostgreSQL's replicas; Greenplum's mirrors are the test above")
    replicas = report.facts["replicas"]
    line = next(line for line in str(report).splitlines() if line.startswith("replicas: "))
    if replicas:
        assert line.startswith(f"replicas: {len(replicas)} streaming: ")
    else:  # the embedded cluster
        assert line == (
            "replicas: none streaming: a fit fails with the server and resumes once it is back "
            "(fit(table, resume=run_id))"
        )


def test_the_greenplum_report_says_what_its_settings_mean():
    """Facts as a live 2-primary cluster returned them (docs/greenplum.md)."""
    probe = dict(python="3.11.2", tensorflow="2.21.0", keras="3.15.1", numpy="2", cpu_count=2)
    probes = [{"segment": k, **probe, "tf_threads": None} for k in (0, 1)]
    facts = {
        "settings": {"autovacuum": "off", "gp_resource_manager": "queue"},
        "table_bytes": {"checkpoints": 8_300_000_000, "transfers": 5_800_000_000},
        "primaries": 2,
        "hosts": 1,
        "mirrors": 0,
        "vmem_protect_limit_mb": {0: 8192, 1: 8192},
        "resource": {"rsqname": "pg_default", "rsqcountlimit": 20, "rsqmemorylimit": -1},
        "superuser": True,
        "mirroring": mirror_states(
            [(c, "gp", 7000 + 2 * (c + 1), True, None, None, None, None) for c in (-1, 0, 1)],
            {},
        ),
    }
    report = EnvironmentReport(
        "greenplum",
        "statement",
        "PostgreSQL 12 (Greenplum Database 7.0.0 build dev)",
        2,
        "0.2.0",
        probes,
        schema="gpcnn",
        facts=facts,
        engine_lines=GreenplumBackend.doctor_lines(facts, probes),
    )
    lines = str(report).splitlines()[-7:]
    assert lines == [
        "cluster:  2 primaries on 1 host(s), 0 mirrors; TensorFlow imported on 2 of 2 primaries",
        "memory:   gp_vmem_protect_limit 8192 MB per primary; it counts the database's memory, not "
        "TensorFlow's inside plpython3u (docs/greenplum.md, 'What the cluster needs')",
        "resources: resource queue pg_default (rsqcountlimit 20, rsqmemorylimit -1), bypassed: "
        "this role is a superuser",
        "mirrors:  none: content 0: no mirror; content 1: no mirror",
        "standby:  none: a coordinator that fails or restarts ends the running fit; it resumes "
        "with fit(table, resume=run_id) once the coordinator is back",
        "failover: none for a primary without a mirror: a fit fails until that primary is back "
        "(gpstart / gprecoverseg), then resumes with fit(table, resume=run_id)",
        "autovacuum: off: pruned checkpoints and used transfers stay on disk as dead rows until "
        "VACUUM (VACUUM FULL gpcnn.checkpoints, gpcnn.transfers); gpcnn's tables take 14100.0 MB now",
    ]


# A live 2-primary cluster with mirrors, content 1's primary killed: its mirror acts as primary,
# the old primary is down (docs/greenplum.md, "Failover"); MIRRORING_SQL's rows and
# REPLICATION_SQL's, as they came.
AFTER_A_FAILOVER = (
    [
        (-1, "vm", 7200, True, None, None, None, None),
        (0, "vm", 7202, True, "vm", 7212, "u", "s"),
        (1, "vm", 7213, False, "vm", 7203, "d", "n"),
    ],
    {0: ("streaming", "sync", "none", 3560), 1: (None, None, "none", None)},
)


def test_the_mirrors_are_read_per_content_from_greenplums_catalog_rows():
    coordinator, healthy, failed_over = mirror_states(*AFTER_A_FAILOVER)
    assert coordinator == dict(
        content=-1,
        primary="vm:7200",
        placed=True,
        mirror=None,
        mirror_up=None,
        in_sync=None,
        replication=None,
    )
    assert healthy["mirror"] == "vm:7212" and healthy["mirror_up"] and healthy["in_sync"]
    assert healthy["replication"] == dict(
        state="streaming", sync_state="sync", sync_error="none", lag_bytes=3560
    )
    assert failed_over["primary"] == "vm:7213" and not failed_over["placed"]
    assert (failed_over["mirror_up"], failed_over["in_sync"]) == (False, False)
    # a primary that did not answer: why, for every content
    unread = mirror_states(
        AFTER_A_FAILOVER[0], "failed to acquire resources on one or more segments"
    )
    assert {p["replication"] for p in unread} == {
        "failed to acquire resources on one or more segments"
    }


def test_the_report_names_each_mirror_down_out_of_sync_or_acting_and_what_to_run():
    lines = mirror_lines(mirror_states(*AFTER_A_FAILOVER), "10s")
    assert lines[0] == (
        "mirrors:  2 of 2 primaries mirrored: content 1: mirror vm:7203 down, not in sync "
        "(gprecoverseg); content 1: its mirror acts as primary at vm:7213 (gprecoverseg -r); "
        "content 0 WAL streaming sync, 3560 bytes to replay, content 1 no WAL stream"
    )
    assert lines[1].startswith("standby:  none: a coordinator that fails or restarts ends")
    assert lines[2].startswith("failover: a primary that fails ends the running fit with an error")
    assert "the fault prober checks every 10s and promotes the mirror" in lines[2]
    assert len(lines) == 3
    pairs, replication = AFTER_A_FAILOVER
    recovered = [pairs[0], pairs[1], (1, "vm", 7203, True, "vm", 7213, "u", "s")]
    streams = {0: replication[0], 1: ("streaming", "sync", "none", 0)}
    assert mirror_lines(mirror_states(recovered, streams), "10s")[0] == (
        "mirrors:  2 of 2 primaries mirrored: all up and in sync; content 0 WAL streaming sync, "
        "3560 bytes to replay, content 1 WAL streaming sync, 0 bytes to replay"
    )
    one_unmirrored = [pairs[0], pairs[1], (1, "vm", 7203, True, None, None, None, None)]
    lines = mirror_lines(mirror_states(one_unmirrored, "not read"), None)
    assert lines[0].startswith("mirrors:  1 of 2 primaries mirrored: content 1: no mirror; ")
    assert lines[0].endswith("content 0 WAL stream not read (not read)")
    assert "the fault prober checks at its interval" in lines[2]
    assert lines[3].startswith("failover: none for a primary without a mirror: a fit fails")
