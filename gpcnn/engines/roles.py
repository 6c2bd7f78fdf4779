"""The role that lets ordinary users run gpcnn without owning it (``<schema>_user``), and what
keeps its members apart.

``install`` (run by a superuser: plpython3u is untrusted) creates the role if missing, without
LOGIN, and grants it exactly what loading, fitting, evaluating, predicting and resuming need:
USAGE on gpcnn's schema, EXECUTE on its functions and aggregates (taken from PUBLIC), reading and
writing gpcnn's tables (not altering or dropping them; ``schema_version`` read only), and
TEMPORARY on the database (Greenplum picks keys in a temporary table) but not CREATE: loads go to
schemas that exist. Functions and tables stay owned by the installer, so members cannot replace or
drop them, and row-level security (``secure_rows``) lets each member see and change only the rows
they wrote; the installer, as the tables' owner, sees all. ``GRANT gpcnn_user TO alice`` gives a
login role all of it.
"""

from __future__ import annotations

import sqlalchemy as sa

from gpcnn.engines.backend import Backend
from gpcnn.engines.migrations import schema_exists
from gpcnn.engines.shapes import OWNED, OWNER_COLUMN, qualified


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
        f"REVOKE INSERT, UPDATE, DELETE ON {s}.{backend.quote('schema_version')} FROM {r}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s} TO {r}",
        # TEMPORARY only: a role that could create schemas could create one named after another
        # role, first in that role's default search path (loads go to existing schemas)
        f"REVOKE CREATE ON DATABASE {db} FROM {r}",
        f"GRANT TEMPORARY ON DATABASE {db} TO {r}",
    ]


def staging_schema(schema: str) -> str:
    """Where arrays given to ``fit`` are staged as image tables (``data.staging``)."""
    return f"{schema}_staging"


def ensure_role(conn: sa.Connection, backend: Backend) -> str:
    """Create the schema's user role if missing and grant it its privileges, and the staging
    schema its members load arrays into; returns the role's name."""
    role = role_name(backend.schema)
    if not role_exists(conn, role):
        conn.exec_driver_sql(f"CREATE ROLE {backend.quote(role)} NOLOGIN")
    database = conn.execute(sa.select(sa.func.current_database())).scalar_one()
    staging = staging_schema(backend.schema)
    backend.ensure_schema(conn, staging)
    for statement in grant_ddl(backend, role, database):
        conn.exec_driver_sql(statement)
    # the one schema members create tables in: staged arrays, each under a name of its own
    conn.exec_driver_sql(
        f"GRANT USAGE, CREATE ON SCHEMA {backend.quote(staging)} TO {backend.quote(role)}"
    )
    secure_rows(conn, backend, role)
    return role


OWN_ROWS = f"{OWNER_COLUMN} = CAST(CURRENT_USER AS text)"
# A model stored by a role the reader is a member of (with its rights): a team's models, stored
# after SET ROLE team, are every member's to load. Functions only, no catalog table: on Greenplum a
# policy that reads pg_roles runs on the coordinator as a segment of its own; a dropped owner's
# rows are nobody's (to_regrole: NULL).
MEMBERS_ROWS = f"pg_catalog.pg_has_role(pg_catalog.to_regrole({OWNER_COLUMN}), 'USAGE')"
SHARED = ("models", "model_weights")


def policies(backend: Backend, role: str) -> dict[tuple[str, str], str]:
    """(table, policy name) -> CREATE POLICY, for every table whose rows have an owner."""
    r = backend.quote(role)
    found = {}
    for table in OWNED:
        target = qualified(backend, table)
        found[table, "gpcnn_own_rows"] = (
            f"CREATE POLICY gpcnn_own_rows ON {target} TO {r} USING ({OWN_ROWS}) "
            f"WITH CHECK ({OWN_ROWS})"
        )
        if table in SHARED:
            found[table, "gpcnn_members_models"] = (
                f"CREATE POLICY gpcnn_members_models ON {target} FOR SELECT TO {r} "
                f"USING ({MEMBERS_ROWS})"
            )
    return found


def secure_rows(conn: sa.Connection, backend: Backend, role: str) -> None:
    """Row-level security on every owned table, with its policies: each made only where missing,
    so that an install beside running fits takes no lock it does not need."""
    present = set(
        conn.execute(
            sa.text(
                "SELECT CAST(tablename AS text), CAST(policyname AS text) FROM pg_catalog.pg_policies "
                "WHERE schemaname = :s"
            ),
            {"s": backend.schema},
        ).all()
    )
    for table in OWNED:
        secured = conn.execute(
            sa.text(
                "SELECT c.relrowsecurity FROM pg_catalog.pg_class c "
                "WHERE c.oid = pg_catalog.to_regclass(:t)"
            ),
            {"t": qualified(backend, table)},
        ).scalar()
        if not secured:
            conn.exec_driver_sql(
                f"ALTER TABLE {qualified(backend, table)} ENABLE ROW LEVEL SECURITY"
            )
    for key, statement in policies(backend, role).items():
        if key not in present:
            conn.exec_driver_sql(statement)


def drop_role(conn: sa.Connection, backend: Backend) -> bool:
    """Drop the schema's user role once gpcnn's objects are gone; a role that still has
    privileges elsewhere (another database, a table granted to it by hand) is kept. Returns
    whether it was dropped."""
    role = role_name(backend.schema)
    if not role_exists(conn, role):
        return False
    database = conn.execute(sa.select(sa.func.current_database())).scalar_one()
    try:
        with conn.begin_nested():
            conn.exec_driver_sql(
                f"REVOKE ALL ON DATABASE {backend.quote(database)} FROM {backend.quote(role)}"
            )
            staging = staging_schema(backend.schema)
            if schema_exists(conn, staging):
                conn.exec_driver_sql(
                    f"REVOKE ALL ON SCHEMA {backend.quote(staging)} FROM {backend.quote(role)}"
                )
            conn.exec_driver_sql(f"DROP ROLE {backend.quote(role)}")
    except sa.exc.DBAPIError:
        return False
    return True
