"""The engine layer: every statement gpcnn sends, one backend per engine behind one handle.

``connect`` gives the handle (``Database``), whose backend comes from the registry of engines
(``engine_registry``: ``register_engine``, detected from the server or named; other packages' engines
come through the entry-point group ``gpcnn.engines``). An engine is one module
(``postgres``, ``greenplum``) with its statements (a ``compiler.Compiler``: strings only), its
``backend.Backend`` (runs them) and its dispatch modes (``dispatch``: how an iteration reaches the
segments, as objects). How vectors travel: ``copying`` (binary COPY), ``transfers`` (the vectors
a statement joins), ``results`` (decoding what comes back), ``streaming`` (the client's merge of
K result streams). ``catalog`` holds the statements on gpcnn's own tables (``Catalog``) and
``migrations`` their shape; ``functions`` the DDL of the in-database functions; ``sessions`` the
segment sessions. A module named ``*_sql`` holds the statements of the module of the same name in
a layer above (``packing_sql`` for ``data.packing``, ...).
No other layer imports the driver: ``DatabaseError`` (an error the server raised, with ``orig``)
and ``DriverError`` (any error of the driver layer) are what they catch; ``error_place`` says
which server process an error names.
"""

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError as DatabaseError
from sqlalchemy.exc import SQLAlchemyError as DriverError

from gpcnn.engines.backend import Backend, ServerPlace
from gpcnn.engines.compiler import Compiler
from gpcnn.engines.database import Database, UnreachableError, connect, release_sessions
from gpcnn.engines.dispatch import Dispatch, OneStatement, SessionPerSegment, TrainingCall
from gpcnn.engines.engine_registry import (
    ServerFacts,
    dispatch_names,
    error_place,
    load_plugins,
    register_engine,
    unregister_engine,
)
from gpcnn.engines.greenplum import GreenplumBackend, GreenplumCompiler
from gpcnn.engines.postgres import PostgresBackend, PostgresCompiler

ENGINE_PLUGINS = "gpcnn.engines"  # the entry-point group of engines from other packages
load_plugins(ENGINE_PLUGINS)  # after the built-in engines, which a plug-in's may extend

__all__ = [
    "ENGINE_PLUGINS",
    "Backend",
    "Compiler",
    "Connection",
    "Database",
    "DatabaseError",
    "Dispatch",
    "DriverError",
    "GreenplumBackend",
    "GreenplumCompiler",
    "OneStatement",
    "PostgresBackend",
    "PostgresCompiler",
    "ServerFacts",
    "ServerPlace",
    "SessionPerSegment",
    "TrainingCall",
    "UnreachableError",
    "connect",
    "dispatch_names",
    "error_place",
    "load_plugins",
    "register_engine",
    "release_sessions",
    "unregister_engine",
]
