"""The registry of engines: which ``Backend`` class serves a server, by name or detected from what
the server says it is; an engine module registers its backend on import, as a third party's would.
Installed packages add theirs through entry points (``load_plugins``: the group ``gpcnn.engines``
for engines, ``gpcnn.rules`` for merge rules), loaded once gpcnn's own are registered.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpcnn.engines.backend import Backend, ServerPlace

# One round trip: what the server says it is (gp_role exists on the Greenplum family only).
SERVER_FACTS_SQL = "SELECT version(), current_setting('gp_role', true)"


@dataclass(frozen=True)
class ServerFacts:
    """What a server says it is, for an engine's ``detects``.

    Parameters
    ----------
    version : str
        The server's ``version()``.
    gp_role : str or None
        Its ``gp_role`` setting (Greenplum and Cloudberry); None where the server has no such
        setting.
    """

    version: str
    gp_role: str | None


@dataclass(frozen=True)
class Engine:
    """A registered engine: its name, backend class and detector."""

    name: str
    backend_class: type[Backend]
    detects: Callable[[ServerFacts], bool] | None


_engines: dict[str, Engine] = {}


def register_engine(
    name: str,
    backend_class: type[Backend],
    detects: Callable[[ServerFacts], bool] | None = None,
) -> None:
    """Make ``backend_class`` the engine ``name``.

    Parameters
    ----------
    name : str
        What ``gpcnn.connect(engine_name=...)`` calls it; a name already registered is refused.
    backend_class : type[Backend]
        The engine's backend: a ``Backend`` subclass, with its statements and dispatch modes.
    detects : callable, optional
        Given the ``ServerFacts`` of a server, whether this engine serves it; engines are asked
        newest first. None: used only when named.
    """
    if name in _engines:
        raise ValueError(f"an engine named {name!r} is registered already")
    _engines[name] = Engine(name, backend_class, detects)


def unregister_engine(name: str) -> None:
    """Forget the engine ``name`` (handles already open keep their backend).

    Parameters
    ----------
    name : str
        A registered engine's name.

    Raises
    ------
    KeyError
        No engine of that name is registered.
    """
    if _engines.pop(name, None) is None:
        raise KeyError(f"no engine named {name!r} is registered")


def engine_names() -> list[str]:
    """The registered engines' names, oldest first."""
    return list(_engines)


def named_engine(name: str) -> type[Backend]:
    """The backend class registered as ``name``."""
    if name not in _engines:
        raise ValueError(f"engine_name={name!r}: choose one of {engine_names()}")
    return _engines[name].backend_class


def detected_engine(facts: ServerFacts) -> type[Backend]:
    """The backend class of the newest engine that detects the server of ``facts``."""
    for engine in reversed(_engines.values()):
        if engine.detects is not None and engine.detects(facts):
            return engine.backend_class
    raise RuntimeError(f"no registered engine serves {facts.version!r}: {engine_names()}")


def dispatch_names() -> tuple[str | None, ...]:
    """Every ``dispatch`` value some registered engine accepts (None: each engine's own)."""
    names = {name for e in _engines.values() for name in e.backend_class.dispatch_names()}
    return (None, *sorted(name for name in names if name is not None))


def error_place(text: str) -> tuple[ServerPlace | None, str]:
    """Which server process an error's ``text`` names, as the engine that wrote it says, and the
    text without that mention (errors do not say which engine they come from: each is asked)."""
    place = None
    for engine in _engines.values():
        found, text = engine.backend_class.error_place(text)
        place = place or found
    return place, text


# entry-point group -> the plug-ins loaded from it, by entry-point name
PLUGINS: dict[str, list[str]] = {}


def load_plugins(group: str) -> list[str]:
    """Import every module that an installed distribution names in the entry-point group
    ``group`` (``gpcnn.engines``, ``gpcnn.rules``): importing one registers what it defines, as
    importing gpcnn's own modules does. A plug-in that fails to load is skipped with a warning
    that names it; gpcnn goes on without it.

    Parameters
    ----------
    group : str
        The entry-point group, e.g. ``"gpcnn.engines"``.

    Returns
    -------
    list of str
        The names of the entry points loaded from ``group`` so far (``PLUGINS[group]``).
    """
    loaded = PLUGINS.setdefault(group, [])
    for entry in importlib.metadata.entry_points(group=group):
        if entry.name in loaded:
            continue
        try:
            entry.load()
        except Exception as e:  # a broken plug-in must not break gpcnn
            warnings.warn(
                f"gpcnn plug-in {entry.name!r} ({group}: {entry.value}) did not load: "
                f"{type(e).__name__}: {e}",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        loaded.append(entry.name)
    return loaded
