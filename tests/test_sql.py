"""The iteration queries as text (snapshots): Greenplum runs none here, so its SQL is pinned down.

Shape (b) of DESIGN.md on Greenplum: GROUP BY __dist_key__ with ORDER BY buffer_id inside the
training aggregate (each segment trains its own keys, in a fixed order), the merge on top.
"""

from __future__ import annotations

import sqlalchemy as sa

from gpcnn.engines import GreenplumBackend, PostgresBackend
from gpcnn.install import statements

OFFLINE = sa.create_engine("postgresql+psycopg2://")  # never connects: quoting only

TRAIN = (
    "SELECT t.__dist_key__ AS key, gpcnn.train(t.__dist_key__, t.x, t.y, t.n, %(model)s, "
    "%(options)s, {start}, p.expected ORDER BY e.epoch, t.buffer_id) AS state FROM {table} t "
    "{join}JOIN unnest(%(keys)s::integer[], %(first)s::integer[], %(stop)s::integer[], "
    "%(expected)s::bigint[]) AS p(key, first_buffer, stop_buffer, expected) "
    "ON t.__dist_key__ = p.key AND t.buffer_id >= p.first_buffer AND t.buffer_id < p.stop_buffer "
    "CROSS JOIN generate_series(1, %(epochs)s) AS e(epoch) "
    "WHERE t.__dist_key__ = ANY(%(group)s::integer[]) GROUP BY t.__dist_key__"
)


def test_greenplum_training_is_one_shape_b_statement_merged_on_the_coordinator():
    gp = GreenplumBackend(OFFLINE, "gpcnn")
    inner = TRAIN.format(start="%(weights)s, %(optimizer)s", table='img."Train"', join="")
    assert (
        gp.training_sql('img."Train"', "merge") == f"SELECT gpcnn.merge(q.state) FROM ({inner}) q"
    )
    assert gp.session_groups([5, 9, 2], 1) == [[5, 9, 2]]
    assert gp.session_settings == ("SET gp_vmem_idle_resource_timeout = 0",)


def test_per_segment_models_are_joined_by_key():
    gp = GreenplumBackend(OFFLINE, "gpcnn")
    join = (
        "JOIN gpcnn.segment_models m ON m.run_id = %(run_id)s AND m.__dist_key__ = t.__dist_key__ "
    )
    inner = TRAIN.format(start="m.weights, m.optimizer", table="img.t", join=join)
    assert gp.training_sql("img.t", "final", per_segment=True) == (
        f"SELECT q.key, gpcnn.final_state(q.state) FROM ({inner}) q"
    )


def test_evaluation_and_state_merge():
    gp = GreenplumBackend(OFFLINE, "gpcnn")
    assert gp.evaluation_sql("img.t", "merge") == (
        "SELECT gpcnn.merge(q.state) FROM (SELECT t.__dist_key__ AS key, gpcnn.evaluate(t.x, t.y, "
        "t.n, %(model)s, %(options)s, %(weights)s) AS state FROM img.t t WHERE t.__dist_key__ = "
        "ANY(%(group)s::integer[]) GROUP BY t.__dist_key__) q"
    )
    assert gp.merge_sql() == "SELECT gpcnn.merge(s) FROM unnest(%(states)s::bytea[]) AS s"


def test_postgres_runs_one_statement_per_segment_session():
    pg = PostgresBackend(OFFLINE, "gpcnn")
    assert pg.session_groups([0, 1, 2, 3], 4) == [[0], [1], [2], [3]]
    assert pg.session_groups([0, 1, 2, 3, 4], 2) == [[0, 2, 4], [1, 3]]  # more keys than sessions
    assert pg.training_sql("img.t", None) == TRAIN.format(
        start="%(weights)s, %(optimizer)s", table="img.t", join=""
    )


def test_training_aggregate_declares_a_combine_function_so_shape_a_works_too():
    ddl = statements("gpcnn")
    train = next(s for s in ddl if s.startswith("CREATE AGGREGATE") and ".train(" in s)
    assert 'SFUNC = "gpcnn".train_transition' in train
    assert 'COMBINEFUNC = "gpcnn".merge_states' in train
    merge = next(s for s in ddl if s.startswith("CREATE AGGREGATE") and ".merge(" in s)
    assert 'FINALFUNC = "gpcnn".final_state' in merge
