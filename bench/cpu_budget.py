"""Where an iteration's CPU goes (issue 26, item 1): the CPU seconds each server process and this
client spend per steady iteration of ``bench/overhead.py``'s dense model, against its wall time.

    .venv/bin/python bench/cpu_budget.py [--size 25] [--iterations 12] [--out REPORT]
    .venv/bin/python bench/cpu_budget.py --size 25 --iterations 9 --wal-rounds 5 [--out REPORT]
    .venv/bin/python bench/cpu_budget.py --size 1 --database postgresql://gpadmin@127.0.0.1:7000/gpcnn

One fit (K = 2, the overhead benchmark's estimator) on the embedded PostgreSQL, or on the server
``--database`` names when it runs on this machine (a one-host Greenplum: its coordinator and
segment processes are ``postgres`` processes too); at the start and end of every iteration the
user + system CPU of every ``postgres`` process (``/proc/PID/stat``) and of this process (all its
threads) is read. Iterations from the fourth on are steady (the first
loads TF and builds the model, the second and third start the retention's background delete).
Per iteration: the wall seconds, the client's CPU, each server process's CPU labelled by what its
title showed while the iteration ran (sampled every 50 ms: ``COPY`` for the segment sessions and
the checkpoint's writer, ``DELETE`` and ``VACUUM`` for the retention's, helpers by name), and the
total over all of them (a process that ends within an iteration is missed; gpcnn's sessions are
pooled, so none did in the runs docs/benchmarks.md quotes). The total divided by the machine's
CPUs is the floor of an iteration's wall time on it: an iteration cannot end sooner than the
cores can do its work.

``--wal-rounds N``: what the checkpoints' write-ahead log costs. N interleaved rounds of two fits,
``checkpoints`` as gpcnn ships it (logged) and the same table set UNLOGGED for the second fit (set
back to logged after it, and on any error): the difference is the WAL's share of the iteration. An
experiment, not an option of gpcnn's: an unlogged table is emptied by the crash recovery that any
killed server process starts, which would lose every run's checkpoints (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import threading
import time
from pathlib import Path

from overhead import dense_model, estimator, keras, table_for

import gpcnn
from gpcnn.engines.migrations import qualified

TICKS = os.sysconf("SC_CLK_TCK")
SAMPLE_SECONDS = 0.05


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU of a process (all threads), None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def _title(pid: int) -> str:
    """A process's title (``ps``'s command line); FileNotFoundError when it is gone."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()


def _server_processes() -> dict[int, str]:
    """pid -> process title of every postgres process of this machine's user."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            if (entry / "comm").read_text().strip() == "postgres":
                found[int(entry.name)] = _title(int(entry.name))
    return found


def _snapshot() -> dict:
    titles = _server_processes()
    return {
        "wall": time.perf_counter(),
        "client": _cpu_seconds(os.getpid()),
        "server": {pid: _cpu_seconds(pid) for pid in titles},
        "titles": titles,
    }


def _role(title: str) -> str:
    """A process's part from its title: the last word of a backend's, the name of a helper's; on
    Greenplum the server's port, then what follows the session's ``conNNN`` (segment, slice, what
    it runs)."""
    words = title.split()
    session = next((i for i, w in enumerate(words) if re.fullmatch(r"con\d+", w)), None)
    if title.startswith("postgres: ") and session is not None:
        # "postgres:  7002, gpadmin gpcnn 127.0.0.1(36058) con384 seg0 cmd5 slice1 MPPEXEC SELECT"
        rest = [w for w in words[session + 1 :] if not re.fullmatch(r"cmd\d+|\S*\(\d+\)", w)]
        return " ".join([words[1].rstrip(","), *rest])  # the port first: 7000 is the coordinator
    if title.startswith("postgres: ") and "(" in title:
        return words[-1]  # "postgres: gpcnn gpcnn 127.0.0.1(4321) COPY"
    return title.removeprefix("postgres: ") or "postmaster"


class CpuPerIteration(keras.callbacks.Callback):
    """Per iteration: wall, client CPU, and each server process's CPU, named by the roles its
    title showed while the iteration ran (sampled every ``SAMPLE_SECONDS`` in a thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict] = []
        self._start: dict | None = None
        self._roles: dict[int, set[str]] = {}
        self._running = threading.Event()

    def on_epoch_begin(self, epoch, logs=None):
        self._start = _snapshot()
        self._roles = {pid: set() for pid in self._start["server"]}
        self._running.set()
        threading.Thread(target=self._sample_roles, daemon=True).start()

    def _sample_roles(self) -> None:
        while self._running.is_set():
            for pid, roles in list(self._roles.items()):
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    roles.add(_role(_title(pid)))
            time.sleep(SAMPLE_SECONDS)

    def on_epoch_end(self, epoch, logs=None):
        self._running.clear()
        end, start = _snapshot(), self._start
        server = []
        for pid, seconds in end["server"].items():
            if seconds is None:
                continue
            spent = seconds - (start["server"].get(pid) or 0.0)  # a new process: all of it
            if spent > 0:
                roles = (self._roles.get(pid) or {_role(end["titles"][pid])}) - {"idle"}
                server.append({"role": "+".join(sorted(roles)) or "idle", "cpu": spent})
        server.sort(key=lambda p: -p["cpu"])
        client = end["client"] - start["client"]
        self.rows.append(
            {
                "iteration": epoch + 1,
                "wall": end["wall"] - start["wall"],
                "client_cpu": client,
                "server": server,
                "total_cpu": client + sum(p["cpu"] for p in server),
            }
        )


def measure(million: float, iterations: int, url: str | None = None) -> dict:
    db = gpcnn.connect(url)
    gpcnn.install(db)
    table = table_for(db, 2)
    cpu = CpuPerIteration()
    est = estimator(db, dense_model(million), iterations=iterations)
    with est:
        est.fit(table, callbacks=[cpu])
    gpcnn.delete_runs(db, [est.run_id_])
    steady = cpu.rows[3:]
    cpus = os.cpu_count() or 1
    total = statistics.median(r["total_cpu"] for r in steady)
    return {
        "million": million,
        "segments": 2,
        "cpus": cpus,
        "steady_iterations": len(steady),
        "wall_median": statistics.median(r["wall"] for r in steady),
        "client_cpu_median": statistics.median(r["client_cpu"] for r in steady),
        "total_cpu_median": total,
        "cpu_floor_seconds": total / cpus,
        "rows": cpu.rows,
    }


@contextlib.contextmanager
def checkpoints_unlogged(url: str | None = None):
    """``checkpoints`` unlogged for the block, logged again after it whatever happens."""
    db = gpcnn.connect(url)
    gpcnn.install(db)
    table = qualified(db.backend, "checkpoints")
    with db.backend.autocommit_connection() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {table} SET UNLOGGED")
    try:
        yield
    finally:
        with db.backend.autocommit_connection() as conn:
            conn.exec_driver_sql(f"ALTER TABLE {table} SET LOGGED")
        db.close()


def wal_share(million: float, iterations: int, rounds: int, url: str | None = None) -> dict:
    """Interleaved rounds of the fit with ``checkpoints`` logged and unlogged."""
    walls: dict[str, list[float]] = {"logged": [], "unlogged": []}
    cpus: dict[str, list[float]] = {"logged": [], "unlogged": []}
    for r in range(rounds):
        for persistence in walls:
            if persistence == "logged":
                report = measure(million, iterations, url)
            else:
                with checkpoints_unlogged(url):
                    report = measure(million, iterations, url)
            walls[persistence].append(report["wall_median"])
            cpus[persistence].append(report["total_cpu_median"])
            print(
                f"round {r + 1} {persistence}: wall {report['wall_median']:.2f} s, "
                f"CPU {report['total_cpu_median']:.2f} s",
                flush=True,
            )
    return {
        "million": million,
        "rounds": rounds,
        "wall_medians": walls,
        "cpu_medians": cpus,
        "wall_median": {k: statistics.median(v) for k, v in walls.items()},
        "cpu_median": {k: statistics.median(v) for k, v in cpus.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=float, default=25, help="million weights")
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--database", default=None, help="a server on this machine (URL)")
    parser.add_argument(
        "--wal-rounds", type=int, default=0, help="rounds of checkpoints logged against unlogged"
    )
    args = parser.parse_args(argv)
    if args.wal_rounds:
        report = wal_share(args.size, args.iterations, args.wal_rounds, args.database)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1))
        walls, cpus = report["wall_median"], report["cpu_median"]
        print(
            f"{args.size}M K=2, medians of {args.wal_rounds} rounds: wall logged "
            f"{walls['logged']:.2f} s, unlogged {walls['unlogged']:.2f} s; CPU logged "
            f"{cpus['logged']:.2f} s, unlogged {cpus['unlogged']:.2f} s"
        )
        return 0
    report = measure(args.size, args.iterations, args.database)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    for row in report["rows"][3:]:
        parts = ", ".join(f"{p['role']} {p['cpu']:.2f}" for p in row["server"] if p["cpu"] >= 0.02)
        print(
            f"iteration {row['iteration']}: wall {row['wall']:.2f} s, CPU {row['total_cpu']:.2f} s "
            f"(client {row['client_cpu']:.2f}; {parts})"
        )
    print(
        f"{report['million']}M K=2, medians of {report['steady_iterations']} steady iterations: "
        f"wall {report['wall_median']:.2f} s, CPU {report['total_cpu_median']:.2f} s "
        f"(client {report['client_cpu_median']:.2f}) -> floor on {report['cpus']} CPUs "
        f"{report['cpu_floor_seconds']:.2f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
