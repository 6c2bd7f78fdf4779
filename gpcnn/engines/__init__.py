"""The engine layer: every statement gpcnn sends, one backend per engine behind one handle.

``connect`` gives the handle (``Database``); ``base``/``postgres``/``greenplum`` hold what differs per
engine (DDL, settings, dispatch of an iteration); ``transport`` how vectors travel in chunks (COPY,
transfers, result streams); ``catalog`` the statements on gpcnn's own tables (``Catalog``) and
``migrations`` their shape; ``functions`` the DDL of the in-database functions; ``sessions`` the
segment sessions.
No other layer imports the driver: ``DatabaseError`` (an error the server raised, with ``orig``)
and ``DriverError`` (any error of the driver layer) are what they catch.
"""

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError as DatabaseError
from sqlalchemy.exc import SQLAlchemyError as DriverError

from gpcnn.engines.base import DISPATCHES, Backend
from gpcnn.engines.database import Database, connect, release_sessions
from gpcnn.engines.greenplum import GreenplumBackend
from gpcnn.engines.postgres import PostgresBackend

__all__ = [
    "DISPATCHES",
    "Backend",
    "Connection",
    "Database",
    "DatabaseError",
    "DriverError",
    "GreenplumBackend",
    "PostgresBackend",
    "connect",
    "release_sessions",
]
