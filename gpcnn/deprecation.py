"""Old names that keep working for one release, each with a DeprecationWarning naming the new one."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def database_argument(function: F) -> F:
    """Accept the old keyword ``db=`` for the argument now called ``database``, with a warning."""

    @functools.wraps(function)
    def accepting_db(*args: Any, **kwargs: Any) -> Any:
        if "db" in kwargs:
            if "database" in kwargs:
                raise TypeError(f"{function.__name__}() got both database= and its old name db=")
            warnings.warn(
                f"{function.__name__}(db=...) is deprecated and goes in the next release: "
                "pass database=...",
                DeprecationWarning,
                stacklevel=2,
            )
            kwargs["database"] = kwargs.pop("db")
        return function(*args, **kwargs)

    # functools.wraps gives a _Wrapped, not F: typing cannot say "F's signature, plus db=".
    return accepting_db  # type: ignore[return-value]


def moved_module(old: str, new: str, *homes: ModuleType) -> Callable[[str], Any]:
    """The ``__getattr__`` of a module whose names moved to ``new``: each name is looked up in
    ``homes`` (the modules that now hold them, those ``new`` re-exports), with a warning."""

    def __getattr__(name: str) -> Any:
        for home in homes:
            if hasattr(home, name) and not name.startswith("_"):
                warnings.warn(
                    f"{old} is deprecated and goes in the next release: use {new}.{name}",
                    DeprecationWarning,
                    stacklevel=2,
                )
                return getattr(home, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    return __getattr__
