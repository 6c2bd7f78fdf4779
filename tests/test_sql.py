"""The iteration queries as text (snapshots): Greenplum runs none here, so its SQL is pinned down.

Shape (b) of docs/design.md on Greenplum: GROUP BY __dist_key__ with ORDER BY buffer_id inside the
training aggregate (each segment trains its own keys, in a fixed order), the merge on top. The
"statement" dispatch on PostgreSQL sends exactly these statements, so the suite runs them.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from gpcnn.engines import GreenplumBackend, PostgresBackend
from gpcnn.engines.sessions import SegmentSessions
from gpcnn.install import statements

OFFLINE = sa.create_engine("postgresql+psycopg2://")  # never connects: quoting only

TRAIN = (
    "SELECT t.__dist_key__ AS key, gpcnn.train(t.__dist_key__, t.x, t.y, t.n, :model, "
    ":options, {start}, p.expected ORDER BY e.epoch, t.buffer_id) AS state FROM {table} t "
    "{join}JOIN unnest(CAST(:keys AS integer[]), CAST(:first AS integer[]), "
    "CAST(:stop AS integer[]), CAST(:expected AS bigint[])) "
    "AS p(key, first_buffer, stop_buffer, expected) "
    "ON t.__dist_key__ = p.key AND t.buffer_id >= p.first_buffer AND t.buffer_id < p.stop_buffer "
    "CROSS JOIN generate_series(1, :epochs) AS e(epoch) "
    "WHERE t.__dist_key__ = ANY(CAST(:group AS integer[])) GROUP BY t.__dist_key__"
)


def test_greenplum_training_is_one_shape_b_statement_merged_on_the_coordinator():
    gp = GreenplumBackend(OFFLINE, "gpcnn")
    inner = TRAIN.format(start=":weights, :optimizer", table='img."Train"', join="")
    assert (
        gp.training_sql('img."Train"', "merge") == f"SELECT gpcnn.merge(q.state) FROM ({inner}) q"
    )
    assert gp.session_groups([5, 9, 2], 1) == [[5, 9, 2]]
    assert gp.session_settings == ("SET gp_vmem_idle_resource_timeout = 0",)
    assert gp.dispatch == "statement"


def test_statements_compile_to_the_drivers_style_with_colons_in_names_escaped():
    pg = PostgresBackend(OFFLINE, "we:ird")
    sessions = SegmentSessions.__new__(SegmentSessions)
    sessions._dialect = OFFLINE.dialect
    compiled = sessions._compiled(pg.evaluation_sql('"a:b".t', "merge"))
    assert compiled.startswith('SELECT "we:ird".merge(q.state) FROM (SELECT t.__dist_key__ AS key')
    assert 'FROM "a:b".t t WHERE' in compiled
    assert "%(model)s, %(options)s, %(weights)s" in compiled
    assert "ANY(CAST(%(group)s AS integer[]))" in compiled


def test_per_segment_models_are_joined_by_key():
    gp = GreenplumBackend(OFFLINE, "gpcnn")
    join = "JOIN gpcnn.segment_models m ON m.run_id = :run_id AND m.__dist_key__ = t.__dist_key__ "
    inner = TRAIN.format(start="m.weights, m.optimizer", table="img.t", join=join)
    assert gp.training_sql("img.t", "final", per_segment=True) == (
        f"SELECT q.key, gpcnn.final_state(q.state) FROM ({inner}) q"
    )


def test_evaluation_and_state_merge():
    gp = GreenplumBackend(OFFLINE, "gpcnn")
    assert gp.evaluation_sql("img.t", "merge") == (
        "SELECT gpcnn.merge(q.state) FROM (SELECT t.__dist_key__ AS key, gpcnn.evaluate(t.x, t.y, "
        "t.n, :model, :options, :weights) AS state FROM img.t t WHERE t.__dist_key__ = "
        "ANY(CAST(:group AS integer[])) GROUP BY t.__dist_key__) q"
    )
    assert gp.merge_sql() == "SELECT gpcnn.merge(s) FROM unnest(CAST(:states AS bytea[])) AS s"


def test_postgres_runs_one_statement_per_segment_session():
    pg = PostgresBackend(OFFLINE, "gpcnn")
    assert pg.dispatch == "sessions"
    assert pg.session_groups([0, 1, 2, 3], 4) == [[0], [1], [2], [3]]
    assert pg.session_groups([0, 1, 2, 3, 4], 2) == [[0, 2, 4], [1, 3]]  # more keys than sessions
    assert pg.training_sql("img.t", None) == TRAIN.format(
        start=":weights, :optimizer", table="img.t", join=""
    )


def test_statement_dispatch_on_postgres_sends_greenplums_statements():
    gp = GreenplumBackend(OFFLINE, "gpcnn")
    pg = PostgresBackend(OFFLINE, "gpcnn", dispatch="statement")
    assert not pg.per_segment_sessions and not gp.per_segment_sessions
    assert pg.session_groups([0, 1, 2, 3], 1) == gp.session_groups([0, 1, 2, 3], 1)
    for outer in ("merge", "final"):
        for per_segment in (False, True):
            assert pg.training_sql("img.t", outer, per_segment) == gp.training_sql(
                "img.t", outer, per_segment
            )
        assert pg.evaluation_sql("img.t", outer) == gp.evaluation_sql("img.t", outer)
    assert pg.prediction_sql("img.t") == gp.prediction_sql("img.t")
    with pytest.raises(ValueError, match="PostgreSQL's"):
        GreenplumBackend(OFFLINE, "gpcnn", dispatch="sessions")


def test_training_aggregate_declares_a_combine_function_so_shape_a_works_too():
    ddl = statements("gpcnn")
    train = next(s for s in ddl if s.startswith("CREATE AGGREGATE") and ".train(" in s)
    assert "SFUNC = gpcnn.train_transition" in train
    assert "COMBINEFUNC = gpcnn.merge_states" in train
    merge = next(s for s in ddl if s.startswith("CREATE AGGREGATE") and ".merge(" in s)
    assert "FINALFUNC = gpcnn.final_state" in merge


def test_greenplum_distributes_gpcnns_tables_like_the_rows_they_meet():
    from gpcnn.engines import catalog

    ddl = {
        text.split("(")[0].split(".")[-1].strip(): text
        for text in catalog.create_ddl(GreenplumBackend(OFFLINE, "gpcnn"))
    }
    assert ddl["schema_version"].endswith("DISTRIBUTED REPLICATED")
    assert ddl["image_tables"].endswith("DISTRIBUTED BY (table_schema, table_name)")
    assert ddl["runs"].endswith("DISTRIBUTED BY (run_id)")
    assert ddl["run_iterations"].endswith("DISTRIBUTED BY (run_id)")
    assert ddl["segment_models"].endswith("DISTRIBUTED BY (__dist_key__)")  # joined by key
    assert "run_id BIGSERIAL NOT NULL" in ddl["runs"]
    assert all(
        "DISTRIBUTED" not in t for t in catalog.create_ddl(PostgresBackend(OFFLINE, "gpcnn"))
    )


def test_greenplum_catalog_queries():
    """What only Greenplum runs (no Greenplum here): its catalog and the per-segment probe."""
    gp = GreenplumBackend(OFFLINE, "gpcnn")
    assert gp.PRIMARIES_SQL == (
        "SELECT count(*) FROM gp_segment_configuration WHERE role = 'p' AND content >= 0"
    )
    assert "GROUP BY hostname" in gp.BUSIEST_HOST_SQL and "role = 'p'" in gp.BUSIEST_HOST_SQL
    assert gp.probe_sql() == (
        "SELECT gp_segment_id, gpcnn.probe(:threads) FROM gp_dist_random('gp_id') ORDER BY 1"
    )
