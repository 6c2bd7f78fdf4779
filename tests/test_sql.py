"""The iteration queries as text (snapshots): Greenplum runs none here, so its SQL is pinned down.

Shape (b) of docs/design.md on Greenplum: GROUP BY __dist_key__ with ORDER BY buffer_id inside the
training aggregate (each segment trains its own keys, in a fixed order), the start vector joined
from the replicated ``transfers`` table, the trained vectors out in chunks and merged chunk by
chunk on top. The
"statement" dispatch on PostgreSQL sends exactly these statements, so the suite runs them. The
statements come from each engine's ``Compiler``, which needs a dialect and a schema, never a
server.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from gpcnn.engines import (
    GreenplumBackend,
    GreenplumCompiler,
    OneStatement,
    PostgresBackend,
    PostgresCompiler,
    SessionPerSegment,
    migrations,
    shapes,
)
from gpcnn.engines.install import statements
from gpcnn.engines.sessions import SegmentSessions

OFFLINE = sa.create_engine("postgresql+psycopg2://")  # never connects: quoting only
DIALECT = OFFLINE.dialect

TRAIN = (
    "SELECT t.__dist_key__ AS key, gpcnn.train(t.__dist_key__, c.chunk, c.data, t.x, t.y, t.n, "
    ":model, :options, p.expected ORDER BY e.epoch, t.buffer_id, c.chunk) AS state "
    "FROM {table} t "
    "JOIN unnest(CAST(:keys AS integer[]), CAST(:first AS integer[]), "
    "CAST(:stop AS integer[]), CAST(:expected AS bigint[])) "
    "AS p(key, first_buffer, stop_buffer, expected) "
    "ON t.__dist_key__ = p.key AND t.buffer_id >= p.first_buffer AND t.buffer_id < p.stop_buffer "
    "CROSS JOIN generate_series(1, :epochs) AS e(epoch) "
    "LEFT JOIN gpcnn.transfers c ON c.transfer_id = :transfer "
    "AND c.__dist_key__ IN (-1, t.__dist_key__) AND t.buffer_id = p.first_buffer AND e.epoch = 1 "
    "WHERE t.__dist_key__ = ANY(CAST(:group AS integer[])) GROUP BY t.__dist_key__"
)
CHUNKS = (
    "SELECT r.key, (r.c).chunk, (r.c).count, (r.c).data FROM "
    "(SELECT q.key, gpcnn.state_chunks(q.state, :chunk_values) AS c FROM ({inner}) q) r"
)


def test_greenplum_training_is_one_shape_b_statement_merged_chunk_by_chunk():
    gp = GreenplumBackend(OFFLINE, "gpcnn")
    chunks = CHUNKS.format(inner=TRAIN.format(table='img."Train"'))
    assert gp.training_sql('img."Train"', "merge") == (
        "SELECT m.chunk, gpcnn.merge_chunks(m.chunk, m.count, m.data "
        "ORDER BY array_position(CAST(:keys AS integer[]), m.key)) "
        f"FROM ({chunks}) m GROUP BY m.chunk"
    )
    assert gp.session_groups([5, 9, 2], 1) == [[5, 9, 2]]
    assert gp.session_settings == (
        "SET gp_vmem_idle_resource_timeout = 0",
        "SET gp_interconnect_queue_depth = 64",
        "SET gp_interconnect_snd_queue_depth = 64",
    )
    assert gp.session_options == "-c gp_max_packet_size=65000"
    assert gp.dispatch == "statement"


def test_statements_compile_to_the_drivers_style_with_colons_in_names_escaped():
    pg = PostgresCompiler(DIALECT, "we:ird")
    sessions = SegmentSessions.__new__(SegmentSessions)
    sessions._dialect = OFFLINE.dialect
    compiled = sessions._compiled(pg.evaluation_sql('"a:b".t', "merge"))
    assert compiled.startswith(
        'SELECT "we:ird".merge(q.state ORDER BY '
        "array_position(CAST(%(keys)s AS integer[]), q.key)) FROM (SELECT t.__dist_key__ AS key"
    )
    assert 'FROM "a:b".t t JOIN' in compiled
    assert 'LEFT JOIN "we:ird".transfers c ON c.transfer_id = %(transfer)s' in compiled
    assert "t.n, %(model)s, %(options)s ORDER BY" in compiled
    assert "ANY(CAST(%(group)s AS integer[]))" in compiled


def test_no_statement_binds_weights():
    """Weights reach the server by COPY into ``transfers``: no statement takes them as a
    parameter (psycopg2 would write them into the statement text)."""
    pg = PostgresCompiler(DIALECT, "gpcnn")
    for sql in (
        pg.training_sql("img.t", "merge"),
        pg.training_sql("img.t", None),
        pg.evaluation_sql("img.t", "merge"),
        pg.evaluation_sql("img.t", None),
    ):
        assert ":weights" not in sql and ":optimizer" not in sql and ":states" not in sql
    assert pg.chunk_copy_sql("gpcnn.transfers", ("transfer_id", "__dist_key__")) == (
        "COPY gpcnn.transfers (transfer_id, __dist_key__, chunk, data) FROM STDIN "
        "WITH (FORMAT binary)"
    )


def test_evaluation_joins_the_weights_to_each_keys_first_buffer():
    gp = GreenplumCompiler(DIALECT, "gpcnn")
    assert gp.evaluation_sql("img.t", "merge") == (
        "SELECT gpcnn.merge(q.state ORDER BY array_position(CAST(:keys AS integer[]), q.key)) "
        "FROM (SELECT t.__dist_key__ AS key, gpcnn.evaluate("
        "t.__dist_key__, c.chunk, c.data, t.x, t.y, t.n, :model, :options ORDER BY t.buffer_id, "
        "c.chunk) AS state FROM img.t t JOIN (SELECT __dist_key__ AS key, min(buffer_id) AS "
        "first_buffer FROM img.t GROUP BY __dist_key__) p ON t.__dist_key__ = p.key "
        "LEFT JOIN gpcnn.transfers c ON c.transfer_id = :transfer AND c.__dist_key__ = -1 "
        "AND t.buffer_id = p.first_buffer WHERE t.__dist_key__ = ANY(CAST(:group AS integer[])) "
        "GROUP BY t.__dist_key__) q"
    )


def test_a_stored_start_joins_the_checkpoint_where_the_transfer_was():
    """Training from the checkpoint just stored, and validating it, read the ``weights`` part of
    that checkpoint in place of a transfer; nothing else in the statement changes."""
    gp = GreenplumCompiler(DIALECT, "gpcnn")
    checkpoint = (
        "gpcnn.checkpoints c ON c.run_id = :start_run AND c.iteration = :start_iteration "
        "AND c.part = 'weights'"
    )
    transfer = "gpcnn.transfers c ON c.transfer_id = :transfer"
    for sql, stored_sql in (
        (gp.training_sql("img.t", "merge"), gp.training_sql("img.t", "merge", True)),
        (gp.evaluation_sql("img.t", "merge"), gp.evaluation_sql("img.t", "merge", True)),
    ):
        assert transfer in sql and ":start_run" not in sql
        assert stored_sql == sql.replace(transfer, checkpoint)


def test_postgres_runs_one_statement_per_segment_session():
    pg = PostgresBackend(OFFLINE, "gpcnn")
    assert pg.dispatch == "sessions" and isinstance(pg.dispatcher, SessionPerSegment)
    assert pg.session_groups([0, 1, 2, 3], 4) == [[0], [1], [2], [3]]
    assert pg.session_groups([0, 1, 2, 3, 4], 2) == [[0, 2, 4], [1, 3]]  # more keys than sessions
    assert pg.training_sql("img.t", None) == CHUNKS.format(inner=TRAIN.format(table="img.t"))


def test_statement_dispatch_on_postgres_sends_greenplums_statements():
    gp = GreenplumBackend(OFFLINE, "gpcnn")
    pg = PostgresBackend(OFFLINE, "gpcnn", dispatch="statement")
    assert not pg.per_segment_sessions and not gp.per_segment_sessions
    assert pg.session_groups([0, 1, 2, 3], 1) == gp.session_groups([0, 1, 2, 3], 1)
    for outer in ("merge", None):
        assert pg.training_sql("img.t", outer) == gp.training_sql("img.t", outer)
        assert pg.evaluation_sql("img.t", outer) == gp.evaluation_sql("img.t", outer)
    assert pg.prediction_sql("img.t") == gp.prediction_sql("img.t")
    assert isinstance(pg.dispatcher, OneStatement) and isinstance(gp.dispatcher, OneStatement)
    with pytest.raises(ValueError, match="dispatch='sessions' on greenplum"):
        GreenplumBackend(OFFLINE, "gpcnn", dispatch="sessions")


def test_a_backend_builds_the_same_statements_as_its_engines_compiler():
    """Running adds nothing to the text: the backend's statements are its compiler's."""
    for backend, compiler in (
        (GreenplumBackend(OFFLINE, "gpcnn"), GreenplumCompiler(DIALECT, "gpcnn")),
        (PostgresBackend(OFFLINE, "gpcnn"), PostgresCompiler(DIALECT, "gpcnn")),
    ):
        for outer in ("merge", None):
            assert backend.training_sql("img.t", outer) == compiler.training_sql("img.t", outer)
        assert backend.evaluation_sql("img.t", None) == compiler.evaluation_sql("img.t", None)
        assert backend.prediction_sql("img.t") == compiler.prediction_sql("img.t")
        assert backend.probe_sql() == compiler.probe_sql()


def test_training_aggregate_has_no_combine_function_and_chunks_merge_in_order():
    """A segment's group must stay in one process (its start arrives as its first rows, its
    trained vector waits there for ``state_chunks``), so ``train`` cannot be split."""
    ddl = statements("gpcnn")
    train = next(s for s in ddl if s.startswith("CREATE AGGREGATE") and ".train(" in s)
    assert "SFUNC = gpcnn.train_transition" in train and "COMBINEFUNC" not in train
    merge = next(s for s in ddl if s.startswith("CREATE AGGREGATE") and ".merge(" in s)
    assert "FINALFUNC = gpcnn.final_state" in merge
    chunks = next(s for s in ddl if s.startswith("CREATE AGGREGATE") and ".merge_chunks(" in s)
    assert "FINALFUNC = gpcnn.merge_chunk_final" in chunks
    srf = next(s for s in ddl if ".state_chunks(" in s)
    assert "RETURNS TABLE (chunk integer, count bigint, data bytea)" in srf


def test_greenplum_tables_replicate_transfers_and_distribute_checkpoints_by_run():
    gp = GreenplumBackend(OFFLINE, "gpcnn")
    ddl = shapes.create_ddl(gp)
    transfers = next(s for s in ddl if s.startswith("CREATE UNLOGGED TABLE gpcnn.transfers"))
    assert transfers.endswith(" DISTRIBUTED REPLICATED")
    assert "transfer_id BIGINT NOT NULL" in transfers and "data BYTEA NOT NULL" in transfers
    checkpoints = next(s for s in ddl if s.startswith("CREATE TABLE gpcnn.checkpoints"))
    assert checkpoints.endswith(" DISTRIBUTED BY (run_id)")
    assert "PRIMARY KEY (run_id, iteration, part, __dist_key__, chunk)" in checkpoints
    for table in ("checkpoints", "transfers"):
        assert f"ALTER TABLE gpcnn.{table} ALTER COLUMN data SET STORAGE EXTERNAL" in ddl
    pg = shapes.create_ddl(PostgresBackend(OFFLINE, "gpcnn"))
    assert [s.split(" DISTRIBUTED")[0] for s in ddl] == pg


def test_greenplum_distributes_gpcnns_tables_like_the_rows_they_meet():
    ddl = {
        text.split("(")[0].split(".")[-1].strip(): text
        for text in shapes.create_ddl(GreenplumBackend(OFFLINE, "gpcnn"))
        if text.startswith("CREATE")
    }
    assert ddl["schema_version"].endswith("DISTRIBUTED REPLICATED")
    assert ddl["image_tables"].endswith("DISTRIBUTED BY (table_schema, table_name)")
    assert ddl["runs"].endswith("DISTRIBUTED BY (run_id)")
    assert ddl["run_iterations"].endswith("DISTRIBUTED BY (run_id)")
    assert "run_id BIGSERIAL NOT NULL" in ddl["runs"]


def test_greenplum_catalog_queries():
    """What only Greenplum runs (no Greenplum here): its catalog and the per-segment probe."""
    gp = GreenplumCompiler(DIALECT, "gpcnn")
    assert gp.PRIMARIES_SQL == (
        "SELECT count(*) FROM gp_segment_configuration WHERE role = 'p' AND content >= 0"
    )
    assert "GROUP BY hostname" in gp.BUSIEST_HOST_SQL and "role = 'p'" in gp.BUSIEST_HOST_SQL
    assert gp.probe_sql() == (
        "SELECT gp_segment_id, gpcnn.probe(:threads) FROM gp_dist_random('gp_id') ORDER BY 1"
    )


def test_transfers_name_their_owner_and_age_on_every_engine():
    for backend in (GreenplumBackend(OFFLINE, "gpcnn"), PostgresBackend(OFFLINE, "gpcnn")):
        ddl = shapes.create_ddl(backend)
        transfers = next(s for s in ddl if s.startswith("CREATE UNLOGGED TABLE gpcnn.transfers"))
        assert "owner TEXT DEFAULT '' NOT NULL" in transfers
        assert "created_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL" in transfers
    assert migrations.SHAPE_VERSION == len(migrations.MIGRATIONS) + 1 == 10


def test_greenplum_doctor_pairs_each_acting_primary_with_its_mirror_and_wal_stream():
    """What `gpcnn doctor` reads of Greenplum's mirrors (no Greenplum here): every acting
    primary, the coordinator too, with its mirror if any; and each stream its primary reports."""
    gp = GreenplumCompiler(DIALECT, "gpcnn")
    assert gp.MIRRORING_SQL == (
        "SELECT p.content, p.hostname, p.port, p.role = p.preferred_role, "
        "m.hostname, m.port, m.status, m.mode "
        "FROM gp_segment_configuration p LEFT JOIN gp_segment_configuration m "
        "ON m.content = p.content AND m.role = 'm' WHERE p.role = 'p' ORDER BY p.content"
    )
    assert gp.REPLICATION_SQL == (
        "SELECT gp_segment_id, state, sync_state, sync_error, "
        "pg_wal_lsn_diff(sent_lsn, replay_lsn)::bigint FROM gp_stat_replication ORDER BY 1"
    )
    assert gp.TOPOLOGY_SQL.endswith("FROM gp_segment_configuration")
    assert "role = 'm'" not in gp.TOPOLOGY_SQL  # mirrors are counted from MIRRORING_SQL's rows
