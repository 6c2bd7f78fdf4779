"""Keras 2 model architectures, as MADlib's model architecture tables hold them, read by Keras 3
after ``keras3_json``; what it cannot translate is refused naming the layer.

The files in tests/data/keras2 are written in the layouts Keras 2 gave ``to_json()``: 2.1 (the
Sequential config a list of layers, the input shape in the first layer), 2.2 (the list under
``layers``) and tf.keras 2.4 (an InputLayer first; functional models with ``inbound_nodes``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpcnn.kernel.keras_setup import keras_module
from gpcnn.madlib.keras2 import ArchitectureError, keras3_json

DATA = Path(__file__).parent / "data" / "keras2"
FUNCTIONAL_LAYERS = [
    "InputLayer",
    "Conv2D",
    "BatchNormalization",
    "MaxPooling2D",
    "Flatten",
    "Dropout",
    "Dense",
]


def read(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize(
    ("name", "shape", "layers", "weights"),
    [
        ("sequential_2_1_6.json", (None, 4), ["Dense"] * 3, 193),
        ("sequential_2_2_4.json", (None, 4), ["Dense"] * 3, 193),
        ("sequential_2_4_0.json", (None, 4), ["Dense"] * 2, 83),
        (
            "functional_2_4_0.json",
            (None, 28, 28, 1),
            FUNCTIONAL_LAYERS,
            13642,
        ),
    ],
)
def test_keras_2_architectures_load_in_keras_3_with_their_layers_and_weights(
    name, shape, layers, weights
):
    model = keras_module().models.model_from_json(keras3_json((DATA / name).read_text()))
    assert model.input_shape == shape and model.count_params() == weights
    assert [type(layer).__name__ for layer in model.layers] == layers


def test_options_are_kept_and_keras_2_spellings_replaced():
    model = read("sequential_2_1_6.json")
    model["config"][0]["config"]["kernel_initializer"]["config"]["distribution"] = "normal"
    model["config"][0]["config"]["trainable"] = False  # MADlib's transfer-learning example
    model["config"][1]["config"]["kernel_regularizer"] = {
        "class_name": "L1L2",
        "config": {"l1": 0.0, "l2": 0.01},
    }
    built = keras_module().models.model_from_json(keras3_json(model))
    first, second = built.layers[0], built.layers[1]
    assert first.kernel_initializer.distribution == "truncated_normal"  # Keras 2's "normal"
    assert first.activation.__name__ == "relu" and first.units == 10 and not first.trainable
    assert second.kernel_regularizer.l2 == pytest.approx(0.01)


def test_a_keras_3_architecture_passes_unchanged():
    keras = keras_module()
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    assert json.loads(keras3_json(model.to_json())) == json.loads(model.to_json())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m["config"][1].update(class_name="LSTM"), "layer 'dense_2': LSTM has no"),
        (lambda m: m.update(class_name="Graph"), "not a Sequential or functional model"),
        (
            lambda m: m["config"][0]["config"].update(kernel_initializer="glorot"),
            None,  # a name is a valid Keras initializer: accepted
        ),
    ],
)
def test_what_it_cannot_translate_is_refused_naming_the_layer(change, message):
    model = read("sequential_2_1_6.json")
    change(model)
    if message is None:
        keras3_json(model)
        return
    with pytest.raises(ArchitectureError, match=message):
        keras3_json(model)


def test_text_that_is_not_a_models_json_is_refused():
    with pytest.raises(ArchitectureError, match="not JSON"):
        keras3_json("{'class_name': 'Sequential'}")
    functional = read("functional_2_4_0.json")
    functional["config"]["layers"][2]["config"]["axis"] = [1, 2]
    with pytest.raises(ArchitectureError, match="layer 'bn': BatchNormalization over"):
        keras3_json(functional)
