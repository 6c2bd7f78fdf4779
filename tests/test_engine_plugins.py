"""An engine plugs in from outside gpcnn: a throw-away PostgreSQL engine, defined and
registered in this file alone, whose dispatch deals the keys to half as many sessions in reverse
order. A handle that names it trains through it, and the model is the built-in engine's, bit for
bit: the merges add the keys in shard order whichever session served them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from conftest import TEST_SCHEMA, database_url
from test_training import tiny_cnn
from tiny import learnable_images

import gpcnn
from gpcnn.data.tables import load_images
from gpcnn.engines import (
    GreenplumBackend,
    PostgresBackend,
    ServerFacts,
    SessionPerSegment,
    register_engine,
    unregister_engine,
)
from gpcnn.engines.engine_registry import detected_engine
from gpcnn.estimator import GreenplumCNN
from gpcnn.kernel import keras_setup, wire

keras = keras_setup.keras_module()

ENGINE = "postgresql-paired-sessions"
DATA_SCHEMA = "gpcnn_plugins_test"
K = 3


class PairedSessions(SessionPerSegment):
    """A session per two segments, the keys dealt to them from the last: K = 3 gives the
    sessions keys [2, 0] and [1]."""

    name = "paired"
    per_segment_sessions = False

    def session_count(self, segments: int) -> int:
        return (segments + 1) // 2

    def groups(self, keys: Sequence[int], sessions: int) -> list[list[int]]:
        return super().groups(list(keys)[::-1], sessions)


class PairedPostgres(PostgresBackend):
    """PostgreSQL with ``PairedSessions`` as its only dispatch."""

    dispatch_modes = (PairedSessions,)


@pytest.fixture(scope="module")
def paired(native_db):
    """A handle on the test database through the engine registered here, unregistered after."""
    if native_db.kind != "postgresql":
        pytest.skip(f"the plugged-in engine is a PostgreSQL one, the database is {native_db.kind}")
    register_engine(ENGINE, PairedPostgres)
    try:
        db = gpcnn.connect(database_url(), schema=TEST_SCHEMA, engine_name=ENGINE)
        yield db
        db.close()
    finally:
        unregister_engine(ENGINE)


@pytest.fixture(scope="module")
def table(native_db):
    x, y = learnable_images(150)
    info = load_images(
        native_db,
        f"{DATA_SCHEMA}.train",
        x,
        y,
        segments=K,
        buffer_size=20,
        replace=True,
        progress=False,
    )
    return str(info.table)


def fit(db, table: str, **params) -> GreenplumCNN:
    est = GreenplumCNN(
        tiny_cnn(batchnorm_dropout=True),
        optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
        learning_rate=None,
        batch_size=16,
        shuffle=True,
        iterations=2,
        seed=11,
        database=db,
        validation_table=table,
        threads_per_segment=1,
        verbose=0,
        **params,
    )
    with est:
        est.fit(table)
    return est


def test_the_built_in_engines_are_detected_from_what_the_server_says():
    postgres = ServerFacts("PostgreSQL 15.8 on x86_64-pc-linux-gnu", None)
    greenplum = ServerFacts("PostgreSQL 12.12 (Greenplum Database 7.1.0 build ...)", "dispatch")
    assert detected_engine(postgres) is PostgresBackend
    assert detected_engine(greenplum) is GreenplumBackend


def test_a_handle_naming_a_registered_engine_runs_on_its_backend_and_dispatch(paired, native_db):
    assert type(paired.backend) is PairedPostgres and paired.backend.dispatch == "paired"
    assert paired.backend.session_groups([5, 6, 7], 2) == [[7, 5], [6]]
    sessions = paired.backend.open_sessions(K, 1)
    try:
        assert len(sessions) == 2
    finally:
        sessions.release()
    # registered without ``detects``: a handle that names no engine still gets the built-in one
    assert type(native_db.backend) is PostgresBackend


def test_an_engine_name_is_registered_once(paired):
    with pytest.raises(ValueError, match="registered already"):
        register_engine(ENGINE, PairedPostgres)


@pytest.mark.parametrize(
    "merge, optimizer_state",
    [("bmuf", "local"), ("average", "reset")],  # each key's vector back / merged in the client
)
def test_training_through_a_plugged_in_engine_equals_the_built_in_engine_bit_for_bit(
    native_db, paired, table, merge, optimizer_state
):
    built_in = fit(native_db, table, merge=merge, optimizer_state=optimizer_state)
    plugged = fit(paired, table, merge=merge, optimizer_state=optimizer_state)
    np.testing.assert_array_equal(
        wire.flatten(plugged.model_.get_weights()), wire.flatten(built_in.model_.get_weights())
    )
    for name in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert [r[name] for r in plugged.history_] == [r[name] for r in built_in.history_]
