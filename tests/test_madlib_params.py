"""MADlib's ``compile_params`` and ``fit_params`` strings: read as MADlib's documentation writes
them, Keras 2's names translated, and code refused without being run."""

from __future__ import annotations

import pytest

from gpcnn.kernel import config_check
from gpcnn.kernel.keras_setup import keras_module
from gpcnn.madlib.params import (
    OPTIMIZERS,
    CompileParams,
    FitParams,
    ParameterError,
    compile_params,
    fit_params,
)


def test_madlibs_documented_compile_params_are_read():
    found = compile_params(
        """loss='categorical_crossentropy', optimizer='adam', metrics=['accuracy']"""
    )
    assert found == CompileParams(
        "categorical_crossentropy",
        {"module": "keras.optimizers", "class_name": "Adam", "config": {}},
        ("accuracy",),
    )
    sgd = compile_params(
        "loss='categorical_crossentropy', optimizer='SGD(lr=0.01, momentum=0.9, nesterov=True)', "
        "metrics=['top_k_categorical_accuracy']"
    )
    assert sgd.optimizer == {
        "module": "keras.optimizers",
        "class_name": "SGD",
        "config": {"learning_rate": 0.01, "momentum": 0.9, "nesterov": True},
    }
    assert compile_params("loss='mse', optimizer='optimizers.RMSprop(lr=0.001)'").metrics == ()


def test_keras_2s_decay_becomes_the_schedule_that_computes_the_same_rates():
    found = compile_params("loss='mse', optimizer='SGD(lr=0.1, decay=0.5)'")
    config_check.check_optimizer(found.optimizer)
    schedule = keras_module().optimizers.deserialize(found.optimizer)._learning_rate
    for step in (0, 1, 10):
        assert float(schedule(step)) == pytest.approx(0.1 / (1 + 0.5 * step))


@pytest.mark.parametrize("name", sorted(OPTIMIZERS.values()))
def test_every_optimizer_it_reads_is_one_keras_3_builds_and_gpcnn_accepts(name):
    found = compile_params(f"loss='mse', optimizer='{name}(lr=0.02)'")
    config_check.check_optimizer(found.optimizer)
    built = keras_module().optimizers.deserialize(found.optimizer)
    assert type(built).__name__ == name and float(built.learning_rate) == pytest.approx(0.02)


def test_fit_params_give_the_batch_size_and_the_epochs_per_iteration():
    assert fit_params("batch_size=16, epochs=2, verbose=0") == FitParams(16, 2, True, ("verbose",))
    assert fit_params(None) == fit_params("") == FitParams()
    assert fit_params(" batch_size = 8 ").batch_size == 8


CODE = '__import__("os").system("touch /tmp/gpcnn-madlib-pwned")'


@pytest.mark.parametrize(
    ("function", "text", "named"),
    [
        (compile_params, f"loss='mse', optimizer={CODE}", "optimizer"),
        (compile_params, f"loss='mse', optimizer='{CODE}'", "optimizer"),
        (compile_params, f"loss='mse', optimizer='SGD(lr={CODE})'", "lr="),
        (compile_params, f"loss={CODE}, optimizer='sgd'", "loss="),
        (compile_params, f"loss='mse', optimizer='sgd', metrics=[{CODE}]", "metrics="),
        (compile_params, "loss='mse', optimizer='os.system(\"ls\")'", "os.system"),
        (compile_params, "loss='mse', optimizer=(lambda: 1)()", "optimizer"),
        (compile_params, "loss='mse', optimizer='SGD'.__class__", "optimizer"),
        (compile_params, "loss='mse', optimizer='sgd', **{'a': 1}", "**"),
        (compile_params, "loss='lambda y, p: p', optimizer='sgd'", "not the name of a Keras loss"),
        (fit_params, f"batch_size={CODE}", "batch_size="),
        (fit_params, f"epochs=1, callbacks=[{CODE}]", "callbacks"),
        (fit_params, "batch_size=2**99999", "batch_size="),
        (fit_params, "batch_size=" + "[" * 5000 + "]" * 5000, "fit_params"),
    ],
)
def test_code_in_a_parameter_string_is_refused_naming_the_parameter_and_never_run(
    function, text, named, tmp_path
):
    marker = "/tmp/gpcnn-madlib-pwned"
    with pytest.raises(ParameterError, match="_params") as refused:
        function(text)
    assert named in str(refused.value)
    assert not __import__("os").path.exists(marker)


@pytest.mark.parametrize(
    ("function", "text", "message"),
    [
        (compile_params, "optimizer='sgd'", "give loss="),
        (compile_params, "loss='mse'", "give optimizer="),
        (compile_params, "loss='mse', optimizer='adamm'", "adamm is not one of SGD, RMSprop"),
        (compile_params, "loss='mse', optimizer='sgd', loss_weights=[1]", "loss_weights is not"),
        (compile_params, "loss='mse', optimizer='sgd', metrics='accuracy'", "not a list"),
        (compile_params, "loss='mse', optimizer='SGD(0.1)'", "keyword arguments"),
        (compile_params, "loss='mse' optimizer='sgd'", "not readable"),
        (fit_params, "batch_size=0", "batch_size=0 must be a positive integer"),
        (fit_params, "epochs=1.5", "epochs=1.5 must be a positive integer"),
        (fit_params, "shuffle='yes'", "must be True or False"),
        (fit_params, "validation_split=0.1", "give batch_size, epochs, verbose, shuffle"),
        (fit_params, "1, 2", "key=value pairs"),
    ],
)
def test_a_parameter_it_does_not_take_is_refused_with_what_it_takes(function, text, message):
    with pytest.raises(ParameterError, match="_params") as refused:
        function(text)
    assert message in str(refused.value)
