"""The Greenplum 7 / Apache Cloudberry engine: DISTRIBUTED BY (__dist_key__), one key per primary
segment; its statements (``GreenplumCompiler``), its backend, the segment its errors name, and its
registration.
"""

from __future__ import annotations

import json
import re
from typing import ClassVar

import sqlalchemy as sa

from gpcnn.engines.backend import Backend, ServerPlace
from gpcnn.engines.compiler import Compiler, text_safe
from gpcnn.engines.dispatch import OneStatement
from gpcnn.engines.engine_registry import ServerFacts, register_engine

# The suffix a Greenplum error's message ends with: the segment, its host and port, the process;
# without the slice where no query runs (a session ended when its segment's postmaster died).
GREENPLUM_SEGMENT = re.compile(r"\(seg(-?\d+)(?: slice\d+)? ([^\s:()]+):(\d+) pid=(\d+)\)")


class GreenplumCompiler(Compiler):
    """Greenplum's statements: distribution clauses, and its catalog's queries."""

    kind = "greenplum"

    # Greenplum's catalog: the primaries (content -1 is the coordinator), and the most per host.
    PRIMARIES_SQL = (
        "SELECT count(*) FROM gp_segment_configuration WHERE role = 'p' AND content >= 0"
    )
    BUSIEST_HOST_SQL = (
        "SELECT max(c) FROM (SELECT count(*) AS c FROM gp_segment_configuration "
        "WHERE role = 'p' AND content >= 0 GROUP BY hostname) h"
    )

    def probe_sql(self) -> str:
        """The probe once on every primary: gp_dist_random reads gp_id's copy on each segment."""
        return (
            f"SELECT gp_segment_id, {text_safe(self.qschema)}.probe(:threads) "
            "FROM gp_dist_random('gp_id') ORDER BY 1"
        )

    # primaries and the hosts they run on
    TOPOLOGY_SQL = (
        "SELECT count(*) FILTER (WHERE role = 'p' AND content >= 0), "
        "count(DISTINCT hostname) FILTER (WHERE role = 'p' AND content >= 0) "
        "FROM gp_segment_configuration"
    )
    # Each content's acting primary (-1: the coordinator) and its mirror (the standby), if any:
    # whether the primary runs where it was placed, the mirror's status (u/d) and mode (s/n).
    MIRRORING_SQL = (
        "SELECT p.content, p.hostname, p.port, p.role = p.preferred_role, "
        "m.hostname, m.port, m.status, m.mode "
        "FROM gp_segment_configuration p LEFT JOIN gp_segment_configuration m "
        "ON m.content = p.content AND m.role = 'm' WHERE p.role = 'p' ORDER BY p.content"
    )
    # Each mirror's WAL stream as its primary sees it (a query on every primary: read apart).
    REPLICATION_SQL = (
        "SELECT gp_segment_id, state, sync_state, sync_error, "
        "pg_wal_lsn_diff(sent_lsn, replay_lsn)::bigint FROM gp_stat_replication ORDER BY 1"
    )
    # each primary's own memory limit (MB): the coordinator's setting need not be theirs
    VMEM_PER_PRIMARY_SQL = (
        "SELECT gp_segment_id, current_setting('gp_vmem_protect_limit') "
        "FROM gp_dist_random('gp_id') ORDER BY 1"
    )
    # this role's resource queue or group, as the engine's own view describes it
    RESOURCE_SQL: ClassVar[dict[str, str]] = {
        "queue": "SELECT row_to_json(q)::text FROM pg_roles r JOIN gp_toolkit.gp_resqueue_status q "
        "ON q.queueid = r.rolresqueue WHERE r.rolname = current_user",
        "group": "SELECT row_to_json(g)::text FROM pg_roles r JOIN gp_toolkit.gp_resgroup_config g "
        "ON g.groupid = r.rolresgroup WHERE r.rolname = current_user",
    }

    def distribution(self, *columns: str) -> str:
        """By the given columns; a table without any (small, read everywhere) on every segment."""
        if not columns:
            return " DISTRIBUTED REPLICATED"
        return f" DISTRIBUTED BY ({', '.join(columns)})"

    def replicated(self) -> str:
        return " DISTRIBUTED REPLICATED"

    KEY_CANDIDATES_PER_SEGMENT = 64

    def key_candidates_sql(self, segments_in_cluster: int) -> list[str]:
        """Load candidate keys into a table distributed like image tables, to see where each lands."""
        count = self.KEY_CANDIDATES_PER_SEGMENT * segments_in_cluster
        return [
            "CREATE TEMP TABLE gpcnn_key_candidates (__dist_key__ integer) "
            "DISTRIBUTED BY (__dist_key__)",
            f"INSERT INTO gpcnn_key_candidates SELECT generate_series(0, {count - 1})",
            "SELECT gp_segment_id, array_agg(__dist_key__ ORDER BY __dist_key__) "
            "FROM gpcnn_key_candidates GROUP BY gp_segment_id ORDER BY gp_segment_id",
            "DROP TABLE gpcnn_key_candidates",
        ]

    def image_table_ddl(self, table, keys: list[int]) -> list[str]:
        name = table.sql(self)
        return [
            f"CREATE TABLE {name} ({self.IMAGE_COLUMNS}) DISTRIBUTED BY (__dist_key__)",
            f"ALTER TABLE {name} {self.EXTERNAL_STORAGE}",
        ]


class GreenplumBackend(GreenplumCompiler, Backend):
    """A Greenplum-family server: one statement reaches every segment (a session per segment is
    PostgreSQL's way)."""

    dispatch_modes = (OneStatement,)

    # The fault prober's settings: how soon a failed primary's mirror takes over.
    DOCTOR_SETTINGS = (
        *Backend.DOCTOR_SETTINGS,
        "gp_resource_manager",
        "gp_vmem_protect_limit",
        "gp_fts_probe_interval",
        "gp_fts_probe_timeout",
        "gp_fts_probe_retries",
    )

    @staticmethod
    def doctor_lines(f: dict, probes: list[dict]) -> list[str]:
        """The cluster, its memory limits, resources and mirrors, in ``gpcnn doctor``'s words."""
        if "primaries" not in f:  # facts of another engine
            return []
        lines = []
        probed = sum(p["segment"] >= 0 for p in probes)
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
        resource_limits = ", ".join(f"{k} {v}" for k, v in resource.items() if "limit" in k)
        lines.append(f"resources: resource {manager} {name} ({resource_limits}){bypass}")
        lines += mirror_lines(f["mirroring"], f["settings"].get("gp_fts_probe_interval"))
        return lines

    def doctor_facts(self) -> dict:
        """Besides the settings: primaries, hosts, each one's mirror and its state
        (``mirroring``), each primary's vmem limit and this role's resource queue or group."""
        facts = super().doctor_facts()
        with self.engine.connect() as conn:
            primaries, hosts = conn.exec_driver_sql(self.TOPOLOGY_SQL).one()
            pairs = conn.exec_driver_sql(self.MIRRORING_SQL).all()
            vmem = conn.exec_driver_sql(self.VMEM_PER_PRIMARY_SQL).all()
            manager = facts["settings"].get("gp_resource_manager")
            resource = None
            if manager in self.RESOURCE_SQL:
                resource = conn.exec_driver_sql(self.RESOURCE_SQL[manager]).scalar()
            superuser = conn.execute(
                sa.text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            ).scalar()
        mirroring = mirror_states(pairs, self._replication())
        facts.update(
            primaries=int(primaries),
            hosts=int(hosts),
            mirrors=sum(p["content"] >= 0 and p["mirror"] is not None for p in mirroring),
            mirroring=mirroring,
            vmem_protect_limit_mb={int(seg): int(mb) for seg, mb in vmem},
            resource=json.loads(resource) if resource else None,
            superuser=bool(superuser),
        )
        return facts

    def _replication(self) -> dict[int, tuple] | str:
        """content -> (state, sync_state, sync_error, bytes not replayed yet), or why it could
        not be read: it asks every primary, and one that just failed does not answer."""
        try:
            with self.engine.connect() as conn:
                rows = conn.exec_driver_sql(self.REPLICATION_SQL).all()
        except sa.exc.DBAPIError as e:
            return str(e.orig).strip().splitlines()[0]
        return {int(row[0]): tuple(row[1:]) for row in rows}

    def default_segments(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.text(self.PRIMARIES_SQL)).scalar_one())

    def probe_segments(self, threads: int | None = None) -> list[dict]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.text(self.probe_sql()), {"threads": threads}).all()
        return self._decode_probes(rows)

    def choose_keys(self, conn: sa.Connection, segments: int) -> list[int]:
        """One key per primary segment, each hashing to a different one; with more keys than
        segments, the next candidates of each segment in turn (keys then share segments)."""
        create, fill, select, drop = self.key_candidates_sql(self.default_segments())
        conn.exec_driver_sql(create)
        conn.exec_driver_sql(fill)
        per_segment = [list(keys) for _, keys in conn.exec_driver_sql(select).all()]
        conn.exec_driver_sql(drop)
        return spread_keys(per_segment, segments)

    # SD/GD (the model cache) live only while the session's segment processes do: keep them.
    # The trained vectors cross the interconnect twice (redistributed by chunk to the segments
    # that merge them, then gathered): 64 packets in flight per connection, not 2 to send and 4
    # to receive, made that 6-20x faster on a live cluster (docs/greenplum-results.md, "Profile
    # of the training statement").
    session_settings = (
        "SET gp_vmem_idle_resource_timeout = 0",
        "SET gp_interconnect_queue_depth = 64",
        "SET gp_interconnect_snd_queue_depth = 64",
    )
    # Packets of 64 KB, not 8 KB: an eighth of the packets (and acknowledgements) per vector. Only
    # a connection's start can set it; the segment processes inherit it (docs/greenplum.md).
    session_options = "-c gp_max_packet_size=65000"

    def default_threads(self, segments: int) -> int:
        """The host's CPUs shared by the segments on it (the busiest host decides)."""
        with self.engine.connect() as conn:
            per_host = conn.execute(sa.text(self.BUSIEST_HOST_SQL)).scalar_one()
        keys_per_host = max(1, round(segments * int(per_host) / self.default_segments()))
        cpus = int(self.probe_segments()[0]["cpu_count"] or 1)
        return max(1, cpus // keys_per_host)

    @staticmethod
    def error_place(text: str) -> tuple[ServerPlace | None, str]:
        """The segment named by the suffix Greenplum adds to an error's message, and the text
        without it."""
        found = GREENPLUM_SEGMENT.search(text)
        place = None
        if found:
            content, host, port, pid = found.groups()
            place = ServerPlace("Greenplum", int(content), host, int(port), int(pid))
        return place, GREENPLUM_SEGMENT.sub("", text)


def is_greenplum(facts: ServerFacts) -> bool:
    """A server with Greenplum's ``gp_role`` setting (Greenplum, Cloudberry)."""
    return bool(facts.gp_role)


register_engine("greenplum", GreenplumBackend, detects=is_greenplum)


def mirror_states(pairs, replication: dict[int, tuple] | str) -> list[dict]:
    """The rows of ``MIRRORING_SQL`` with ``_replication``'s, one dict per content: the acting
    primary (``host:port``), whether it runs where it was placed (False after a failover, until
    ``gprecoverseg -r``), its mirror or None, whether that is up and in sync, and its WAL stream
    (None where no primary reports one; a string where it could not be read)."""
    states = []
    for content, host, port, placed, m_host, m_port, m_status, m_mode in pairs:
        stream: str | tuple | dict | None
        stream = replication if isinstance(replication, str) else replication.get(content)
        if isinstance(stream, tuple):
            state, sync_state, sync_error, lag = stream
            stream = dict(
                state=state,
                sync_state=sync_state,
                sync_error=sync_error,
                lag_bytes=None if lag is None else int(lag),
            )
        states.append(
            dict(
                content=int(content),
                primary=f"{host}:{port}",
                placed=bool(placed),
                mirror=None if m_host is None else f"{m_host}:{m_port}",
                mirror_up=None if m_host is None else m_status == "u",
                in_sync=None if m_host is None else m_mode == "s",
                replication=stream,
            )
        )
    return states


def spread_keys(per_segment: list[list[int]], segments: int) -> list[int]:
    """Round-robin over the segments' candidate keys: the first len(per_segment) keys all land on
    different segments."""
    keys: list[int] = []
    for rank in range(max(map(len, per_segment))):
        for candidates in per_segment:
            if rank < len(candidates) and len(keys) < segments:
                keys.append(candidates[rank])
    if len(keys) < segments:
        raise ValueError(f"found only {len(keys)} distinct keys for {segments} segments")
    return keys


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
