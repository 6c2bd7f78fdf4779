"""The study's ``sync`` reference: per-batch synchronous data parallelism with
``tf.distribute.MirroredStrategy`` on K logical CPUs, in a fresh process and outside the database
(the successor of Keras's ``multi_gpu_model``), from the same start and data as the merged runs."""

from __future__ import annotations

import time

import numpy as np

from gpcnn.data.tables import read_images
from gpcnn.engines import Database
from gpcnn.estimator.named_models import optimizer
from gpcnn.kernel import keras_setup, segment, wire
from gpcnn.study.specs import RunSpec


def configure_logical_cpus(count: int) -> None:
    """``sync`` needs K logical CPU devices, which TF allows only before it initialises."""
    import tensorflow as tf

    keras_setup.keras_module()
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * count
        )
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have < count:
            raise RuntimeError(
                f"sync with K={count} needs {count} logical CPUs, but TensorFlow already started "
                f"with {have}"
            ) from None


def in_fresh_process(function, *args):
    """Run ``function(*args)`` in a new Python process: TensorFlow fixes the number of logical
    devices when it starts, and collective ops of an earlier MirroredStrategy linger."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def run_sync(
    db: Database,
    spec: RunSpec,
    model_json: str,
    weights: bytes,
    train: str,
    test: str,
    progress: bool,
) -> list[dict]:
    """Per-batch synchronous data parallelism over K logical CPUs on the same shuffled data,
    from the same starting weights (a batch of 32 per replica)."""
    configure_logical_cpus(spec.segments)
    import tensorflow as tf
    from tqdm.auto import tqdm

    keras = keras_setup.keras_module()
    x, y = read_images(db, train)
    x_val, y_val = read_images(db, test)
    db.close()
    x, x_val = segment.to_model_input(x), segment.to_model_input(x_val)
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(spec.segments)])
    with strategy.scope():
        replica = keras_setup.rebuilt(model_json)
        wire.set_model_weights(replica, weights)
        replica.compile(
            optimizer=optimizer(spec.optimizer, spec.effective_learning_rate),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
    keras.utils.set_random_seed(spec.seed)  # the order of `shuffle`
    slices = np.array_split(np.arange(len(x)), spec.merges_per_epoch)
    history = []
    bar = tqdm(range(1, spec.iterations + 1), desc=spec.name, leave=False, disable=not progress)
    for iteration in bar:
        started = time.perf_counter()
        part = slices[(iteration - 1) % len(slices)]
        logs = replica.fit(
            x[part],
            y[part],
            batch_size=spec.batch_size * spec.segments,
            epochs=1,
            shuffle=spec.shuffle,
            verbose=0,
        ).history
        val = replica.evaluate(x_val, y_val, batch_size=1000, verbose=0, return_dict=True)
        history.append(
            {
                "iteration": iteration,
                "epoch": iteration / spec.merges_per_epoch,
                "images": len(part),
                "loss": float(logs["loss"][-1]),
                "accuracy": float(logs["accuracy"][-1]),
                "val_loss": float(val["loss"]),
                "val_accuracy": float(val["accuracy"]),
                "seconds": time.perf_counter() - started,
            }
        )
        bar.set_postfix(val_accuracy=f"{history[-1]['val_accuracy']:.4f}")
    return history
