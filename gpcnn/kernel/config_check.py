"""One job: refusing a stored model or compile config that holds anything but Keras's own parts,
before Keras deserializes it (``check_model``, ``check_optimizer``, ``check_loss``,
``check_metrics``, raising ``ConfigError``).

Keras's safe mode refuses Lambda bytecode and classes outside Keras, yet it still builds whatever
Keras exports and calls what a config hands it: a ``Lambda`` whose function is an exported Keras
function (``keras.visualization.plot_image_gallery`` writes a file where its ``path`` says), or an
operation such as ``keras.src.ops.core.Cond`` that the graph's rebuild calls with exported
functions as node arguments. So a model may hold only the layers of ``keras.layers`` (less those
in ``EXCLUDED``) with their initializers, regularizers, constraints, dtype policies and
activations, and its graph's nodes take only the graph's own tensors; an optimizer holds only
Keras's optimizers and learning-rate schedules; a loss and metrics only Keras's.

The allow-lists are read from Keras's public modules at the first check, after ``keras_setup`` has
set Keras up.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

# Public classes of Keras's modules that are refused, and why.
EXCLUDED = {
    "Lambda": "Lambda layers carry code: gpcnn rebuilds models in safe mode and refuses them",
    "TFSMLayer": "it loads and runs a TensorFlow SavedModel from a path on the server",
    "TorchModuleWrapper": "it wraps a PyTorch module, which is code",
    "JaxLayer": "it calls JAX functions, which are code",
    "FlaxLayer": "it calls a Flax module, which is code",
    "TextVectorization": "it takes standardize and split functions and reads vocabulary files",
    "StringLookup": "it reads its vocabulary from a file on the server",
    "IntegerLookup": "it reads its vocabulary from a file on the server",
    "MultiOptimizer": "its optimizer map may be a function, which is code",
    "MeanMetricWrapper": "it wraps a metric function named in the config",
}
# The kinds of objects a layer's config may hold: under these keys layers (and models) only,
# elsewhere anything but layers.
LAYER_PARTS = ("layer", "model", "initializer", "regularizer", "constraint", "dtype policy")
_LAYER_KEYS = ("layers", "layer", "backward_layer", "cell", "cells")
# What the config of each kind may hold in turn (losses, metrics and dtype policies: a policy).
_PARTS = {
    "model": LAYER_PARTS,
    "layer": (*LAYER_PARTS, "activation"),
    "optimizer": ("optimizer", "schedule"),  # a schedule as learning rate, a wrapped optimizer
    "initializer": (),
    "regularizer": (),
    "constraint": (),
    "schedule": (),
}
_FUNCTIONS = ("activation", "loss function", "metric function")


class ConfigError(ValueError):
    """A stored config that gpcnn refuses to deserialize.

    The message names the layer (its name and class), or the optimizer, loss or metrics, and the
    reason.
    """


def check_model(config: Any) -> None:
    """Refuse a model config that holds anything but Keras's own layers and graph.

    Parameters
    ----------
    config : dict
        The parsed JSON of ``model.to_json()`` (or of a ``.keras`` file's ``config.json``): a
        Sequential or functional model, nested models included.

    Raises
    ------
    ConfigError
        Naming the first layer that is refused and why.
    """
    if not isinstance(config, dict) or str(config.get("class_name")) not in _catalog()["model"]:
        raise ConfigError("a model config is a Keras Sequential or functional model's to_json()")
    _check_object(config, ("model",), "model", "")


def check_optimizer(config: Any) -> None:
    """Refuse an optimizer config that is not Keras's optimizers and schedules.

    Parameters
    ----------
    config : dict or str
        Keras's serialized optimizer (``keras.optimizers.serialize``), its learning-rate schedule
        included, or an optimizer's name.

    Raises
    ------
    ConfigError
        Naming the part that is refused and why.
    """
    if not isinstance(config, str | dict):
        raise ConfigError(f"optimizer: {type(config).__name__} is no serialized Keras optimizer")
    _check_value(config, ("optimizer",), "optimizer", "")


def check_loss(loss: Any) -> None:
    """Refuse a loss that is not Keras's.

    A name passes: Keras looks a name up among its own losses only.

    Parameters
    ----------
    loss : str, dict, list or None
        A loss's name or Keras's serialized loss, or a structure of them (per output).

    Raises
    ------
    ConfigError
        Naming the part that is refused and why.
    """
    _check_value(loss, ("loss", "loss function"), "loss", "")


def check_metrics(metrics: Any) -> None:
    """Refuse metrics that are not Keras's.

    A name passes: Keras looks a name up among its own metrics only.

    Parameters
    ----------
    metrics : sequence, dict or None
        Metrics' names or Keras's serialized metrics, or a structure of them (per output).

    Raises
    ------
    ConfigError
        Naming the part that is refused and why.
    """
    _check_value(metrics, ("metric", "metric function"), "metrics", "")


@functools.cache
def _catalog() -> dict[str, dict[str, frozenset]]:
    """Each kind's names, each with the modules a config may give it: Keras's public module of
    the kind (``builtins`` is how Keras writes its own functions)."""
    import keras

    def classes(module: Any, base: type, *modules: str) -> dict[str, frozenset]:
        found = {}
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, base) and obj.__name__ not in EXCLUDED:
                found[name] = found[obj.__name__] = frozenset(modules)  # aliases too
        return found

    def functions(module: Any, *modules: str) -> dict[str, frozenset]:
        helpers = ("get", "serialize", "deserialize")
        return {
            name: frozenset(modules)
            for name, obj in vars(module).items()
            if inspect.isfunction(obj) and name not in helpers
        }

    schedules = keras.optimizers.schedules
    return {
        "model": {
            "Sequential": frozenset({"keras", "keras.models"}),
            "Functional": frozenset({"keras.src.models.functional"}),
            "Model": frozenset({"keras", "keras.models"}),
        },
        "layer": classes(keras.layers, keras.layers.Layer, "keras.layers"),
        "initializer": classes(
            keras.initializers, keras.initializers.Initializer, "keras.initializers"
        ),
        "regularizer": classes(
            keras.regularizers, keras.regularizers.Regularizer, "keras.regularizers"
        ),
        "constraint": classes(keras.constraints, keras.constraints.Constraint, "keras.constraints"),
        "dtype policy": classes(
            keras.dtype_policies, keras.dtype_policies.DTypePolicy, "keras", "keras.dtype_policies"
        ),
        "optimizer": classes(keras.optimizers, keras.optimizers.Optimizer, "keras.optimizers"),
        "schedule": classes(schedules, schedules.LearningRateSchedule, schedules.__name__),
        "loss": classes(keras.losses, keras.losses.Loss, "keras.losses"),
        "metric": classes(keras.metrics, keras.metrics.Metric, "keras.metrics"),
        "activation": functions(keras.activations, "keras.activations", "builtins"),
        "loss function": functions(keras.losses, "keras.losses", "builtins"),
        "metric function": functions(keras.metrics, "keras.metrics", "builtins"),
    }


def _check_value(value: Any, parts: tuple[str, ...], where: str, key: str) -> None:
    """``value``, found under ``key``, may be plain JSON and objects of the kinds ``parts``."""
    if isinstance(value, dict):
        if "class_name" in value:
            _check_object(value, parts, where, key)
        else:
            for k, v in value.items():
                _check_value(v, parts, where, k)
    elif isinstance(value, list | tuple):
        for v in value:
            _check_value(v, parts, where, key)
    elif (
        isinstance(value, str)
        and "activation" in parts
        and key.endswith("activation")
        and value not in _catalog()["activation"]
    ):
        raise ConfigError(f"{where}: {key}: {value!r} is not one of Keras's activations")


def _check_object(obj: dict, parts: tuple[str, ...], where: str, key: str) -> None:
    """A serialized object: one of Keras's own of the kinds ``parts``, and its config in turn."""
    class_name, module = obj["class_name"], obj.get("module")
    subject = _subject(obj, where, key)
    if not isinstance(class_name, str) or not isinstance(module, str | None):
        raise ConfigError(f"{subject}: a class name and a module are strings")
    if class_name == "__numpy__" and _plain_config(obj, ("value", "dtype")):
        return  # a constant as a setting (a Rescaling's scale); never a node's argument
    if "layer" in parts:  # layers (and models) only under the keys that hold them
        layered = key in _LAYER_KEYS
        parts = tuple(k for k in parts if (k in ("layer", "model")) == layered)
    if class_name == "function":
        _check_function(obj, parts, subject, key)
        return
    if class_name.startswith("__"):
        raise ConfigError(f"{subject}: {class_name!r} objects are refused in a config")
    if class_name in EXCLUDED:
        raise ConfigError(f"{subject}: {EXCLUDED[class_name]}")
    kind = next((k for k in parts if k not in _FUNCTIONS and class_name in _catalog()[k]), None)
    # A module may be missing outside layers and models: Keras then looks only among its own
    # objects (and registered ones, which the registered name's check refuses).
    missing = kind not in ("layer", "model") and module is None
    if kind is None or not (missing or module in _catalog()[kind][class_name]):
        label = f"{module}.{class_name}" if module else class_name
        kinds = [k for k in parts if k not in _FUNCTIONS]
        raise ConfigError(f"{subject}: {label} is not one of Keras's {_plural(kinds)}")
    if obj.get("registered_name") not in (None, class_name):
        raise ConfigError(
            f"{subject}: registered name {obj['registered_name']!r} is not Keras's own "
            f"({class_name!r}): gpcnn rebuilds no registered custom objects"
        )
    for k, v in obj.items():
        if k == "config":
            _check_value(v, _PARTS.get(kind, ("dtype policy",)), subject, "")
        elif k == "inbound_nodes":
            _check_nodes(v, subject)
        elif k == "compile_config":
            _check_compile_config(v, f"{subject}: compile_config")
        elif k not in ("class_name", "module", "registered_name"):
            _check_value(v, (), subject, k)


def _check_function(obj: dict, parts: tuple[str, ...], subject: str, key: str) -> None:
    """A function: only an activation where one is expected, a loss or a metric."""
    name, module = obj.get("config"), obj.get("module")
    kinds = [k for k in parts if k in _FUNCTIONS and (k != "activation" or key.endswith(k))]
    if not any(isinstance(name, str) and module in _catalog()[k].get(name, ()) for k in kinds):
        expected = f"one of Keras's {_plural(kinds)}" if kinds else "allowed here"
        raise ConfigError(f"{subject}: function {module}.{name} is not {expected}")
    if obj.get("registered_name") not in (None, "function", name):
        raise ConfigError(f"{subject}: registered name {obj['registered_name']!r} is not Keras's")


def _check_nodes(nodes: Any, where: str) -> None:
    """A functional layer's calls, which the rebuild makes: the graph's own tensors in, never
    constants or objects."""
    if not isinstance(nodes, list):
        raise ConfigError(f"{where}: inbound_nodes is a list of nodes")
    for node in nodes:
        if not isinstance(node, dict) or not set(node) <= {"args", "kwargs"}:
            raise ConfigError(f"{where}: an inbound node is {{'args': [...], 'kwargs': {{...}}}}")
        if not _tensors(node.get("args", []), ()):
            raise ConfigError(f"{where}: a node's arguments may be only the model's tensors")
        if not _tensors(node.get("kwargs", {}), (type(None), bool)):
            raise ConfigError(
                f"{where}: a node's keyword arguments may be only the model's tensors, None or "
                "booleans (mask, training)"
            )


def _tensors(value: Any, plain: tuple[type, ...]) -> bool:
    """Whether ``value`` is a structure of the graph's tensors and values of the types ``plain``."""
    if isinstance(value, dict):
        if "class_name" in value:
            return (
                value["class_name"] == "__keras_tensor__"
                and set(value) == {"class_name", "config"}
                and _plain_config(value, ("shape", "dtype", "keras_history"))
            )
        return all(_tensors(v, plain) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_tensors(v, plain) for v in value)
    return isinstance(value, plain)


def _check_compile_config(config: Any, where: str) -> None:
    """A compiled model's compile config: Keras compiles the rebuilt model with it."""
    if not config:
        return
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: not a dict")
    for key, value in config.items():
        if key == "optimizer":
            _check_value(value, ("optimizer",), f"{where}: optimizer", "")
        elif key == "loss":
            _check_value(value, ("loss", "loss function"), where, key)
        elif key in ("metrics", "weighted_metrics"):
            _check_value(value, ("metric", "metric function"), where, key)
        else:
            _check_value(value, (), where, key)


def _plain_config(obj: dict, keys: tuple[str, ...]) -> bool:
    """Whether ``obj``'s config holds only ``keys``, each plain JSON with no objects."""
    config = obj.get("config")
    return isinstance(config, dict) and set(config) <= set(keys) and _plain(list(config.values()))


def _plain(value: Any) -> bool:
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


def _subject(obj: dict, where: str, key: str) -> str:
    """What a message names: a model or layer by its name and class, else where it was found."""
    if key in _LAYER_KEYS or (where == "model" and not key):
        config = obj.get("config")
        name = obj.get("name") or (config.get("name") if isinstance(config, dict) else None)
        return f"{'layer' if key else 'model'} {name!r} ({obj['class_name']})"
    return f"{where}: {key}" if key else where


def _plural(kinds: Any) -> str:
    names = [{"loss": "losses", "dtype policy": "dtype policies"}.get(k, f"{k}s") for k in kinds]
    return " or ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " or " + names[-1]
