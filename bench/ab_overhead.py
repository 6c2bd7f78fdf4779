"""Interleaved A/B of ``bench/overhead.py`` between two commits, on the embedded PostgreSQL.

    .venv/bin/python bench/ab_overhead.py BEFORE AFTER [--rounds 5] [--sizes 1 25] [--segments 2]
        [--log bench/results/ab.txt]

Each commit is checked out (detached) in a worktree under ``$TMPDIR/gpcnn-ab`` with its own
``GPCNN_HOME`` (its own embedded cluster: the two bundles never meet in one schema), and runs its
own ``bench/overhead.py --repeats 1`` once per round; both clusters are stopped at the end. The
order alternates every round (A B, B A, ...) so that a drift of the shared machine falls on both
alike. Prints, per configuration, the median fixed cost of each side over the rounds and the
ratio AFTER / BEFORE of the medians.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROUND_LINE = re.compile(r"round \d+ ([\d.]+)M K=(\d+): ([\d.]+) s, fixed ([\d.]+) s")


def checkout(rev: str, where: Path) -> Path:
    """A detached worktree of ``rev`` at ``where``, sharing this checkout's Python environment;
    one left by an earlier run is moved to ``rev`` (it may hold another commit)."""
    rev = subprocess.run(  # HEAD and branch names as this checkout means them
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if where.exists():
        command = ["git", "-C", str(where), "checkout", "--detach", "--quiet", rev]
    else:
        command = ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), rev]
    subprocess.run(command, check=True, capture_output=True)
    venv = where / ".venv"
    if not venv.exists():
        venv.symlink_to((ROOT / ".venv").resolve())
    return where


def one_round(tree: Path, home: Path, sizes: list[str], segments: list[str]) -> str:
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(tree), "GPCNN_HOME": str(home)}
    command = [str(tree / ".venv" / "bin" / "python"), "bench/overhead.py", "--repeats", "1"]
    command += ["--sizes", *sizes, "--segments", *segments, "--big", "--out", os.devnull]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=True)
    return done.stdout


def stop_server(tree: Path, home: Path) -> None:
    """Stop the embedded cluster a side's runs started (it would hold its memory until reboot)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "GPCNN_HOME": str(home)}
    subprocess.run(
        [str(tree / ".venv" / "bin" / "gpcnn"), "db", "stop"], cwd=tree, env=env, check=False
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", nargs="+", default=["1", "25"])
    parser.add_argument("--segments", nargs="+", default=["2"])
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args(argv)
    base = Path(tempfile.gettempdir()) / "gpcnn-ab"
    sides = {
        label: (checkout(rev, base / label), base / f"{label}-home")
        for label, rev in (("before", args.before), ("after", args.after))
    }
    fixed: dict[tuple[str, float, int], list[float]] = defaultdict(list)
    lines = [f"A/B of bench/overhead.py: before {args.before}, after {args.after}"]
    try:
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for label in order:
                out = one_round(*sides[label], args.sizes, args.segments)
                for million, k, seconds, cost in ROUND_LINE.findall(out):
                    fixed[(label, float(million), int(k))].append(float(cost))
                    lines.append(
                        f"round {r} {label}: {million}M K={k}: {seconds} s, fixed {cost} s"
                    )
                    print(lines[-1], flush=True)
    finally:
        for tree, home in sides.values():
            stop_server(tree, home)
    lines.append("| weights | K | before: fixed s (median, min–max) | after | after / before |")
    lines.append("|---|---|---|---|---|")
    for million, k in sorted({(m, k) for _, m, k in fixed}):
        a, b = fixed[("before", million, k)], fixed[("after", million, k)]
        lines.append(
            f"| {million:g}M | {k} | {statistics.median(a):.3f} ({min(a):.3f}–{max(a):.3f}) | "
            f"{statistics.median(b):.3f} ({min(b):.3f}–{max(b):.3f}) | "
            f"{statistics.median(b) / statistics.median(a):.2f} |"
        )
    print("\n".join(lines[-2 - len({(m, k) for _, m, k in fixed}) :]))
    if args.log:
        args.log.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
