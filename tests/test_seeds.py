"""A seed gives the same model whichever keys the engine chose (issue: Greenplum as the first
engine). The segments' random streams (Dropout masks, buffer orders) and the merges' sums follow the
shards' positions, never the key values: PostgreSQL's sessions number the shards 0..K-1, its
``"statement"`` dispatch numbers them as Greenplum might (neither 0..K-1 nor in order), and a
shuffled Dropout fit gives the same bits on both."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TEST_SCHEMA, database_url
from test_training import tiny_cnn
from tiny import learnable_images

import gpcnn
from gpcnn.data.tables import load_images
from gpcnn.estimator import GreenplumCNN
from gpcnn.kernel import keras_setup, wire
from gpcnn.kernel.protocol import CompileOptions, SegmentOptions

keras = keras_setup.keras_module()

DATA_SCHEMA = "gpcnn_seeds_test"
K = 3


@pytest.fixture(scope="module")
def handles(native_db):
    """The engine's own dispatch and ``"statement"``, each with a table loaded through it from
    the same images and seed: the same shards under different keys."""
    if "sessions" not in native_db.backend.dispatches:
        pytest.skip(
            f"{native_db.backend.kind} runs one dispatch: docs/greenplum-results.md, 'The same "
            "seed on both engines', compares it with PostgreSQL"
        )
    statement = gpcnn.connect(database_url(), schema=TEST_SCHEMA, dispatch="statement")
    x, y = learnable_images(150)
    tables = {}
    for name, db in (("sessions", native_db), ("statement", statement)):
        table = f"{DATA_SCHEMA}.train_{name}"
        tables[name] = (
            db,
            load_images(db, table, x, y, segments=K, buffer_size=20, replace=True, progress=False),
        )
    yield tables
    statement.close()


def fit(db, info, **params):
    est = GreenplumCNN(
        tiny_cnn(batchnorm_dropout=True),
        optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
        learning_rate=None,
        batch_size=16,
        shuffle=True,
        iterations=2,
        seed=11,
        database=db,
        validation_table=str(info.table),
        threads_per_segment=1,
        verbose=0,
        **params,
    )
    with est:
        est.fit(str(info.table))
    return est


def test_statement_dispatch_on_postgresql_numbers_the_shards_as_greenplum_might(handles):
    sessions, statement = handles["sessions"][1].keys, handles["statement"][1].keys
    assert sessions == tuple(range(K))
    assert sorted(statement) != list(statement) and set(statement) != set(range(K))
    assert len(set(statement)) == K


@pytest.mark.parametrize(
    "merge, optimizer_state",
    [("bmuf", "local"), ("average", "reset")],  # merged in the client / in the database
)
@pytest.mark.slow
def test_a_shuffled_dropout_fit_is_bit_identical_whatever_the_key_numbering(
    handles, merge, optimizer_state
):
    runs = {
        name: fit(db, info, merge=merge, optimizer_state=optimizer_state)
        for name, (db, info) in handles.items()
    }
    a, b = runs["sessions"], runs["statement"]
    np.testing.assert_array_equal(
        wire.flatten(a.model_.get_weights()), wire.flatten(b.model_.get_weights())
    )
    for name in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert [r[name] for r in a.history_] == [r[name] for r in b.history_]


def test_the_segment_options_carry_the_shard_keys_and_name_a_keys_position():
    options = SegmentOptions(CompileOptions({"class_name": "SGD"}), (8, 8, 1)).replace(
        shard_keys=(2, 5, 0)
    )
    decoded = SegmentOptions.from_json(options.to_json())
    assert decoded == options
    assert [decoded.shard(k) for k in (2, 5, 0)] == [0, 1, 2]
    with pytest.raises(ValueError, match="key 1 is not among the table's keys"):
        decoded.shard(1)
    assert "shard_keys" not in options.replace(shard_keys=()).to_dict()  # the sidecar's shape


def unseeded_builder(input_shape, classes):
    """A model function as users write it: initializers without seeds."""
    return keras.Sequential(
        [keras.Input(input_shape), keras.layers.Flatten(), keras.layers.Dense(classes, "softmax")]
    )


def test_the_seed_gives_a_model_functions_initial_weights_so_two_fits_are_the_same(db):
    x, y = learnable_images(40)
    models = []
    for seed in (5, 5, 6):
        est = GreenplumCNN(
            unseeded_builder, iterations=1, seed=seed, database=db, verbose=0, threads_per_segment=1
        )
        with est:
            est.fit(x, y)
        models.append(wire.model_to_bytes(est.model_))
        assert est.history_.history["loss"] == [row["loss"] for row in est.history_]  # Keras's view
    assert models[0] == models[1] and models[0] != models[2]
