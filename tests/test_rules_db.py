"""Merge rules, optimizer-state policies and merge frequency in the real database.

One small table on 2 segments (150 8x8 images, 4 buffers per segment), the tiny CNN of
test_training.py built ONCE for the module (the segments cache the compiled model by its JSON, so
every fit here reuses it), one TF thread per segment, fixed seeds. 1-3 iterations per fit.
"""

from __future__ import annotations

import numpy as np
import pytest
import sqlalchemy as sa
from tiny import learnable_images, tiny_cnn

from gpcnn.data.tables import TableName, describe, load_images
from gpcnn.engines.catalog import Catalog
from gpcnn.estimator import GreenplumCNN
from gpcnn.fit import rules, runs
from gpcnn.kernel import averaging, keras_setup, keras_state, segment, wire

pytestmark = pytest.mark.every_dispatch

keras = keras_setup.keras_module()

LEARNING_RATE = 0.05
BATCH = 16
SEED = 11
DATA_SCHEMA = "gpcnn_rules_test"
TRAIN = f"{DATA_SCHEMA}.train"
VALID = f"{DATA_SCHEMA}.valid"  # also: one buffer per segment


@pytest.fixture(scope="module")
def model():
    return tiny_cnn()


@pytest.fixture(scope="module")
def tables(db, schema):
    images, labels = learnable_images(150)
    load_images(
        db,
        TRAIN,
        images,
        labels,
        segments=2,
        buffer_size=20,
        replace=True,
        progress=False,
    )
    load_images(
        db,
        VALID,
        images[:60],
        labels[:60],
        segments=2,
        buffer_size=100,
        replace=True,
        progress=False,
    )
    return {"train": describe(db, TRAIN), "valid": describe(db, VALID)}


def estimator(db, schema, model, **params) -> GreenplumCNN:
    defaults = dict(
        optimizer="sgd",
        learning_rate=LEARNING_RATE,
        batch_size=BATCH,
        iterations=1,
        seed=SEED,
        database=db,
        threads_per_segment=1,
        verbose=0,
    )
    return GreenplumCNN(model, **{**defaults, **params})


def fit(db, schema, model, table=TRAIN, resume=None, **params) -> GreenplumCNN:
    est = estimator(db, schema, model, **params)
    with est:
        est.fit(table, resume=resume)
    return est


def fit_resumed(db, schema, model, iterations, **params) -> GreenplumCNN:
    """One iteration, then a new estimator that resumes the stored run up to ``iterations``."""
    first = fit(db, schema, model, iterations=1, **params)
    return fit(db, schema, model, resume=first.run_id_, iterations=iterations, **params)


def flat(est: GreenplumCNN) -> np.ndarray:
    return wire.flatten(est.model_.get_weights())


def stored_iteration(db, schema, run_id, iteration) -> tuple[np.ndarray, bytes | None]:
    """(model weights, rule_state bytes) stored for one iteration of a run."""
    with db.connect() as conn:
        parts = Catalog(conn, db.backend).checkpoint(run_id, iteration)
    state = parts.get("rule_state")
    return parts["weights"], None if state is None else wire.to_bytes(state)


def segment_models(db, schema, run_id) -> dict[int, np.ndarray]:
    with db.connect() as conn:
        stored = Catalog(conn, db.backend).segment_starts(run_id)
    return {key: weights for key, (weights, _) in stored.items()}


def shards(db, info) -> dict[int, list]:
    """Each key's (images, labels) buffers in buffer order, as stored."""
    name = TableName.parse(str(info.table))
    with db.connect() as conn:
        rows = conn.execute(
            sa.text(
                f"SELECT __dist_key__, x, y, n FROM {name.schema}.{name.name} "
                "ORDER BY __dist_key__, buffer_id"
            )
        ).all()
    out: dict[int, list] = {k: [] for k in info.keys}
    for key, x, y, n in rows:
        out[key].append((segment.decode_images(x, n, info.image_shape), segment.decode_labels(y)))
    return out


def max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


@pytest.fixture(scope="module")
def average_run(db, schema, model, tables):
    """MADlib's rule, 2 iterations: the baseline several tests compare with."""
    return fit(db, schema, model, iterations=2)


# -- bmuf --------------------------------------------------------------------------------------


def test_bmuf_with_eta_0_zeta_1_equals_average(db, schema, model, average_run):
    bmuf = fit(db, schema, model, iterations=2, merge="bmuf", merge_options={"eta": 0, "zeta": 1})
    np.testing.assert_allclose(flat(bmuf), flat(average_run), atol=1e-6, rtol=0)
    assert [r["images"] for r in bmuf.history_] == [150, 150]


def test_bmuf_default_differs_from_average_and_resumes_exactly(db, schema, model, average_run):
    whole = fit(db, schema, model, iterations=3, merge="bmuf")
    # after 1 iteration BMUF's w is the average (D = G); from the 2nd the momentum shows. The
    # retention rule keeps a run's last checkpoint: shorter runs give the earlier iterations.
    one, two = (fit(db, schema, model, iterations=i, merge="bmuf") for i in (1, 2))
    first, _ = stored_iteration(db, schema, one.run_id_, 1)
    average_first, _ = stored_iteration(db, schema, fit(db, schema, model, iterations=1).run_id_, 1)
    np.testing.assert_allclose(first, average_first, atol=1e-6, rtol=0)
    second, state = stored_iteration(db, schema, two.run_id_, 2)
    assert max_diff(second, flat(average_run)) > 1e-4
    assert state is not None and np.abs(wire.from_bytes(state)).max() > 0  # the momentum D

    resumed = fit_resumed(db, schema, model, 3, merge="bmuf")
    assert [r["iteration"] for r in resumed.history_] == [1, 2, 3]
    np.testing.assert_array_equal(flat(resumed), flat(whole))


# -- easgd -------------------------------------------------------------------------------------


def test_easgd_keeps_distinct_segment_models_and_resumes_exactly(db, schema, model, tables):
    whole = fit(db, schema, model, iterations=2, merge="easgd")
    locals_ = segment_models(db, schema, whole.run_id_)
    assert sorted(locals_) == sorted(tables["train"].keys)
    (a, b) = locals_.values()
    centre = flat(whole)
    assert max_diff(a, b) > 1e-4
    assert max_diff(a, centre) > 1e-4 and max_diff(b, centre) > 1e-4
    last, _ = stored_iteration(db, schema, whole.run_id_, 2)
    np.testing.assert_array_equal(last, centre)  # the stored/evaluated model is the centre

    resumed = fit_resumed(db, schema, model, 2, merge="easgd")
    np.testing.assert_array_equal(flat(resumed), centre)
    again = segment_models(db, schema, resumed.run_id_)
    for key in locals_:
        np.testing.assert_array_equal(again[key], locals_[key])


# -- none --------------------------------------------------------------------------------------


def test_none_trains_each_segment_alone(db, schema, model, tables):
    est = estimator(db, schema, model, iterations=2, merge="none", validation_table=VALID)
    with est:
        est.fit(TRAIN)
        evaluated = est.evaluate(VALID)
    info = tables["train"]
    stored = segment_models(db, schema, est.run_id_)
    assert sorted(stored) == sorted(info.keys)

    # the reference: each key trains its own copy on its own shard, never averaged
    start = wire.flatten(model.get_weights())
    buffers = shards(db, info)
    local = keras.models.model_from_json(model.to_json())
    local.compile(
        optimizer=keras.optimizers.SGD(LEARNING_RATE),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    local.optimizer.build(local.trainable_variables)
    fresh = wire.optimizer_vector(local)  # a fresh SGD: restored before every iteration
    for shard, key in enumerate(info.keys):
        weights = start
        for iteration in (1, 2):
            wire.set_model_weights(local, weights)
            wire.set_optimizer_vector(local, fresh)
            keras_state.seed_everything(local, SEED, iteration, shard)
            for images, labels in buffers[key]:
                x = segment.to_model_input(images)
                for i in range(0, len(x), BATCH):
                    local.train_on_batch(x[i : i + BATCH], labels[i : i + BATCH])
            weights = wire.flatten(local.get_weights())
        np.testing.assert_allclose(stored[key], weights, atol=1e-6, rtol=0)
    keys = list(info.keys)
    assert max_diff(stored[keys[0]], stored[keys[1]]) > 1e-4

    # model_ is the one-shot count-weighted average of the K local models
    counts = [sum(len(labels) for _, labels in buffers[k]) for k in keys]
    one_shot = averaging.weighted_average([stored[k] for k in keys], counts)
    np.testing.assert_allclose(flat(est), one_shot, atol=1e-7, rtol=0)

    for row in est.history_:
        for name in ("loss", "accuracy"):
            per_key = [row[f"val_{name}_segment_{k}"] for k in keys]
            assert f"val_{name}_average" in row
            assert row[f"val_{name}"] == pytest.approx(np.mean(per_key), abs=1e-12)
    # the one-shot average's loss is the in-database evaluation of model_
    assert est.history_[-1]["val_loss_average"] == pytest.approx(evaluated["loss"], abs=1e-6)


# -- optimizer state ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def momentum_runs(db, schema, model, tables):
    runs = {}
    for policy in ("reset", "local", "average"):
        runs[policy] = fit(
            db,
            schema,
            model,
            iterations=2,
            optimizer_state=policy,
            optimizer=keras.optimizers.SGD(LEARNING_RATE, momentum=0.9),
            learning_rate=None,
        )
    return runs


def test_optimizer_state_policies_differ_from_reset(momentum_runs):
    reset = flat(momentum_runs["reset"])
    for policy in ("local", "average"):
        assert [r["images"] for r in momentum_runs[policy].history_] == [150, 150]
        assert max_diff(flat(momentum_runs[policy]), reset) > 1e-4, policy


def test_local_optimizer_state_resumes_exactly(db, schema, model, momentum_runs):
    resumed = fit_resumed(
        db,
        schema,
        model,
        2,
        optimizer_state="local",
        optimizer=keras.optimizers.SGD(LEARNING_RATE, momentum=0.9),
        learning_rate=None,
    )
    np.testing.assert_array_equal(flat(resumed), flat(momentum_runs["local"]))


def test_easgd_with_averaged_optimizer_state_is_not_reset(db, schema, model, tables):
    runs = {
        policy: fit(
            db,
            schema,
            model,
            iterations=2,
            merge="easgd",
            optimizer_state=policy,
            optimizer=keras.optimizers.SGD(LEARNING_RATE, momentum=0.9),
            learning_rate=None,
        )
        for policy in ("reset", "average")
    }
    assert max_diff(flat(runs["average"]), flat(runs["reset"])) > 1e-4


# -- merge frequency ---------------------------------------------------------------------------


def test_two_merges_per_epoch_train_on_half_the_table_each(db, schema, model, tables):
    est = fit(db, schema, model, iterations=2, merges_per_epoch=2)
    rows = est.history_
    assert [r["epoch"] for r in rows] == [0.5, 1.0]
    assert sum(r["images"] for r in rows) == 150
    # each half is 2 of the 4 buffers of every segment (at most one buffer from 75)
    assert all(abs(r["images"] - 75) <= 20 for r in rows)


def test_more_merges_per_epoch_than_buffers_is_refused(db, schema, model, tables):
    assert tables["valid"].segments == 2  # 60 images, one buffer per segment
    with pytest.raises(ValueError, match=r"merges_per_epoch=2.*only 1 buffers"):
        estimator(db, schema, model, merges_per_epoch=2).fit(VALID)


def test_local_epochs_doubles_the_images_per_iteration(db, schema, model, average_run):
    est = fit(db, schema, model, iterations=1, local_epochs=2)
    (row,) = est.history_
    assert row["images"] == 2 * average_run.history_[0]["images"] == 300
    assert row["epoch"] == 2.0
    with pytest.raises(ValueError, match="local_epochs > 1 needs merges_per_epoch=1"):
        estimator(db, schema, model, local_epochs=2, merges_per_epoch=2).fit(TRAIN)


# -- fedprox and scaffold: a term in every local step -----------------------------------------

MOMENTUM = dict(optimizer=keras.optimizers.SGD(LEARNING_RATE, momentum=0.9), learning_rate=None)


def trained_in_process(model, info, buffers, iterations, *, mu=0.0, scaffold=None):
    """The in-process reference of ``fedprox`` (``mu``) and ``scaffold`` (a ``rules.Scaffold``):
    each key trains a copy from the sent model with a fresh SGD+momentum, and after every batch
    takes the same float32 steps as the segments (gpcnn/kernel/segment.py): FedProx
    w <- w - (lr mu)(w - w_sent), SCAFFOLD w <- w - lr (c - c_i); SCAFFOLD's c_i+ is
    (w_sent - w) / sum(lr) - (c - c_i). Returns the model after ``iterations``."""
    local = keras.models.model_from_json(model.to_json())
    local.compile(
        optimizer=keras.optimizers.SGD(LEARNING_RATE, momentum=0.9),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    local.optimizer.build(local.trainable_variables)
    fresh = wire.optimizer_vector(local)
    mask = wire.trainable_mask(wire.manifest(local))
    keys = list(info.keys)
    counts = {k: sum(len(labels) for _, labels in buffers[k]) for k in keys}
    w = wire.flatten(model.get_weights())
    if scaffold is not None:
        scaffold.start(w, keys)
    for iteration in range(1, iterations + 1):
        trained, controls = {}, {}
        for key in keys:
            wire.set_model_weights(local, w)
            wire.set_optimizer_vector(local, fresh)
            keras_state.seed_everything(local, SEED, iteration, key)
            d = scaffold.correction(key) if scaffold is not None else np.zeros_like(w)
            parts, offset = [], 0
            for var in local.weights:
                size = int(np.prod(var.shape))
                if mask[offset]:
                    piece = slice(offset, offset + size)
                    parts.append((var, w[piece].reshape(var.shape), d[piece].reshape(var.shape)))
                offset += size
            rate_sum = 0.0
            for images, labels in buffers[key]:
                x = segment.to_model_input(images)
                for i in range(0, len(x), BATCH):
                    rate = np.float32(keras.ops.convert_to_numpy(local.optimizer.learning_rate))
                    local.train_on_batch(x[i : i + BATCH], labels[i : i + BATCH])
                    for var, sent, dd in parts:
                        value = var.numpy()
                        if mu:
                            value = value - (rate * np.float32(mu)) * (value - sent)
                        if scaffold is not None:
                            value = value - rate * dd
                        var.assign(value)
                    rate_sum += float(rate)
            trained[key] = wire.flatten(local.get_weights())
            control = (w - trained[key]) / np.float32(rate_sum) - d
            controls[key] = np.where(mask, control, 0).astype(np.float32)
        average = averaging.weighted_average([trained[k] for k in keys], [counts[k] for k in keys])
        if scaffold is None:
            w = average
        else:
            scaffold.update(average, trained, counts, controls=controls)
            w = scaffold.model()
    return w


def test_fedprox_adds_the_proximal_step_to_every_batch_as_the_in_process_reference_does(
    db, schema, model, tables, momentum_runs
):
    params = dict(merge="fedprox", merge_options={"mu": 0.5}, **MOMENTUM)
    est = fit(db, schema, model, iterations=2, **params)
    want = trained_in_process(model, tables["train"], shards(db, tables["train"]), 2, mu=0.5)
    np.testing.assert_array_equal(flat(est), want)
    average = flat(momentum_runs["reset"])
    plain = fit(db, schema, model, iterations=2, **{**params, "merge_options": {"mu": 0.0}})
    np.testing.assert_array_equal(flat(plain), average)
    assert max_diff(flat(est), average) > 1e-4
    resumed = fit_resumed(db, schema, model, 2, **params)
    np.testing.assert_array_equal(flat(resumed), flat(est))


def test_scaffold_corrects_every_batch_as_the_in_process_reference_does_and_resumes_exactly(
    db, schema, model, tables
):
    params = dict(merge="scaffold", merge_options={"server_lr": 0.8}, **MOMENTUM)
    whole = fit(db, schema, model, iterations=3, **params)
    reference = rules.make_rule(
        "scaffold", wire.trainable_mask(wire.manifest(model)), 2, server_lr=0.8
    )
    want = trained_in_process(
        model, tables["train"], shards(db, tables["train"]), 3, scaffold=reference
    )
    np.testing.assert_array_equal(flat(whole), want)
    _, state = stored_iteration(db, schema, whole.run_id_, 3)
    np.testing.assert_array_equal(wire.from_bytes(state), reference.state())
    assert np.abs(reference.state()).max() > 0  # the control variates moved

    resumed = fit_resumed(db, schema, model, 3, **params)
    np.testing.assert_array_equal(flat(resumed), flat(whole))
    shown = runs.show_run(db, whole.run_id_)["stored"]["rule_state"]
    assert shown["layout"].startswith("c, then each segment's c_i")
    assert shown["bytes"] >= 4 * 3 * reference.model().size  # c and two c_i


@pytest.mark.parametrize("name", ["fedadam", "fedyogi"])
def test_server_adaptive_rules_move_off_the_average_and_resume_exactly(
    db, schema, model, average_run, name
):
    params = dict(merge=name, merge_options={"server_lr": 0.05})
    whole = fit(db, schema, model, iterations=2, **params)
    assert max_diff(flat(whole), flat(average_run)) > 1e-4
    _, state = stored_iteration(db, schema, whole.run_id_, 2)
    assert wire.from_bytes(state).size == 2 * flat(whole).size  # m and v
    resumed = fit_resumed(db, schema, model, 2, **params)
    np.testing.assert_array_equal(flat(resumed), flat(whole))
    assert runs.show_run(db, whole.run_id_)["stored"]["rule_state"]["layout"].startswith(
        "m, then v"
    )


def test_a_merges_per_epoch_schedule_merges_often_early_then_once_per_epoch(
    db, schema, model, tables
):
    est = fit(db, schema, model, iterations=4, merges_per_epoch=[2, 1])
    rows = est.history_
    assert [r["epoch"] for r in rows] == [0.5, 1.0, 2.0, 3.0]
    assert [r["images"] for r in rows][2:] == [150, 150]
    assert rows[0]["images"] + rows[1]["images"] == 150
    resumed = fit_resumed(db, schema, model, 4, merges_per_epoch=[2, 1])
    assert [r["epoch"] for r in resumed.history_] == [0.5, 1.0, 2.0, 3.0]
    np.testing.assert_array_equal(flat(resumed), flat(est))


@pytest.mark.parametrize("bad", [[], [2, 0], 0, [1.5], "2"])
def test_a_bad_merges_per_epoch_schedule_is_refused_before_any_work(db, schema, model, tables, bad):
    with pytest.raises(
        ValueError, match="merges_per_epoch must be a positive integer or a non-empty list"
    ):
        estimator(db, schema, model, merges_per_epoch=bad).fit(TRAIN)


# -- last: a failing fit discards the segment sessions (the next fit pays a fresh start) --------


def test_bmuf_with_local_optimizer_state_resumes(db, schema, model, tables):
    params = dict(
        merge="bmuf",
        optimizer=keras.optimizers.SGD(LEARNING_RATE, momentum=0.9),
        learning_rate=None,
        optimizer_state="local",
    )
    whole = fit(db, schema, model, iterations=2, **params)
    resumed = fit_resumed(db, schema, model, 2, **params)
    np.testing.assert_array_equal(flat(resumed), flat(whole))


def test_a_bad_rule_option_is_refused_before_any_run_row_and_again_on_resume(
    db, schema, model, average_run
):
    def runs_and_iterations():
        with db.connect() as conn:
            return conn.execute(
                sa.text(
                    f"SELECT (SELECT count(*) FROM {schema}.runs), "
                    f"(SELECT count(*) FROM {schema}.run_iterations), "
                    f"(SELECT status FROM {schema}.runs WHERE run_id = :r)"
                ),
                {"r": average_run.run_id_},
            ).one()

    before = runs_and_iterations()
    bad = dict(merge="bmuf", merge_options={"eta": 1.5})
    with pytest.raises(ValueError, match=r"eta=1\.5.*\[0, 1\)"):
        estimator(db, schema, model, **bad).fit(TRAIN)
    with pytest.raises(ValueError, match=r"eta=1\.5.*\[0, 1\)"):
        estimator(db, schema, model, iterations=3, **bad).fit(TRAIN, resume=average_run.run_id_)
    assert runs_and_iterations() == before
