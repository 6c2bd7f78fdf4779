"""MADlib's ``compile_params`` and ``fit_params`` strings read without evaluating any code: each
value a Python literal, the optimizer a call of a Keras optimizer by name with literal arguments,
Keras 2's argument names translated to Keras 3's (``lr`` to ``learning_rate``; ``decay`` to the
learning-rate schedule that computes what Keras 2 did), and everything else refused with an error
that names the parameter.

    >>> compile_params("loss='categorical_crossentropy', optimizer='Adam(lr=0.01)', "
    ...                "metrics=['accuracy']").optimizer
    {'module': 'keras.optimizers', 'class_name': 'Adam', 'config': {'learning_rate': 0.01}}
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

# Keras 2's optimizers, by the names MADlib's examples write (any case), and Keras 3's classes
OPTIMIZERS = {
    name.lower(): name
    for name in ("SGD", "RMSprop", "Adagrad", "Adadelta", "Adam", "Adamax", "Nadam", "AdamW")
}
RENAMED = {"lr": "learning_rate"}  # Keras 2's argument names that Keras 3 renamed
COMPILE_KEYS = ("loss", "optimizer", "metrics")
FIT_KEYS = ("batch_size", "epochs", "verbose", "shuffle")
MAX_LENGTH = 10_000  # characters of a parameter string: longer is no one's compile_params


class ParameterError(ValueError):
    """A ``compile_params`` or ``fit_params`` string gpcnn does not accept; the message names
    the parameter and the part refused."""


@dataclass(frozen=True)
class CompileParams:
    """What ``compile_params`` says: the loss, Keras 3's serialized optimizer, the metrics."""

    loss: str
    optimizer: dict
    metrics: tuple[str, ...] = ()


@dataclass(frozen=True)
class FitParams:
    """What ``fit_params`` says: the mini-batch size and the epochs each segment trains per
    iteration (MADlib's ``epochs``), as gpcnn's ``batch_size`` and ``local_epochs``."""

    batch_size: int = 32
    local_epochs: int = 1
    shuffle: bool = True
    ignored: tuple[str, ...] = field(default=())  # accepted, no effect here (``verbose``)


def compile_params(text: str | None) -> CompileParams:
    """Read MADlib's ``compile_params`` (``loss=..., optimizer='SGD(lr=0.01)', metrics=[...]``).

    Parameters
    ----------
    text : str
        The argument as a MADlib call passes it.

    Returns
    -------
    CompileParams

    Raises
    ------
    ParameterError
        Anything but ``loss``, ``optimizer`` and ``metrics`` with literal values, a loss that is
        not a name (a custom function needs MADlib's ``object_table``, which gpcnn refuses), an
        optimizer that is not a Keras optimizer called with literal arguments.
    """
    values = _keywords("compile_params", text, COMPILE_KEYS)
    for required in ("loss", "optimizer"):
        if required not in values:
            raise ParameterError(f"compile_params: give {required}=... (MADlib requires it)")
    loss = values["loss"]
    if not isinstance(loss, str) or not loss.isidentifier():
        raise ParameterError(
            f"compile_params: loss={loss!r} is not the name of a Keras loss (custom losses from "
            "an object_table are not supported)"
        )
    metrics = values.get("metrics", [])
    if not isinstance(metrics, list | tuple) or not all(isinstance(m, str) for m in metrics):
        raise ParameterError(f"compile_params: metrics={metrics!r} is not a list of metric names")
    optimizer = values["optimizer"]
    if not isinstance(optimizer, str):
        raise ParameterError(
            f"compile_params: optimizer={optimizer!r} is not an optimizer call such as "
            "'SGD(lr=0.01, momentum=0.9)' or a name such as 'adam'"
        )
    return CompileParams(loss, optimizer_config(optimizer), tuple(metrics))


def fit_params(text: str | None) -> FitParams:
    """Read MADlib's ``fit_params`` (``batch_size=32, epochs=1``).

    Parameters
    ----------
    text : str or None
        The argument as a MADlib call passes it; None or empty: Keras's defaults.

    Returns
    -------
    FitParams

    Raises
    ------
    ParameterError
        Anything but ``batch_size``, ``epochs``, ``verbose`` and ``shuffle`` with literal values
        of their types.
    """
    values = _keywords("fit_params", text, FIT_KEYS)
    for name in ("batch_size", "epochs"):
        value = values.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ParameterError(f"fit_params: {name}={value!r} must be a positive integer")
    if not isinstance(values.get("shuffle", True), bool):
        raise ParameterError(f"fit_params: shuffle={values['shuffle']!r} must be True or False")
    return FitParams(
        batch_size=values.get("batch_size", 32),
        local_epochs=values.get("epochs", 1),
        shuffle=values.get("shuffle", True),
        ignored=tuple(k for k in values if k == "verbose"),
    )


def optimizer_config(text: str) -> dict:
    """Keras 3's serialized optimizer for an optimizer as MADlib's ``compile_params`` writes it:
    ``'SGD(lr=0.01, momentum=0.9, nesterov=True)'``, ``'optimizers.Adam()'``, ``'adam'``."""
    where = f"compile_params: optimizer={text!r}"
    node = _expression(where, text)
    if isinstance(node, ast.Name | ast.Attribute):
        name, arguments = _dotted(where, node), {}
    elif isinstance(node, ast.Call) and not node.args:
        name, arguments = _dotted(where, node.func), _literal_keywords(where, node.keywords)
    else:
        raise ParameterError(
            f"{where} is not an optimizer call with keyword arguments, such as "
            "'SGD(lr=0.01, momentum=0.9)'"
        )
    if name.lower() not in OPTIMIZERS:
        raise ParameterError(f"{where}: {name} is not one of {', '.join(OPTIMIZERS.values())}")
    config = {RENAMED.get(k, k): v for k, v in arguments.items()}
    if "decay" in config:  # Keras 2: lr / (1 + decay * iterations), a schedule in Keras 3
        config["learning_rate"] = _inverse_time_decay(
            where, config.get("learning_rate", 0.01), config.pop("decay")
        )
    return {"module": "keras.optimizers", "class_name": OPTIMIZERS[name.lower()], "config": config}


def _inverse_time_decay(where: str, rate: Any, decay: Any) -> Any:
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (rate, decay)):
        raise ParameterError(f"{where}: lr and decay must be numbers")
    if decay == 0:
        return rate
    return {
        "module": "keras.optimizers.schedules",
        "class_name": "InverseTimeDecay",
        "config": {"initial_learning_rate": rate, "decay_steps": 1, "decay_rate": decay},
    }


def _keywords(parameter: str, text: str | None, allowed: tuple[str, ...]) -> dict[str, Any]:
    """``key=literal, ...`` of a MADlib parameter string, each key among ``allowed``."""
    if text is None or not text.strip():
        return {}
    node = _expression(parameter, f"f({text})")
    if not isinstance(node, ast.Call) or node.args:
        raise ParameterError(f"{parameter}: write key=value pairs separated by commas")
    values = _literal_keywords(parameter, node.keywords)
    for key in values:
        if key not in allowed:
            raise ParameterError(
                f"{parameter}: {key} is not supported here; give {', '.join(allowed)}"
            )
    return values


def _expression(where: str, text: str) -> ast.expr:
    if len(text) > MAX_LENGTH:
        raise ParameterError(f"{where}: longer than {MAX_LENGTH} characters")
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        raise ParameterError(f"{where}: not readable ({error.msg})") from None
    except (RecursionError, MemoryError):
        raise ParameterError(f"{where}: nested too deeply to read") from None


def _literal_keywords(where: str, keywords: list[ast.keyword]) -> dict[str, Any]:
    found = {}
    for keyword in keywords:
        if keyword.arg is None:
            raise ParameterError(f"{where}: ** is not allowed")
        try:
            found[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            raise ParameterError(
                f"{where}: {keyword.arg}={ast.unparse(keyword.value)} is not a literal value "
                "(a number, a string, True/False/None, or a list of them); nothing is evaluated"
            ) from None
    return found


def _dotted(where: str, node: ast.expr) -> str:
    """The last part of ``keras.optimizers.SGD``-like names: the optimizer's class."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name | ast.Attribute):
        prefix = ast.unparse(node.value)
        if prefix in ("optimizers", "keras.optimizers", "tf.keras.optimizers"):
            return node.attr
    raise ParameterError(f"{where}: {ast.unparse(node)} is not a Keras optimizer")
