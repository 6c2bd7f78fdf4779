"""The role that lets ordinary users run gpcnn without owning it: ``<schema>_user``.

``install`` (run by a superuser: plpython3u is untrusted) creates the role if missing, without
LOGIN, and grants it exactly what loading, fitting, evaluating, predicting and resuming need:
USAGE on gpcnn's schema, EXECUTE on its functions and aggregates (taken from PUBLIC), reading and
writing gpcnn's tables (not altering or dropping them), and CREATE and TEMPORARY on the database
(a load creates its table's schema; Greenplum picks keys in a temporary table). Functions stay
owned by the installer, so members of the role cannot replace or drop them.
``GRANT gpcnn_user TO alice`` gives a login role all of it.
"""

from __future__ import annotations

import sqlalchemy as sa

from gpcnn.engines.base import Backend


def role_name(schema: str) -> str:
    return f"{schema}_user"


def is_superuser(conn: sa.Connection) -> bool:
    found = conn.execute(sa.text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"))
    return bool(found.scalar())


def role_exists(conn: sa.Connection, role: str) -> bool:
    found = conn.execute(sa.text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role})
    return found.scalar() is not None


def grant_ddl(backend: Backend, role: str, database: str) -> list[str]:
    """The grants of ``role`` on gpcnn's objects in the backend's schema (run after they exist:
    ``ALL ... IN SCHEMA`` covers the objects present)."""
    s, r, db = backend.qschema, backend.quote(role), backend.quote(database)
    return [
        f"GRANT USAGE ON SCHEMA {s} TO {r}",
        f"REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA {s} FROM PUBLIC",
        f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {s} TO {r}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {r}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s} TO {r}",
        f"GRANT CREATE, TEMPORARY ON DATABASE {db} TO {r}",
    ]


def ensure_role(conn: sa.Connection, backend: Backend) -> str:
    """Create the schema's user role if missing and grant it its privileges; returns its name."""
    role = role_name(backend.schema)
    if not role_exists(conn, role):
        conn.exec_driver_sql(f"CREATE ROLE {backend.quote(role)} NOLOGIN")
    database = conn.execute(sa.select(sa.func.current_database())).scalar()
    for statement in grant_ddl(backend, role, database):
        conn.exec_driver_sql(statement)
    return role


def drop_role(conn: sa.Connection, backend: Backend) -> bool:
    """Drop the schema's user role once gpcnn's objects are gone; a role that still has
    privileges elsewhere (another database, a table granted to it by hand) is kept. Returns
    whether it was dropped."""
    role = role_name(backend.schema)
    if not role_exists(conn, role):
        return False
    database = conn.execute(sa.select(sa.func.current_database())).scalar()
    try:
        with conn.begin_nested():
            conn.exec_driver_sql(
                f"REVOKE ALL ON DATABASE {backend.quote(database)} FROM {backend.quote(role)}"
            )
            conn.exec_driver_sql(f"DROP ROLE {backend.quote(role)}")
    except sa.exc.DBAPIError:
        return False
    return True
