"""The quick-start job (`make demo`)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import sqlalchemy as sa

from . import connect, segment
from . import weights as wire
from .environment import check_environment
from .install import ensure_installed


def small_cnn(input_shape=(28, 28, 1), classes: int = 10):
    """A small CNN for 28×28 images: fast enough for 2-core machines."""
    keras = segment.keras_module()
    return keras.Sequential(
        [
            keras.Input(input_shape),
            keras.layers.Conv2D(8, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(classes, activation="softmax"),
        ]
    )


def run_demo(args: argparse.Namespace) -> int:
    engine = connect(args.database)
    print(check_environment(engine, args.schema))
    ensure_installed(engine, args.schema)
    keras = segment.keras_module()
    model = small_cnn()
    rng = np.random.default_rng(0)
    n = 64
    x = rng.integers(0, 256, size=(n, 28, 28, 1), dtype=np.uint8)
    y = rng.integers(0, 10, size=n).astype("<i4")
    options = {
        "compile": {
            "optimizer": keras.optimizers.serialize(keras.optimizers.SGD(0.01)),
            "loss": "sparse_categorical_crossentropy",
            "metrics": ["accuracy"],
        },
        "batch_size": 32,
        "image_shape": [28, 28, 1],
        "seed": 0,
    }
    q = engine.dialect.identifier_preparer.quote(args.schema)
    with engine.connect() as conn:
        result = conn.execute(
            sa.text(
                f"SELECT {q}.final_state({q}.train(0, x, y, n, :model, :options, :weights, NULL, :n)) "
                "FROM (SELECT :x AS x, :y AS y, :n AS n) buffer"
            ),
            {
                "x": x.tobytes(),
                "y": y.tobytes(),
                "n": n,
                "model": model.to_json(),
                "options": json.dumps(options),
                "weights": wire.model_to_bytes(model),
            },
        ).scalar()
    metrics, flat = segment.decode_result(result)
    changed = float(np.abs(flat - wire.flatten(model.get_weights())).max())
    print(
        f"one train_on_batch pass inside the server on {metrics['images']} images: "
        f"loss {metrics['loss']:.4f}, max |Δw| {changed:.4g}"
    )
    return 0
