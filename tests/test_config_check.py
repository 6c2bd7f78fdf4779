"""A stored model or compile config holds only Keras's own parts before Keras reads it
(``gpcnn.kernel.config_check``): the shapes that get past Keras's safe mode are refused, naming the
layer, on the client and in the server (``keras_setup.rebuilt``, ``compiled``), and every model
and optimizer gpcnn builds passes unchanged. No database."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from tiny import dense_net, dense_rows, tiny_cnn

from gpcnn.estimator import named_models, saving
from gpcnn.fit import compiling
from gpcnn.kernel import keras_setup, segment
from gpcnn.kernel.config_check import (
    EXCLUDED,
    ConfigError,
    check_loss,
    check_metrics,
    check_model,
    check_optimizer,
)
from gpcnn.kernel.protocol import CompileOptions, SegmentOptions
from gpcnn.kernel.segment_errors import SegmentError

keras = keras_setup.keras_module()
layers = keras.layers

IMAGES = keras.saving.serialize_keras_object(np.zeros((1, 4, 4, 3), "float32"))
INPUT = {
    "class_name": "__keras_tensor__",
    "config": {"shape": [None, 4], "dtype": "float32", "keras_history": ["x", 0, 0]},
}
SGD = keras.optimizers.serialize(keras.optimizers.SGD(0.1))


def exported(module: str, name: str, registered: str | None = None) -> dict:
    """A function as Keras serializes one: safe mode resolves any function Keras exports."""
    return {
        "module": module,
        "class_name": "function",
        "config": name,
        "registered_name": registered,
    }


GALLERY = exported("keras.visualization", "plot_image_gallery")  # writes to its `path` argument


def functional() -> dict:
    """The config of Input 'x' → Dense 'd'."""
    inputs = keras.Input((4,), name="x")
    return json.loads(keras.Model(inputs, layers.Dense(2, name="d")(inputs)).to_json())


def with_layer(entry: dict) -> dict:
    config = functional()
    config["config"]["layers"].append(entry)
    return config


def layer(class_name: str, config: dict, args: list, module: str | None = "keras.layers") -> dict:
    """A functional layer entry named 'evil', called once with ``args``."""
    return {
        "module": module,
        "class_name": class_name,
        "config": {"name": "evil", **config},
        "registered_name": None,
        "name": "evil",
        "inbound_nodes": [{"args": args, "kwargs": {}}],
    }


def gallery_lambda(target) -> dict:
    """A Lambda writing an image gallery to ``target`` when the rebuild calls it on constants:
    Keras's safe mode alone rebuilds it, and the file is written."""
    return layer("Lambda", {"function": GALLERY, "arguments": {"path": str(target)}}, [IMAGES])


def dense_with(**fields) -> dict:
    """The functional config with these fields in Dense 'd''s config."""
    config = functional()
    config["config"]["layers"][1]["config"].update(fields)
    return config


def with_optimizer(**fields) -> dict:
    """``SGD`` with these top-level fields, and ``config``'s fields in its config."""
    optimizer = json.loads(json.dumps(SGD))
    optimizer["config"].update(fields.pop("config", {}))
    return {**optimizer, **fields}


# -- the shapes that get past safe mode -------------------------------------------------------


def test_an_exported_function_as_a_layer_with_constant_node_arguments_writes_no_file(tmp_path):
    target = tmp_path / "x.png"
    gadget = {
        **exported("keras.utils", "save_img", "function"),
        "name": "evil",
        "inbound_nodes": [{"args": [str(target), IMAGES], "kwargs": {}}],
    }
    with pytest.raises(ConfigError, match=r"layer 'evil' \(function\): function keras.utils"):
        keras_setup.rebuilt(json.dumps(with_layer(gadget)))
    assert not target.exists()


def test_a_lambda_calling_an_exported_function_on_constant_arguments_writes_no_file(tmp_path):
    target = tmp_path / "gallery.png"
    with pytest.raises(ConfigError, match=r"layer 'evil' \(Lambda\): Lambda layers carry code"):
        keras_setup.rebuilt(json.dumps(with_layer(gallery_lambda(target))))
    assert not target.exists()


def test_an_operation_given_exported_functions_as_node_arguments_is_refused():
    """Safe mode alone rebuilds this model, and the rebuild calls the function."""
    logging = keras.config.is_interactive_logging_enabled()
    call = exported("keras.config", "disable_interactive_logging")
    gadget = layer("Cond", {}, [True, call, call], module="keras.src.ops.core")
    with pytest.raises(ConfigError, match=r"layer 'evil' \(Cond\): keras.src.ops.core.Cond is not"):
        keras_setup.rebuilt(json.dumps(with_layer(gadget)))
    assert keras.config.is_interactive_logging_enabled() == logging


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ([IMAGES], {}),
        ([INPUT, 2.0], {}),
        (["/tmp/x.png"], {}),
        ([None], {}),
        ([[INPUT, exported("keras.activations", "relu")]], {}),
        ([INPUT], {"mask": IMAGES}),
        ([INPUT], {"fn": exported("keras.config", "disable_interactive_logging")}),
        ([INPUT], {"axis": -1}),
    ],
)
def test_a_node_that_passes_anything_but_the_models_tensors_is_refused(args, kwargs):
    config = functional()
    config["config"]["layers"][1]["inbound_nodes"] = [{"args": args, "kwargs": kwargs}]
    with pytest.raises(ConfigError, match=r"layer 'd' \(Dense\): a node's (keyword )?arguments"):
        check_model(config)


def test_a_node_in_the_legacy_list_form_is_refused():
    config = functional()
    config["config"]["layers"][1]["inbound_nodes"] = [[["x", 0, 0, {}]]]
    with pytest.raises(ConfigError, match=r"layer 'd' \(Dense\): an inbound node is"):
        check_model(config)


@pytest.mark.parametrize(
    "field, function",
    [
        ("kernel_initializer", exported("keras.utils", "normalize")),
        ("kernel_regularizer", exported("keras.activations", "relu")),
        ("bias_constraint", exported("builtins", "relu")),
        ("activation", exported("keras.utils", "normalize")),
        ("activation", exported("keras.config", "disable_interactive_logging")),
        ("activation", exported("builtins", "eval")),
    ],
)
def test_a_function_anywhere_but_as_a_keras_activation_is_refused(field, function):
    with pytest.raises(ConfigError, match=rf"layer 'd' \(Dense\): {field}: function "):
        check_model(dense_with(**{field: function}))


@pytest.mark.parametrize("module", ["keras.activations", "builtins"])
def test_an_activation_function_of_keras_passes_and_rebuilds(module):
    config = dense_with(activation=exported(module, "relu", "function"))
    check_model(config)
    rebuilt = keras_setup.rebuilt(json.dumps(dense_with(activation=exported(module, "relu"))))
    assert rebuilt.get_layer("d").activation is keras.activations.relu


def test_an_activation_name_that_keras_lacks_is_refused():
    with pytest.raises(ConfigError, match=r"layer 'd' \(Dense\): activation: 'system' is not"):
        check_model(dense_with(activation="system"))


@pytest.mark.parametrize(
    "loss",
    [
        exported("keras.utils", "normalize"),
        exported("keras.config", "set_floatx"),
        exported("builtins", "relu"),  # an activation, not a loss
        {"module": "os", "class_name": "system", "config": {}, "registered_name": None},
        {"module": "keras.losses", "class_name": "Popen", "config": {}, "registered_name": None},
        [GALLERY],
    ],
)
def test_a_loss_or_metric_that_is_not_keras_is_refused(loss):
    with pytest.raises(ConfigError, match="loss"):
        check_loss(loss)
    with pytest.raises(ConfigError, match="metrics"):
        check_metrics([loss])


def test_a_compiled_models_compile_config_with_a_foreign_loss_is_refused():
    model = tiny_cnn()
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    config = json.loads(model.to_json())
    config["compile_config"]["loss"] = exported("keras.utils", "normalize")
    with pytest.raises(ConfigError, match=r"model 'sequential.*compile_config: loss: function"):
        check_model(config)


@pytest.mark.parametrize(
    "module, class_name",
    [
        ("os", "system"),
        ("subprocess", "Popen"),
        ("builtins", "eval"),
        ("keras.utils", "Dense"),
        ("keras.src.ops.numpy", "Multiply"),  # what `x * 2` adds to a functional graph
        ("keras.src.layers.core.dense", "Dense"),
        (None, "Dense"),
    ],
)
def test_a_layer_or_initializer_from_outside_keras_public_modules_is_refused(module, class_name):
    entry = layer(class_name, {"units": 2}, [INPUT], module=module)
    with pytest.raises(ConfigError, match=rf"layer 'evil' \({class_name}\): .*Keras's layers"):
        check_model(with_layer(entry))
    initializer = {"module": module, "class_name": class_name, "config": {}}
    with pytest.raises(ConfigError, match=r"layer 'd' \(Dense\): kernel_initializer: .* not one"):
        check_model(dense_with(kernel_initializer=initializer))


def test_a_keras_operation_in_a_real_functional_graph_is_refused():
    inputs = keras.Input((4,), name="x")
    config = json.loads(keras.Model(inputs, keras.ops.add(inputs, inputs)).to_json())
    with pytest.raises(ConfigError, match=r"\(Add\): keras.src.ops.numpy.Add is not one of"):
        check_model(config)


@pytest.mark.parametrize("registered", ["os>system", "my_package>Dense", "Conv2D"])
def test_a_registered_name_other_than_keras_own_is_refused(registered):
    config = functional()
    config["config"]["layers"][1]["registered_name"] = registered
    with pytest.raises(ConfigError, match=rf"layer 'd' \(Dense\): registered name '{registered}'"):
        check_model(config)
    with pytest.raises(ConfigError, match=rf"activation: registered name '{registered}'"):
        check_model(dense_with(activation=exported("keras.activations", "relu", registered)))


def test_a_lambda_layer_is_refused_with_bytecode_and_with_an_exported_function():
    bytecode = keras.Sequential([keras.Input((4,)), layers.Lambda(lambda t: t * 2, name="lam")])
    with pytest.raises(
        ConfigError, match=r"layer 'lam' \(Lambda\): Lambda layers carry code.*safe"
    ):
        check_model(json.loads(bytecode.to_json()))
    named = keras.Sequential([keras.Input((4,)), layers.Lambda(keras.activations.relu, name="lam")])
    with pytest.raises(ConfigError, match=r"layer 'lam' \(Lambda\): Lambda layers carry code"):
        check_model(json.loads(named.to_json()))


@pytest.mark.parametrize(
    "special",
    [
        {"class_name": "__lambda__", "config": {"code": "", "defaults": None, "closure": None}},
        {"class_name": "__bytes__", "config": {"value": "x"}},
        {"class_name": "__typespec__", "spec_name": "TensorSpec", "module": "tf", "config": []},
        {"class_name": "__slice__", "config": {"start": 0, "stop": 1, "step": 1}},
        INPUT,
        {"class_name": "__numpy__", "config": {"value": [1], "dtype": "float32", "x": IMAGES}},
    ],
)
def test_keras_special_objects_are_refused_as_a_layers_setting(special):
    with pytest.raises(ConfigError, match=r"layer 'd' \(Dense\): units: '__\w+__' objects are"):
        check_model(dense_with(units=special))


def test_a_numpy_constant_as_a_layers_setting_passes():
    model = keras.Sequential(
        [keras.Input((4, 4, 3)), layers.Rescaling(np.array([1 / 255, 1.0, 1.0], "float32"))]
    )
    config = json.loads(model.to_json())
    assert config["config"]["layers"][1]["config"]["scale"]["class_name"] == "__numpy__"
    check_model(config)


def test_a_bad_layer_deep_inside_nested_models_is_refused_by_its_name():
    inner = keras.Sequential([keras.Input((4,)), layers.Dense(3), layers.Lambda(abs, name="deep")])
    inputs = keras.Input((4,))
    middle = keras.Model(inputs, inner(inputs), name="middle")
    outer = keras.Sequential([keras.Input((4,)), middle, layers.Dense(2)], name="outer")
    with pytest.raises(ConfigError, match=r"^layer 'deep' \(Lambda\)"):
        check_model(json.loads(outer.to_json()))
    wrapped = keras.Sequential([keras.Input((3, 4)), layers.TimeDistributed(layers.Dense(2))])
    config = json.loads(wrapped.to_json())
    config["config"]["layers"][1]["config"]["layer"]["module"] = "os"
    with pytest.raises(ConfigError, match=r"layer 'dense.*' \(Dense\): os.Dense is not one of"):
        check_model(config)


@pytest.mark.parametrize(
    "optimizer",
    [
        with_optimizer(module="os"),
        with_optimizer(class_name="system"),
        with_optimizer(module="keras.layers", class_name="Dense"),
        with_optimizer(registered_name="os>system"),
        with_optimizer(class_name="MultiOptimizer", config={"optimizer_map": GALLERY}),
        with_optimizer(config={"learning_rate": exported("keras.config", "set_floatx")}),
        with_optimizer(config={"clipnorm": {"module": "os", "class_name": "system", "config": {}}}),
        exported("keras.utils", "normalize"),
        [SGD],
    ],
)
def test_an_optimizer_that_is_not_keras_is_refused_on_the_client_and_in_the_server(optimizer):
    with pytest.raises(ConfigError, match="optimizer"):
        check_optimizer(optimizer)
    with pytest.raises(ConfigError, match="optimizer"):
        keras_setup.compiled(dense_net(), CompileOptions(optimizer))


@pytest.mark.parametrize(
    "schedule",
    [
        {"module": "os", "class_name": "ExponentialDecay", "config": {}},
        {"module": "keras.utils", "class_name": "ExponentialDecay", "config": {}},
        {"module": "keras.optimizers.schedules", "class_name": "Popen", "config": {}},
        {
            "module": "keras.optimizers.schedules",
            "class_name": "ExponentialDecay",
            "config": {"decay_steps": exported("keras.config", "set_floatx")},
        },
    ],
)
def test_a_learning_rate_schedule_from_outside_keras_is_refused(schedule):
    with pytest.raises(ConfigError, match=r"optimizer: .*not"):
        check_optimizer(with_optimizer(config={"learning_rate": schedule}))


def test_a_stored_optimizer_is_checked_when_it_is_loaded():
    stored = compiling.stored_optimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    assert compiling.loaded_optimizer(stored).momentum == 0.9
    with pytest.raises(ConfigError, match="optimizer"):
        compiling.loaded_optimizer({**stored, "module": "os"})


# -- the server refuses too ---------------------------------------------------------------------


def test_the_servers_rebuild_refuses_the_gadget_naming_the_layer(tmp_path):
    target = tmp_path / "gallery.png"
    model_json = json.dumps(with_layer(gallery_lambda(target)))
    with pytest.raises(ConfigError, match=r"layer 'evil' \(Lambda\)"):
        keras_setup.rebuilt(model_json)
    with pytest.raises(SegmentError, match=r"ConfigError: layer 'evil' \(Lambda\)"):
        segment.build_model(model_json, SegmentOptions(CompileOptions(SGD), (4,)))
    assert not target.exists()


def test_a_keras_file_holding_the_gadget_is_refused_before_keras_loads_it(tmp_path):
    target = tmp_path / "gallery.png"
    path = tmp_path / "model.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", json.dumps(with_layer(gallery_lambda(target))))
        archive.writestr("metadata.json", json.dumps({"keras_version": keras.__version__}))
    (tmp_path / "model.keras.gpcnn.json").write_text(json.dumps({"params": {}}))
    with pytest.raises(ConfigError, match=r"layer 'evil' \(Lambda\)"):
        saving.load_files(None, path)
    assert not target.exists()
    (tmp_path / "model.h5.gpcnn.json").write_text(json.dumps({"params": {}}))
    with pytest.raises(ValueError, match=r"\.keras or \.weights\.h5"):
        saving.load_files(None, tmp_path / "model.h5")


# -- what gpcnn builds passes unchanged -------------------------------------------------------


def functional_cnn():
    inputs = keras.Input((8, 8, 1))
    x = layers.Rescaling(1 / 255)(inputs)
    x = layers.Conv2D(
        4,
        3,
        padding="same",
        activation="gelu",
        kernel_constraint=keras.constraints.MaxNorm(2),
        kernel_regularizer=keras.regularizers.L2(1e-3),
    )(x)
    x = layers.Add()([layers.BatchNormalization()(x), layers.GroupNormalization(2)(x)])
    x = layers.SeparableConv2D(4, 3, padding="same")(layers.LayerNormalization()(x))
    x = layers.Dropout(0.25)(x, training=True)
    x = layers.GlobalAveragePooling2D()(layers.DepthwiseConv2D(3, padding="same")(x))
    outputs = layers.Dense(3, "softmax", kernel_initializer=keras.initializers.HeNormal(1))(x)
    return keras.Model(inputs, outputs)


def nested():
    inner = keras.Sequential([keras.Input((8, 8, 1)), layers.Conv2D(2, 3), layers.ReLU()])
    inputs = keras.Input((8, 8, 1))
    middle = keras.Model(inputs, layers.Flatten()(inner(inputs)))
    return keras.Sequential([keras.Input((8, 8, 1)), middle, layers.Dense(3, activation="softmax")])


def two_in_two_out():
    a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
    shared = layers.Dense(4, name="shared")
    merged = layers.Concatenate()([shared(a), shared(b)])
    return keras.Model({"a": a, "b": b}, {"p": layers.Dense(2)(merged), "q": shared(b)})


def compiled_cnn():
    model = tiny_cnn()
    model.compile(
        optimizer=keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(0.1, 100)),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy", keras.metrics.sparse_categorical_accuracy],
    )
    return model


def real_models() -> dict:
    """gpcnn's named models, the tests' tiny ones, and functional, nested and compiled models of
    the layers image models use."""
    models = {
        f"{name} {shape}": lambda build=build, shape=shape: build(shape, 5)
        for name, build in named_models.MODELS.items()
        for shape in ((28, 28, 1), (32, 32, 3))
    }
    models.update(tiny_cnn=tiny_cnn, dense_net=dense_net, dense_rows=dense_rows)
    models.update(functional=functional_cnn, nested=nested, two_in_two_out=two_in_two_out)
    models.update(compiled=compiled_cnn)
    return models


@pytest.mark.parametrize("build", real_models().values(), ids=list(real_models()))
def test_the_models_gpcnn_builds_pass_and_rebuild_unchanged(build):
    model_json = build().to_json()
    check_model(json.loads(model_json))
    assert keras_setup.rebuilt(model_json).to_json() == model_json


LAYER_ARGUMENTS = (
    {},
    {"units": 2},
    {"filters": 2, "kernel_size": 3},
    {"kernel_size": 3},
    {"pool_size": 2},
    {"activation": "relu"},
    {"rate": 0.1},
    {"layer": layers.Dense(2)},
    {"cell": layers.GRUCell(2)},
)


def built(layer_class: type):
    """An instance of ``layer_class`` from the first of ``LAYER_ARGUMENTS`` it takes, else None."""
    for arguments in LAYER_ARGUMENTS:
        try:
            return layer_class(**arguments)
        except Exception:
            continue
    return None


def test_every_keras_layer_but_the_excluded_ones_passes():
    checked = []
    for name, layer_class in vars(layers).items():
        if (
            isinstance(layer_class, type)
            and issubclass(layer_class, layers.Layer)
            and layer_class is not layers.Layer  # the base class, serialized as keras.Layer
            and layer_class.__name__ not in EXCLUDED
            and (instance := built(layer_class)) is not None
        ):
            config = {"module": "keras", "class_name": "Sequential", "config": {"name": "s"}}
            config["config"]["layers"] = [layers.serialize(instance)]
            check_model(config)
            checked.append(name)
    assert {"Conv2D", "BatchNormalization", "GroupNormalization", "Dropout"} <= set(checked)
    assert len(checked) > 100


OPTIMIZERS = sorted(
    name
    for name, obj in vars(keras.optimizers).items()
    if isinstance(obj, type)
    and issubclass(obj, keras.optimizers.Optimizer)
    and name not in ("Optimizer", "MultiOptimizer")
)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_keras_optimizer_passes(name):
    optimizer_class = getattr(keras.optimizers, name)
    inner = (keras.optimizers.SGD(0.1),) if name == "LossScaleOptimizer" else ()
    check_optimizer(compiling.stored_optimizer(optimizer_class(*inner)))


@pytest.mark.parametrize("name", named_models.OPTIMIZERS)
def test_the_optimizers_gpcnn_names_compile(name):
    stored = compiling.stored_optimizer(named_models.optimizer(name, 0.1))
    assert keras_setup.compiled(dense_net(), CompileOptions(stored)).optimizer is not None


@pytest.mark.parametrize(
    "schedule",
    [
        keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9),
        keras.optimizers.schedules.PiecewiseConstantDecay([10], [0.1, 0.01]),
        keras.optimizers.schedules.CosineDecayRestarts(0.1, 10),
    ],
    ids=lambda schedule: type(schedule).__name__,
)
def test_a_keras_learning_rate_schedule_passes_and_compiles(schedule):
    stored = compiling.stored_optimizer(keras.optimizers.SGD(schedule))
    check_optimizer(stored)
    keras_setup.compiled(dense_net(), CompileOptions(stored))


def test_the_losses_and_metrics_gpcnn_compiles_with_pass():
    check_loss("sparse_categorical_crossentropy")
    check_loss(keras.losses.serialize(keras.losses.SparseCategoricalCrossentropy()))
    check_metrics(sorted(compiling.MEAN_METRICS))
    check_metrics([keras.metrics.serialize(keras.metrics.SparseCategoricalAccuracy())])
    options = compiling.compile_options("adam", 0.01, "sparse_categorical_crossentropy", ["acc"])
    keras_setup.compiled(tiny_cnn(), options)
