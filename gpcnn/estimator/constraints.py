"""What a parameter's value may be, declared rather than checked by hand: the constraint types of
``GreenplumCNN._parameter_constraints`` (scikit-learn's convention: each parameter names the
constraints one of which its value must meet) and ``validate``, which applies them and says, in
one message, what the parameter must be."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

NO_VALIDATION: Final = "no_validation"  # scikit-learn's word for a parameter checked elsewhere
NoValidation = Literal["no_validation"]


@dataclass(frozen=True)
class Integers:
    """An integer (Python's or numpy's, never a bool: ``True`` is no batch size) of at least
    ``low``."""

    low: int = 1
    words: str = "a positive integer"

    def holds(self, value: object) -> bool:
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
            return False
        return int(value) >= self.low


@dataclass(frozen=True)
class Booleans:
    """True or False (numpy's too), never a number."""

    words: str = "True or False"

    def holds(self, value: object) -> bool:
        return isinstance(value, bool | np.bool_)


@dataclass(frozen=True)
class Options:
    """One of the ``values`` (or of what ``values`` returns, for a registry that grows), never a
    bool standing for 0 or 1."""

    values: Collection | Callable[[], Collection]
    words: str | None = None

    def choices(self) -> Collection:
        return self.values() if callable(self.values) else self.values

    def holds(self, value: object) -> bool:
        return not isinstance(value, bool | np.bool_) and value in self.choices()

    def __str__(self) -> str:
        return self.words or f"one of {', '.join(map(str, self.choices()))}"


@dataclass(frozen=True)
class Lists:
    """A list (any sequence but a string) whose every item meets ``items``."""

    items: Integers | Booleans | Options
    words: str
    non_empty: bool = True

    def holds(self, value: object) -> bool:
        if not isinstance(value, Sequence) or isinstance(value, str | bytes):
            return False
        return (len(value) > 0 or not self.non_empty) and all(self.items.holds(v) for v in value)


Constraint = Integers | Booleans | Options | Lists


def described(constraint: Constraint) -> str:
    return str(constraint) if isinstance(constraint, Options) else constraint.words


def validate(constraints: Mapping[str, list[Constraint] | NoValidation], params: Mapping) -> None:
    """Refuse the first parameter whose value meets none of its constraints.

    Parameters
    ----------
    constraints : mapping
        Parameter name -> its constraints (a value must meet one), or ``NO_VALIDATION``.
    params : mapping
        The parameters' values (``get_params(deep=False)``).

    Raises
    ------
    ValueError
        ``"<name> must be <what> or <what>, got <value>"``.
    """
    for name, allowed in constraints.items():
        if allowed == NO_VALIDATION:
            continue
        value = params[name]
        if not any(c.holds(value) for c in allowed):
            what = " or ".join(described(c) for c in allowed)
            raise ValueError(f"{name} must be {what}, got {value!r}")
