"""The engine layer: every statement gpcnn sends, one backend per engine behind one handle.

``connect`` gives the handle (``Database``); ``base``/``postgres``/``greenplum`` hold what differs per
engine (DDL, settings, dispatch of an iteration); ``catalog`` gpcnn's own tables and the statements on
them; ``functions`` the DDL of the in-database functions; ``sessions`` the segment sessions.
"""

from .base import DISPATCHES, Backend
from .database import Database, connect, release_sessions
from .greenplum import GreenplumBackend
from .postgres import PostgresBackend

__all__ = [
    "DISPATCHES",
    "Backend",
    "Database",
    "GreenplumBackend",
    "PostgresBackend",
    "connect",
    "release_sessions",
]
