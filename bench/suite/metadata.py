"""What a result file records about its run: machine, commit, date and versions."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from importlib import metadata as distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# what the runner itself writes: a tree differing only there is not "dirty"
RUNNER_OUTPUT = (":!bench/results", ":!docs/benchmarks.md")
# distributions whose version is recorded (the first installed of each group's names)
PACKAGES = {
    "tensorflow": ("tensorflow-cpu", "tensorflow"),
    "keras": ("keras",),
    "numpy": ("numpy",),
}


def machine(cpuinfo: str | None = None, meminfo: str | None = None) -> dict:
    """CPU model, cores (all, and those this process may use) and memory of this machine;
    ``cpuinfo`` and ``meminfo`` are /proc's texts, read when not given."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if cpuinfo is None else cpuinfo
    meminfo = Path("/proc/meminfo").read_text() if meminfo is None else meminfo
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in cpuinfo.splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    total_kib = next(
        (int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal:")), 0
    )
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "memory_gib": round(total_kib / 2**20, 1),
        "platform": platform.platform(),
    }


def commit(root: Path = ROOT) -> dict:
    """The checkout's commit and whether its tracked files differ from it (``dirty``; the
    runner's own output does not count)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", *RUNNER_OUTPUT)
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(changed)}


def versions(server: str | None) -> dict:
    """Python's and the installed packages' versions, and the database server's (as given)."""
    found = {"python": platform.python_version()}
    for name, candidates in PACKAGES.items():
        for candidate in candidates:
            try:
                found[name] = distributions.version(candidate)
                break
            except distributions.PackageNotFoundError:
                continue
    found["postgresql"] = server
    return found


def record(server: str | None, root: Path = ROOT) -> dict:
    """Everything a result file says about where and when it ran."""
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        **commit(root),
        "machine": machine(),
        "versions": versions(server),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
