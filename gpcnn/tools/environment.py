"""``check_environment``: can this database run gpcnn? Versions as seen from inside plpython3u."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import gpcnn.fit.rules  # noqa: F401  (its plug-ins, loaded on import, are reported)
from gpcnn.deprecation import database_argument
from gpcnn.engines import Database, DatabaseError, connect, engine_registry
from gpcnn.engines.install import InstallError, ensure_installed, ensure_plpython


class ServerPythonError(InstallError):
    """The server's Python lacks something gpcnn needs; the message names the fix."""


@dataclass
class EnvironmentReport:
    engine_kind: str
    dispatch: str
    server_version: str
    segments: int
    installed: str
    probes: list[dict] = field(default_factory=list)
    schema: str = "gpcnn"
    facts: dict = field(default_factory=dict)  # Backend.doctor_facts()
    plugins: dict = field(default_factory=dict)  # entry-point group -> plug-ins loaded from it

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        lines = [
            f"engine:   {self.engine_kind} ({self.server_version.split(' on ')[0]}), "
            f"dispatch: {self.dispatch}",
            f"segments: {self.segments} (default K for new image tables)",
            f"gpcnn:    {self.installed} installed",
        ]
        loaded = [f"{group} {', '.join(names)}" for group, names in self.plugins.items() if names]
        if loaded:
            lines.append(f"plug-ins: {'; '.join(loaded)}")
        for p in self.probes:
            where = "server" if p["segment"] < 0 else f"segment {p['segment']}"
            threads = p["tf_threads"] or "TensorFlow's default"
            lines.append(
                f"{where}: Python {p['python']}, TensorFlow {p['tensorflow']}, Keras {p['keras']}, "
                f"numpy {p['numpy']}, {p['cpu_count']} CPUs, TF threads: {threads}"
            )
        return "\n".join(lines + self.fact_lines())

    def fact_lines(self) -> list[str]:
        """The cluster (Greenplum), its memory limits and resources, autovacuum and what it
        means for gpcnn's tables."""
        f, lines = self.facts, []
        if "primaries" in f:
            probed = sum(p["segment"] >= 0 for p in self.probes)
            lines.append(
                f"cluster:  {f['primaries']} primaries on {f['hosts']} host(s), {f['mirrors']} "
                f"mirrors; TensorFlow imported on {probed} of {f['primaries']} primaries"
            )
            limits = sorted(set(f["vmem_protect_limit_mb"].values()))
            lines.append(
                f"memory:   gp_vmem_protect_limit {'/'.join(map(str, limits))} MB per primary; it "
                "counts the database's memory, not TensorFlow's inside plpython3u "
                "(docs/greenplum.md, 'What the cluster needs')"
            )
            manager = f["settings"].get("gp_resource_manager")
            bypass = ", bypassed: this role is a superuser" if f["superuser"] else ""
            resource = f["resource"] or {}
            name = resource.get("rsqname") or resource.get("groupname")
            limits = ", ".join(f"{k} {v}" for k, v in resource.items() if "limit" in k)
            lines.append(f"resources: resource {manager} {name} ({limits}){bypass}")
            lines += mirror_lines(f["mirroring"], f["settings"].get("gp_fts_probe_interval"))
        elif "replicas" in f:
            lines.append(replica_line(f["replicas"]))
        megabytes = sum(f.get("table_bytes", {}).values()) / 1e6
        autovacuum = f.get("settings", {}).get("autovacuum")
        if autovacuum == "off":
            lines.append(
                f"autovacuum: off: pruned checkpoints and used transfers stay on disk as dead rows "
                f"until VACUUM (VACUUM FULL {self.schema}.checkpoints, {self.schema}.transfers); "
                f"gpcnn's tables take {megabytes:.1f} MB now"
            )
        elif autovacuum:
            lines.append(
                f"autovacuum: {autovacuum}: the server reclaims pruned checkpoints and used "
                f"transfers; gpcnn's tables take {megabytes:.1f} MB now"
            )
        if f.get("jit_available"):
            lines.append(
                "jit:      available: gpcnn's functions refuse to start TensorFlow where it is on, "
                "but a member who turns it on after them can crash the server; on a shared server "
                "set jit_provider = 'none' (docs/guide/privileges.md, 'Threat model')"
            )
        return lines


def _stream(p: dict) -> str:
    """A mirror's WAL stream as its primary reports it."""
    r = p["replication"]
    if r is None or (isinstance(r, dict) and r["state"] is None):  # a mirror that is down
        return "no WAL stream"
    if isinstance(r, str):
        return f"WAL stream not read ({r})"
    lag = "" if r["lag_bytes"] is None else f", {r['lag_bytes']} bytes to replay"
    error = "" if r["sync_error"] in (None, "none") else f", error {r['sync_error']}"
    return f"WAL {r['state']} {r['sync_state']}{lag}{error}"


def mirror_lines(mirroring: list[dict], probe_interval: str | None) -> list[str]:
    """Greenplum's mirrors and standby, and what a fit does when a primary fails."""
    segments = [p for p in mirroring if p["content"] >= 0]
    mirrored = [p for p in segments if p["mirror"] is not None]
    problems = []
    for p in segments:
        where = f"content {p['content']}"
        if p["mirror"] is None:
            problems.append(f"{where}: no mirror")
        elif not (p["mirror_up"] and p["in_sync"]):
            state = "up" if p["mirror_up"] else "down"
            sync = "in sync" if p["in_sync"] else "not in sync"
            problems.append(f"{where}: mirror {p['mirror']} {state}, {sync} (gprecoverseg)")
        if not p["placed"]:
            problems.append(
                f"{where}: its mirror acts as primary at {p['primary']} (gprecoverseg -r)"
            )
    healthy = "all up and in sync" if mirrored and not problems else "; ".join(problems)
    lines = [
        f"mirrors:  {len(mirrored)} of {len(segments)} primaries mirrored: {healthy}; "
        + ", ".join(f"content {p['content']} {_stream(p)}" for p in mirrored)
        if mirrored
        else f"mirrors:  none: {healthy}"
    ]
    standby = next((p for p in mirroring if p["content"] < 0 and p["mirror"]), None)
    if standby is None:
        lines.append(
            "standby:  none: a coordinator that fails or restarts ends the running fit; it "
            "resumes with fit(table, resume=run_id) once the coordinator is back"
        )
    else:
        state = "up" if standby["mirror_up"] else "down"
        lines.append(
            f"standby:  coordinator standby {standby['mirror']} {state}, {_stream(standby)}"
        )
    probe = f"every {probe_interval}" if probe_interval else "at its interval"
    if mirrored:
        lines.append(
            "failover: a primary that fails ends the running fit with an error naming the failed "
            "segment (unless its statement finished first: the fit then goes on); the fault "
            f"prober checks {probe} and promotes the mirror; fit(table, resume=run_id) then "
            "continues from the last stored iteration to the model an uninterrupted fit gives "
            "(docs/greenplum.md, 'Failover')"
        )
    if len(mirrored) < len(segments):
        lines.append(
            "failover: none for a primary without a mirror: a fit fails until that primary is "
            "back (gpstart / gprecoverseg), then resumes with fit(table, resume=run_id)"
        )
    return lines


def replica_line(replicas: list[dict]) -> str:
    """PostgreSQL's streaming replicas, and what a fit does when the server fails."""
    if not replicas:
        return (
            "replicas: none streaming: a fit fails with the server and resumes once it is back "
            "(fit(table, resume=run_id))"
        )
    seen = ", ".join(f"{r['name'] or '?'} ({r['state']}, {r['sync_state']})" for r in replicas)
    return (
        f"replicas: {len(replicas)} streaming: {seen}; gpcnn does not follow a failover by "
        "itself: connect to the promoted server and resume there (fit(table, resume=run_id))"
    )


@database_argument
def check_environment(database: Database | str | None = None) -> EnvironmentReport:
    """Probe every segment's Python; raise one actionable error for each missing piece.

    What ``gpcnn doctor`` prints: the engine and its version, the segments, and the Python,
    TensorFlow, Keras and numpy versions that ``plpython3u`` sees on each segment.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None: ``$GPCNN_DATABASE_URL``, else the
        embedded PostgreSQL.

    Returns
    -------
    EnvironmentReport
        The facts; ``str()`` of it is the report, ``as_dict()`` its fields.

    Raises
    ------
    ServerPythonError
        When TensorFlow, Keras or numpy cannot be imported inside the server, with what to do.
    InstallError
        When ``plpython3u`` is missing or gpcnn cannot be installed.
    """
    db = connect(database)
    with db.begin() as conn:
        ensure_plpython(conn)
    installed = ensure_installed(db)
    backend = db.backend
    try:
        probes = backend.probe_segments()
    except DatabaseError as e:
        message = str(e.orig)
        if "No module named" in message:
            raise ServerPythonError(
                "TensorFlow cannot be imported inside the server's plpython3u "
                f"({message.strip().splitlines()[0]}). Put an environment with tensorflow, keras 3 "
                "and numpy, built with the Python that plpython3u embeds, on the server's Python "
                "path (the embedded cluster does this after `make setup`; on Greenplum install them "
                "for every segment host's Python, see docs/greenplum.md)."
            ) from e
        raise
    for p in probes:
        if not p["keras"].startswith("3."):
            raise ServerPythonError(
                f"the server imports Keras {p['keras']}; gpcnn needs Keras 3 (pip install "
                "'keras>=3' tensorflow>=2.16 into the server's Python environment)"
            )
    return EnvironmentReport(
        engine_kind=backend.kind,
        dispatch=backend.dispatch,
        server_version=backend.server_version(),
        segments=backend.default_segments(),
        installed=installed,
        probes=probes,
        schema=db.schema,
        facts=backend.doctor_facts(),
        plugins={group: list(names) for group, names in engine_registry.PLUGINS.items()},
    )
