"""In-database training against a plain in-process reference (issue: GreenplumCNN).

Small data, fixed seeds, one TF thread both here (conftest) and in every segment, oneDNN off.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import sqlalchemy as sa
from sklearn.base import clone
from tiny import learnable_images

from gpcnn.data.tables import STAGING_SUFFIX, TableError, load_images, read_images
from gpcnn.engines import transfers
from gpcnn.engines.catalog import Catalog
from gpcnn.estimator import GreenplumCNN, TrainingError
from gpcnn.fit import compiling
from gpcnn.fit.training import Training
from gpcnn.kernel import keras_setup, keras_state, segment, wire
from gpcnn.kernel.protocol import SegmentOptions

pytestmark = pytest.mark.every_dispatch

keras = keras_setup.keras_module()

LEARNING_RATE = 0.05
BATCH = 16
DATA_SCHEMA = "gpcnn_training_test"


def tiny_cnn(batchnorm_dropout: bool = False, classes: int = 3):
    keras.utils.set_random_seed(7)
    layers = [keras.Input((8, 8, 1)), keras.layers.Conv2D(3, 3, activation="relu")]
    if batchnorm_dropout:
        layers += [keras.layers.BatchNormalization(), keras.layers.Dropout(0.3)]
    layers += [keras.layers.Flatten(), keras.layers.Dense(classes, activation="softmax")]
    return keras.Sequential(layers)


@pytest.fixture(scope="module")
def data():
    return learnable_images(150)


@pytest.fixture(scope="module")
def tables(db, schema, data):
    x, y = data
    names = {}
    for k in (1, 2, 3):
        names[k] = f"{DATA_SCHEMA}.train_k{k}"
        load_images(
            db,
            names[k],
            x,
            y,
            segments=k,
            buffer_size=20,
            replace=True,
            progress=False,
        )
    names["test"] = f"{DATA_SCHEMA}.test"
    load_images(
        db,
        names["test"],
        x[:60],
        y[:60],
        segments=2,
        replace=True,
        progress=False,
    )
    return names


def estimator(db, schema, model, **params):
    defaults = dict(
        optimizer="sgd",
        learning_rate=LEARNING_RATE,
        batch_size=BATCH,
        iterations=1,
        seed=11,
        database=db,
        threads_per_segment=1,
        verbose=0,
    )
    return GreenplumCNN(model, **{**defaults, **params})


def shards(db, schema, table):
    """Each key's (images, labels) in buffer order, cut into buffers, as stored."""
    from gpcnn.data.tables import TableName, describe

    info = describe(db, table)
    with db.connect() as conn:
        rows = conn.execute(
            sa.text(
                f"SELECT __dist_key__, x, y, n FROM {TableName.parse(table).schema}."
                f"{TableName.parse(table).name} ORDER BY __dist_key__, buffer_id"
            )
        ).all()
    out: dict[int, list] = {k: [] for k in info.keys}
    for key, x, y, n in rows:
        out[key].append((segment.decode_images(x, n, info.image_shape), segment.decode_labels(y)))
    return out


def reference(model, key_buffers, iterations, seed=None, shuffle=False):
    """K copies from the same start, trained with train_on_batch on the same shards in the same
    buffer order (each buffer shuffled if ``shuffle``) with a fresh optimizer each iteration,
    averaged by image count."""
    weights = wire.flatten(model.get_weights())
    for iteration in range(1, iterations + 1):
        models, counts = [], []
        for shard, buffers in enumerate(key_buffers.values()):  # the keys' shards, in order
            local = keras.models.model_from_json(model.to_json())
            local.compile(
                optimizer=keras.optimizers.SGD(LEARNING_RATE),
                loss="sparse_categorical_crossentropy",
                metrics=["accuracy"],
            )
            wire.set_model_weights(local, weights)
            keras_state.seed_everything(local, seed, iteration, shard)
            position = 0
            for images, labels in buffers:
                if shuffle:
                    order = keras_state.shuffled_order(
                        len(labels), seed, iteration, shard, position
                    )
                    images, labels = images[order], labels[order]
                position += len(labels)
                x = segment.to_model_input(images)
                for start in range(0, len(x), BATCH):
                    local.train_on_batch(x[start : start + BATCH], labels[start : start + BATCH])
            models.append(wire.flatten(local.get_weights()))
            counts.append(sum(len(labels) for _, labels in buffers))
        acc = sum(m.astype(np.float64) * n for m, n in zip(models, counts, strict=True))
        weights = (acc / sum(counts)).astype(np.float32)
    return weights


def train_buffers(model, buffers) -> None:
    """Plain Keras over one key's buffers as a segment trains them: stored order, batches of
    ``BATCH`` with ``train_on_batch``."""
    for images, labels in buffers:
        x = segment.to_model_input(images)
        for start in range(0, len(x), BATCH):
            model.train_on_batch(x[start : start + BATCH], labels[start : start + BATCH])


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("iterations", [1, 2])
def test_merged_weights_equal_the_in_process_reference(db, schema, tables, k, iterations):
    model = tiny_cnn()
    est = estimator(db, schema, model, iterations=iterations)
    with est:
        est.fit(tables[k])
    expected = reference(model, shards(db, schema, tables[k]), iterations)
    np.testing.assert_allclose(wire.flatten(est.model_.get_weights()), expected, atol=1e-6, rtol=0)
    assert [r["iteration"] for r in est.history_] == list(range(1, iterations + 1))
    assert est.history_[-1]["images"] == 150
    assert est.segments_ == k


def count_transfers(db, monkeypatch) -> list[int]:
    """The number of vectors of every transfer the backend writes from now on."""
    sent = []
    write_transfer = transfers.write_transfer
    monkeypatch.setattr(
        transfers,
        "write_transfer",
        lambda backend, vectors: sent.append(len(vectors)) or write_transfer(backend, vectors),
    )
    return sent


def test_average_starts_each_iteration_from_the_checkpoint_it_stored(
    db, schema, tables, monkeypatch
):
    """After the first iteration ``average`` sends nothing: the query joins the checkpoint just
    stored. The result still equals the reference."""
    sent = count_transfers(db, monkeypatch)
    model = tiny_cnn()
    with estimator(db, schema, model, iterations=3) as est:
        est.fit(tables[2])
    assert sent == [1]
    expected = reference(model, shards(db, schema, tables[2]), 3)
    np.testing.assert_allclose(wire.flatten(est.model_.get_weights()), expected, atol=1e-6, rtol=0)


def test_the_checkpoint_of_average_is_written_while_the_average_arrives(
    db, schema, tables, monkeypatch
):
    """Where the client merges the streams (a session per segment, or one statement below the
    backend's database_merge_bytes), each whole chunk of the average goes into the checkpoint at
    once: no checkpoint is stored after the streams, yet
    every iteration's checkpoint is whole and the result equals the reference."""
    stored = []
    store = Catalog.store_checkpoint
    monkeypatch.setattr(
        Catalog, "store_checkpoint", lambda self, *a: stored.append(a[1]) or store(self, *a)
    )
    model = tiny_cnn()
    with estimator(db, schema, model, iterations=3) as est:
        est.fit(tables[2])
    size = sum(wire.sizes(wire.manifest(model)))
    merged_here = db.backend.dispatch == "sessions" or not db.backend.merges_in_database(2, size)
    assert stored == ([] if merged_here else [1, 2, 3])
    with db.connect() as conn:
        last = Catalog(conn, db.backend).checkpoint(est.run_id_, 3)
    np.testing.assert_array_equal(last["weights"], wire.flatten(est.model_.get_weights()))
    expected = reference(model, shards(db, schema, tables[2]), 3)
    np.testing.assert_allclose(wire.flatten(est.model_.get_weights()), expected, atol=1e-6, rtol=0)


def test_a_failed_iteration_leaves_no_part_of_its_streamed_checkpoint(
    db, schema, tables, monkeypatch
):
    """An iteration that fails after its streams began (here: its image count is wrong) rolls
    its checkpoint back; the run keeps the previous iteration."""
    decode = Training._decode

    def wrong_count_at_2(self, result, merged):
        metrics, *rest = decode(self, result, merged)
        if len(self.rows) == 1:
            metrics["images"] += 1
        return (metrics, *rest)

    monkeypatch.setattr(Training, "_decode", wrong_count_at_2)
    est = estimator(db, schema, tiny_cnn(), iterations=3)
    with est, pytest.raises(TrainingError, match="iteration 2: the segments trained on"):
        est.fit(tables[2])
    with db.connect() as conn:
        catalog = Catalog(conn, db.backend)
        assert catalog.last_checkpoint(est.run_id_)[0] == 1
        assert catalog.checkpoint(est.run_id_, 2) == {}


def test_a_validation_table_reads_the_model_from_its_checkpoint(db, schema, tables, monkeypatch):
    """The validation evaluates the checkpoint just stored, so validating writes no transfer of
    its own; its metrics are those of the model the fit returns."""
    sent = count_transfers(db, monkeypatch)
    est = estimator(db, schema, tiny_cnn(), iterations=3, validation_table=tables["test"])
    with est:
        est.fit(tables[2])
        assert sent == [1]  # the first start only
        again = est.evaluate(tables["test"])
    assert again["loss"] == pytest.approx(est.history_[-1]["val_loss"], rel=1e-6)
    assert again["accuracy"] == pytest.approx(est.history_[-1]["val_accuracy"], rel=1e-6)


def test_a_checkpoint_stored_before_a_failure_is_replaced_on_resume(
    db, schema, tables, monkeypatch
):
    """Iteration 2's checkpoint is committed before its validation; the fit fails before the
    row. A resume does not start from that checkpoint (it has no row) but reruns iteration 2,
    replacing it, and ends where an uninterrupted fit ends."""
    model = tiny_cnn(batchnorm_dropout=True)
    validation = {"validation_table": tables["test"]}
    with estimator(db, schema, model, iterations=3, **validation) as whole:
        whole.fit(tables[2])
    store = Training._store

    def fail_at_2(self, row, *rest):
        if row["iteration"] == 2:
            raise RuntimeError("stopped before the row")
        store(self, row, *rest)

    monkeypatch.setattr(Training, "_store", fail_at_2)
    broken = estimator(db, schema, model, iterations=3, **validation)
    with broken, pytest.raises(RuntimeError, match="before the row"):
        broken.fit(tables[2])
    with db.connect() as conn:
        assert Catalog(conn, db.backend).checkpoint(broken.run_id_, 2)  # stored, no row
        assert Catalog(conn, db.backend).last_checkpoint(broken.run_id_)[0] == 1
    monkeypatch.setattr(Training, "_store", store)
    with estimator(db, schema, model, iterations=3, **validation) as resumed:
        resumed.fit(tables[2], resume=broken.run_id_)
    assert [r["iteration"] for r in resumed.history_] == [1, 2, 3]
    np.testing.assert_array_equal(
        wire.flatten(resumed.model_.get_weights()), wire.flatten(whole.model_.get_weights())
    )
    assert resumed.history_[-1]["val_loss"] == whole.history_[-1]["val_loss"]


def test_shuffled_buffers_equal_the_reference_with_the_same_orders(db, schema, tables):
    model = tiny_cnn()
    with estimator(db, schema, model, iterations=2, shuffle=True) as est:
        est.fit(tables[2])
    got = wire.flatten(est.model_.get_weights())
    key_buffers = shards(db, schema, tables[2])
    expected = reference(model, key_buffers, 2, seed=11, shuffle=True)
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)
    # The shuffle took effect, and a new order is drawn every iteration.
    assert np.abs(got - reference(model, key_buffers, 2, seed=11)).max() > 1e-4
    first, second = (keras_state.shuffled_order(50, 11, i, 0, 0) for i in (1, 2))
    assert sorted(first) == list(range(50)) and not np.array_equal(first, second)


def test_single_segment_equals_plain_keras(db, schema, tables, data):
    model = tiny_cnn()
    with estimator(db, schema, model, iterations=2) as est:
        est.fit(tables[1])
    plain = keras.models.model_from_json(model.to_json())
    plain.set_weights(model.get_weights())
    (buffers,) = shards(db, schema, tables[1]).values()
    for _ in range(2):
        plain.compile(
            optimizer=keras.optimizers.SGD(LEARNING_RATE), loss="sparse_categorical_crossentropy"
        )
        train_buffers(plain, buffers)
    np.testing.assert_allclose(
        wire.flatten(est.model_.get_weights()), wire.flatten(plain.get_weights()), atol=1e-6
    )


def test_a_learning_rate_schedule_continues_across_merges(db, schema, tables):
    """One segment with a decaying schedule equals one plain Keras optimizer trained through
    both iterations: the segments' schedule step continues (batches trained so far) where a
    fresh optimizer per merge would restart it."""
    model = tiny_cnn()
    decay = keras.optimizers.schedules.ExponentialDecay(0.2, decay_steps=1, decay_rate=0.8)
    with estimator(
        db,
        schema,
        model,
        iterations=2,
        optimizer=keras.optimizers.SGD(decay),
        learning_rate=None,
    ) as est:
        est.fit(tables[1])
    plain = keras.models.model_from_json(model.to_json())
    plain.set_weights(model.get_weights())
    plain.compile(optimizer=keras.optimizers.SGD(decay), loss="sparse_categorical_crossentropy")
    (buffers,) = shards(db, schema, tables[1]).values()
    for _ in range(2):
        train_buffers(plain, buffers)
    np.testing.assert_allclose(
        wire.flatten(est.model_.get_weights()), wire.flatten(plain.get_weights()), atol=1e-6
    )


def test_batchnorm_statistics_are_averaged_like_all_weights(db, schema, tables):
    model = tiny_cnn(batchnorm_dropout=True)
    with estimator(db, schema, model, iterations=1, seed=5) as est:
        est.fit(tables[2])
    expected = reference(model, shards(db, schema, tables[2]), 1, seed=5)
    got = wire.flatten(est.model_.get_weights())
    np.testing.assert_allclose(got, expected, atol=1e-6)
    entries = wire.manifest(est.model_)
    moving = [i for i, e in enumerate(entries) if "moving" in e["name"]]
    assert moving, "the model has BatchNorm moving statistics"
    start = wire.flatten(model.get_weights())
    arrays = wire.unflatten(got, entries)
    before = wire.unflatten(start, entries)
    assert all(not np.allclose(arrays[i], before[i]) for i in moving)


def test_resumed_fit_equals_uninterrupted(db, schema, tables):
    model = tiny_cnn(batchnorm_dropout=True)
    with estimator(db, schema, model, iterations=3) as whole:
        whole.fit(tables[2])
    with estimator(db, schema, model, iterations=1) as first:
        first.fit(tables[2])
        run_id = first.run_id_
    resumed = estimator(db, schema, model, iterations=3)
    with resumed:
        resumed.fit(tables[2], resume=run_id)
    assert resumed.run_id_ == run_id
    assert [r["iteration"] for r in resumed.history_] == [1, 2, 3]
    np.testing.assert_array_equal(
        wire.flatten(resumed.model_.get_weights()), wire.flatten(whole.model_.get_weights())
    )


def test_validation_between_iterations_uses_the_sessions_training_holds(
    db, schema, tables, monkeypatch
):
    """Greenplum's dispatch holds one session whatever K is; evaluating the validation table
    between iterations once released the sessions training still held, and iteration 2 failed
    with "1 statements for 0 sessions" (every Greenplum fit with a validation table). One set
    of sessions serves the whole fit, validation included."""
    opened = []
    real = db.backend.open_sessions

    def counted(*args, **kwargs):
        sessions = real(*args, **kwargs)
        opened.append(len(sessions))
        return sessions

    monkeypatch.setattr(db.backend, "open_sessions", counted)
    est = estimator(db, schema, tiny_cnn(), iterations=2, validation_table=tables["test"])
    est.fit(tables[2])
    assert [r["iteration"] for r in est.history_] == [1, 2]
    assert all("val_loss" in r for r in est.history_)
    assert opened == [2 if db.backend.per_segment_sessions else 1]


def test_fit_never_changes_the_given_model(db, schema, tables):
    model = tiny_cnn()
    before = wire.flatten(model.get_weights()).copy()
    with estimator(db, schema, model) as est:
        assert est.fit(tables[2]) is est
    np.testing.assert_array_equal(wire.flatten(model.get_weights()), before)
    assert est.model_ is not model


def test_sklearn_contract(db, schema):
    model = tiny_cnn()
    est = estimator(db, schema, model, iterations=4)
    params = est.get_params()
    assert params["iterations"] == 4 and params["model"] is model
    assert est.set_params(iterations=2, learning_rate=0.1) is est
    assert (est.iterations, est.learning_rate) == (2, 0.1)
    twin = clone(est)
    assert twin is not est and twin.get_params() == est.get_params()
    assert not hasattr(twin, "model_")


def test_predict_and_evaluate_in_the_database_equal_local(db, schema, tables):
    with estimator(db, schema, tiny_cnn(), iterations=2) as est:
        est.fit(tables[2])
        x, y = read_images(db, tables["test"])
        in_db = est.predict_proba(tables["test"])
        local = est.predict_proba(x)
        np.testing.assert_allclose(in_db, local, atol=1e-5)
        np.testing.assert_array_equal(est.predict(tables["test"]), local.argmax(axis=1))
        db_eval = est.evaluate(tables["test"])
        local_eval = est.evaluate(x, y)
        assert db_eval["loss"] == pytest.approx(local_eval["loss"], abs=1e-5)
        assert db_eval["accuracy"] == pytest.approx(local_eval["accuracy"], abs=1e-6)
        assert est.score(tables["test"]) == pytest.approx(local_eval["accuracy"], abs=1e-6)


@pytest.fixture(scope="module")
def named(db, data):
    """A table whose images have ids of their own and whose classes have names."""
    x, y = data
    ids = 1000 + 7 * np.arange(len(y))
    name = f"{DATA_SCHEMA}.named"
    load_images(
        db,
        name,
        x,
        y,
        ids=ids,
        segments=3,
        class_names=["red", "green", "blue"],
        buffer_size=25,
        replace=True,
        progress=False,
    )
    return name


def _output(db, table: str) -> list:
    with db.connect() as conn:
        return conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY 1, 2")).all()


def test_predictions_into_a_table_are_keyed_by_image_id(db, schema, tables, named):
    out = f"{DATA_SCHEMA}.predictions"
    with estimator(db, schema, tiny_cnn(), iterations=1) as est:
        est.fit(tables[2])
        x, _, ids = read_images(db, named, ids=True)
        local = dict(zip(ids.tolist(), est.predict_proba(x), strict=True))
        assert est.predict(named, output_table=out, replace=True) == out
        response = _output(db, out)
        assert [r.id for r in response] == sorted(local)  # every image once, by its own id
        for r in response:
            p = local[r.id]
            assert r.class_value == int(np.argmax(p))
            assert r.class_name == ["red", "green", "blue"][r.class_value]
            assert r.prob == pytest.approx(float(p.max()), abs=1e-6)

        est.predict(named, output_table=out, pred_type="prob", replace=True)
        prob = _output(db, out)
        assert len(prob) == 3 * len(local)
        for r in prob:
            assert r.prob == pytest.approx(float(local[r.id][r.class_value]), abs=1e-6)

        est.predict(named, output_table=out, pred_type="topk", top_k=2, replace=True)
        topk = _output(db, out)
        assert [r.rank for r in topk] == [1, 2] * len(local)
        best = {r.id: r.class_value for r in topk if r.rank == 1}
        assert best == {r.id: r.class_value for r in response}

        with pytest.raises(TableError, match="exists: pass replace=True"):
            est.predict(named, output_table=out)
        with pytest.raises(ValueError, match="top_k between 1 and 3"):
            est.predict(named, output_table=out, pred_type="topk", top_k=4, replace=True)
        with pytest.raises(TableError, match="is an image table"):
            est.predict(named, output_table=tables["test"], replace=True)


def test_a_failed_prediction_keeps_the_previous_output_and_leaves_no_staging(
    db, schema, tables, named, monkeypatch
):
    out = f"{DATA_SCHEMA}.predictions_kept"
    with estimator(db, schema, tiny_cnn(), iterations=1) as est:
        est.fit(tables[2])
        est.predict(named, output_table=out, replace=True)
        before = _output(db, out)

        def three_weights():  # a model has more: the segments refuse them
            return np.zeros(3, dtype=np.float32)

        monkeypatch.setattr(est, "_weights", three_weights)
        with pytest.raises(
            TrainingError, match=r"prediction failed in the database.*weight values"
        ):
            est.predict(named, output_table=out, replace=True)
    assert _output(db, out) == before
    with db.connect() as conn:
        staging = conn.execute(
            sa.text("SELECT to_regclass(:t)"), {"t": f"{out}{STAGING_SUFFIX}"}
        ).scalar()
    assert staging is None


def test_validation_history_and_persistence(db, schema, tables, tmp_path):
    with estimator(
        db,
        schema,
        tiny_cnn(),
        iterations=2,
        validation_table=tables["test"],
        metrics=("accuracy",),
    ) as est:
        est.fit(tables[2])
    row = est.history_[-1]
    for key in (
        "iteration",
        "epoch",
        "images",
        "loss",
        "accuracy",
        "val_loss",
        "val_accuracy",
        "seconds",
        "db_seconds",
    ):
        assert key in row
    json.dumps(est.history_)  # plain values: CSV/JSON without pandas
    with db.connect() as conn:
        stored = conn.execute(
            sa.text(
                f"SELECT iteration, metrics FROM {schema}.run_iterations WHERE run_id = :r "
                "ORDER BY iteration"
            ),
            {"r": est.run_id_},
        ).all()
    assert [json.loads(m)["val_loss"] for _, m in stored] == [r["val_loss"] for r in est.history_]
    for name in ("model.keras", "model.weights.h5"):
        est.save(tmp_path / name)
        again = GreenplumCNN.load(tmp_path / name)
        np.testing.assert_array_equal(
            wire.flatten(again.model_.get_weights()), wire.flatten(est.model_.get_weights())
        )
        assert again.history_ == est.history_ and again.iterations == est.iterations


def test_errors_name_the_problem_before_training(db, schema, tables):
    wrong_input = keras.Sequential(
        [
            keras.Input((9, 9, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    with pytest.raises(ValueError, match="shape"):
        estimator(db, schema, wrong_input).fit(tables[2])
    with pytest.raises(ValueError, match="output units"):
        estimator(db, schema, tiny_cnn(classes=5)).fit(tables[2])
    with pytest.raises(ValueError, match="not a gpcnn image table"):
        estimator(db, schema, tiny_cnn()).fit(f"{DATA_SCHEMA}.nothing_here")
    with pytest.raises(ValueError, match="needs labels for arrays"):
        estimator(db, schema, tiny_cnn()).fit(np.zeros((3, 8, 8)))
    with pytest.raises(ValueError, match="metric"):
        estimator(db, schema, tiny_cnn(), metrics=("auc",)).fit(tables[2])
    with pytest.raises(ValueError, match="merge"):
        estimator(db, schema, tiny_cnn(), merge="mean").fit(tables[2])


def test_diverging_run_stops_and_keeps_the_last_good_iteration(db, schema, tables):
    est = estimator(db, schema, tiny_cnn(), iterations=5, learning_rate=1e30)
    with est, pytest.raises(TrainingError, match="non-finite"):
        est.fit(tables[2])
    assert all(np.isfinite(r["loss"]) for r in est.history_)
    assert np.isfinite(wire.flatten(est.model_.get_weights())).all()


def test_safe_mode_refuses_lambda_layers(db, schema, tables):
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Lambda(lambda t: t * 2),
            keras.layers.Flatten(),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    with pytest.raises((TrainingError, ValueError), match="safe"):
        estimator(db, schema, model).fit(tables[2])


def test_predict_after_training_in_the_same_process_uses_the_given_weights():
    """The in-database functions share one cached model per process: predicting with weights W,
    training (which changes the cached model), then predicting with W again must load W again.
    Plain Python: the same functions the server runs, called directly."""
    model = tiny_cnn()
    options = json.dumps(
        {
            "compile": {
                "optimizer": keras.optimizers.serialize(keras.optimizers.SGD(0.5)),
                "loss": "sparse_categorical_crossentropy",
                "metrics": ["accuracy"],
            },
            "batch_size": 4,
            "image_shape": [8, 8, 1],
            "seed": 0,
        }
    )
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (8, 8, 8, 1), dtype=np.uint8).tobytes()
    y = rng.integers(0, 3, 8).astype("<i4").tobytes()
    weights = wire.model_to_bytes(model)
    sent = {**json.loads(options), "vector_size": len(weights) // 4, "shard_keys": [0]}

    def predict(transfer: int) -> bytes:
        predicting = json.dumps({**sent, "transfer": transfer})
        state = segment.predict_transition(None, 0, 0, weights, x, 8, model.to_json(), predicting)
        return segment.predicted(state)

    before = predict(2)
    # the start arrives as one chunk with the first (here: only) buffer
    training = json.dumps({**sent, "transfer": 1})
    segment.train_transition(None, 0, 0, weights, x, y, 8, model.to_json(), training, 8)
    assert predict(3) == before


def test_the_same_compile_options_find_the_segments_cached_model_again():
    """Keras numbers new optimizers' names (sgd, sgd_1, ...): the options keep none, so two
    predictions (or a fit and a prediction) with the same optimizer reuse each segment's compiled
    and traced model instead of rebuilding it. Plain Python, as the segments run it."""
    first, second = (
        compiling.compile_options("sgd", None, "sparse_categorical_crossentropy", ())
        for _ in range(2)
    )
    assert first.to_dict() == second.to_dict()
    model_json = tiny_cnn().to_json()
    built = [
        segment.build_model(model_json, SegmentOptions(compile=options, image_shape=(8, 8, 1)))
        for options in (first, second)
    ]
    assert built[0] is built[1]
