"""Keras 2 model architectures (``model.to_json()`` of Keras 2.1 to 2.x, what MADlib's model
architecture tables hold) rewritten as Keras 3 reads them: the module of every class named, the
first layer's ``batch_input_shape`` made an input layer, Keras 2 spellings of options replaced,
and a clear error naming the layer for what it cannot translate. A Keras 3 architecture passes
unchanged."""

from __future__ import annotations

import json
from typing import Any

# The layers translated, and the options of each that Keras 3 no longer takes (dropped: Keras 2
# wrote their defaults into every architecture)
LAYERS: dict[str, tuple[str, ...]] = {
    "InputLayer": ("sparse", "ragged"),
    "Dense": (),
    "Conv1D": (),
    "Conv2D": (),
    "Conv3D": (),
    "SeparableConv2D": (),
    "DepthwiseConv2D": (),
    "Conv2DTranspose": (),
    "MaxPooling1D": (),
    "MaxPooling2D": (),
    "AveragePooling1D": (),
    "AveragePooling2D": (),
    "GlobalAveragePooling1D": (),
    "GlobalAveragePooling2D": (),
    "GlobalMaxPooling1D": (),
    "GlobalMaxPooling2D": (),
    "Dropout": (),
    "SpatialDropout2D": (),
    "Flatten": (),
    "Reshape": (),
    "Activation": (),
    "ReLU": (),
    "LeakyReLU": (),
    "Softmax": (),
    "ZeroPadding2D": (),
    "Cropping2D": (),
    "BatchNormalization": (
        "fused",
        "renorm",
        "renorm_clipping",
        "renorm_momentum",
        "adjustment",
        "virtual_batch_size",
    ),
    "LayerNormalization": (),
    "Add": (),
    "Concatenate": (),
    "Multiply": (),
    "Average": (),
}
# Keras 2 spellings of an option's value that Keras 3 names otherwise
VALUES = {("VarianceScaling", "distribution", "normal"): "truncated_normal"}
NESTED = {  # options holding a serialized object, and its module
    "initializer": "keras.initializers",
    "regularizer": "keras.regularizers",
    "constraint": "keras.constraints",
}
MODELS = {"Sequential": "Sequential", "Model": "Functional", "Functional": "Functional"}
MODULES = {"Sequential": "keras", "Functional": "keras.src.models.functional"}


class ArchitectureError(ValueError):
    """A model architecture that cannot be read as Keras 3's; the message names the layer."""


def keras3_json(text: str | dict) -> str:
    """The architecture ``text`` (Keras 2 or 3 JSON) as Keras 3's ``model_from_json`` reads it.

    Parameters
    ----------
    text : str or dict
        A model's ``to_json()``, as MADlib's ``load_keras_model`` stores it.

    Returns
    -------
    str
        Keras 3 JSON of the same model.

    Raises
    ------
    ArchitectureError
        Not a model's JSON, or a layer or option that has no Keras 3 translation here (named).
    """
    try:
        model = json.loads(text) if isinstance(text, str) else dict(text)
    except ValueError as error:
        raise ArchitectureError(f"the model architecture is not JSON ({error})") from None
    if not isinstance(model, dict) or model.get("class_name") not in MODELS:
        raise ArchitectureError(
            "the model architecture is not a Sequential or functional model's to_json() "
            f"(class_name {model.get('class_name') if isinstance(model, dict) else None!r})"
        )
    if "module" in model:  # Keras 3 wrote it
        return json.dumps(model)
    config = model["config"]
    layers = config if isinstance(config, list) else config.get("layers", [])
    translated = [_layer(layer) for layer in layers]
    if MODELS[model["class_name"]] == "Sequential":
        translated = _with_input(translated)
        name = "sequential" if isinstance(config, list) else config.get("name", "sequential")
        body: dict[str, Any] = {"name": name, "layers": translated}
    else:
        body = {**config, "layers": translated}
    return json.dumps(
        {
            "module": MODULES[MODELS[model["class_name"]]],
            "class_name": MODELS[model["class_name"]],
            "config": body,
            "registered_name": None,
        }
    )


def _layer(layer: dict) -> dict:
    kind = layer.get("class_name")
    name = layer.get("config", {}).get("name", "?")
    if kind not in LAYERS:
        raise ArchitectureError(
            f"layer {name!r}: {kind} has no Keras 3 translation in gpcnn (it translates "
            f"{', '.join(sorted(LAYERS))})"
        )
    config = {k: _value(name, k, v) for k, v in layer["config"].items() if k not in LAYERS[kind]}
    if kind == "InputLayer" and "batch_input_shape" in config:
        config["batch_shape"] = config.pop("batch_input_shape")
    if kind == "BatchNormalization" and isinstance(config.get("axis"), list):
        if len(config["axis"]) != 1:  # Keras 3 normalizes over one axis
            raise ArchitectureError(f"layer {name!r}: BatchNormalization over {config['axis']}")
        config["axis"] = config["axis"][0]
    translated = {**layer, "config": config}
    translated.update(module="keras.layers", registered_name=None)
    if "inbound_nodes" in layer:
        translated["inbound_nodes"] = layer["inbound_nodes"]
    return translated


def _value(layer: str, option: str, value: Any) -> Any:
    """One option of a layer: a nested object (initializer, regularizer, constraint) with its
    module, a Keras 2 spelling replaced."""
    module = next((m for suffix, m in NESTED.items() if option.endswith(suffix)), None)
    if module is None or not isinstance(value, dict):
        return value
    if "class_name" not in value:
        raise ArchitectureError(f"layer {layer!r}: {option} is not a serialized Keras object")
    config = {
        k: VALUES.get((value["class_name"], k, v), v) if isinstance(v, str) else v
        for k, v in value.get("config", {}).items()
    }
    return {
        "module": module,
        "class_name": value["class_name"],
        "config": config,
        "registered_name": None,
    }


def _with_input(layers: list[dict]) -> list[dict]:
    """A Sequential model's layers with its input shape as an input layer, where Keras 2 kept it
    in the first layer's ``batch_input_shape``."""
    if not layers or layers[0]["class_name"] == "InputLayer":
        return layers
    first = dict(layers[0]["config"])
    shape = first.pop("batch_input_shape", None)
    if shape is None:
        return layers
    dtype = first.get("dtype", "float32")
    input_layer = {
        "module": "keras.layers",
        "class_name": "InputLayer",
        "config": {"batch_shape": shape, "dtype": dtype, "name": f"{first['name']}_input"},
        "registered_name": None,
    }
    return [input_layer, {**layers[0], "config": first}, *layers[1:]]
