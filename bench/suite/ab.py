"""Interleaved A/B of the fixed-cost benchmark between two trees: a baseline commit checked out
in a worktree, and this tree (or another commit), each with a database cluster of its own."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROUND_LINE = re.compile(r"round \d+ ([\d.]+)M K=(\d+): ([\d.]+) s, fixed ([\d.]+) s")


def checkout(rev: str, where: Path) -> Path:
    """A detached worktree of ``rev`` at ``where`` (a fresh path), sharing this checkout's
    Python environment."""
    rev = subprocess.run(  # HEAD and branch names as this checkout means them
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), rev],
        check=True,
        capture_output=True,
    )
    venv = where / ".venv"
    if not venv.exists():
        venv.symlink_to((ROOT / ".venv").resolve())
    return where


def side_command(tree: Path, sizes: list[str], segments: list[str]) -> list[str]:
    """One round of the tree's own fixed-cost benchmark, no result file: ``bench/run.py`` where
    the tree has it, else the ``bench/overhead.py`` that came before it."""
    python = str(tree / ".venv" / "bin" / "python")
    if (tree / "bench" / "suite" / "fixed_cost.py").exists():
        return [
            python,
            "bench/run.py",
            "fixed_cost",
            "--no-save",
            "--set",
            "rounds=1",
            "--set",
            "floor=false",
            "--set",
            f"sizes=[{','.join(sizes)}]",
            "--set",
            f"segments=[{','.join(segments)}]",
        ]
    return [
        python,
        "bench/overhead.py",
        "--repeats",
        "1",
        "--sizes",
        *sizes,
        "--segments",
        *segments,
        "--big",
        "--out",
        os.devnull,
    ]


def run_side(tree: Path, home: Path, sizes: list[str], segments: list[str]) -> str:
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(tree), "GPCNN_HOME": str(home)}
    done = subprocess.run(
        side_command(tree, sizes, segments),
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def stop_server(tree: Path, home: Path) -> None:
    """Stop the embedded cluster a side's runs started (it would hold its memory until reboot)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "GPCNN_HOME": str(home)}
    subprocess.run(
        [str(tree / ".venv" / "bin" / "gpcnn"), "db", "stop"], cwd=tree, env=env, check=False
    )


def compare(baseline: str, candidate: str | None, rounds: int, sizes, segments) -> str:
    """``rounds`` rounds, the order turning each round (A B, B A, ...); the median fixed cost of
    each side per configuration and the ratio candidate / baseline, as a Markdown table."""
    sizes, segments = [f"{float(s):g}" for s in sizes], [str(int(k)) for k in segments]
    # a folder of this run's own: another A/B on the machine keeps its trees and clusters
    base = Path(tempfile.mkdtemp(prefix="gpcnn-ab-"))
    base.chmod(0o755)  # the embedded server's OS user reads the homes below it
    trees = [checkout(baseline, base / "baseline")]
    if candidate is not None:
        trees.append(checkout(candidate, base / "candidate"))
    sides = {
        "baseline": (trees[0], base / "baseline-home"),
        "candidate": (trees[-1] if candidate else ROOT, base / "candidate-home"),
    }
    fixed: dict[tuple[str, float, int], list[float]] = defaultdict(list)
    try:
        for r in range(rounds):
            for label in list(sides) if r % 2 == 0 else list(reversed(sides)):
                for million, k, seconds, cost in ROUND_LINE.findall(
                    run_side(*sides[label], sizes, segments)
                ):
                    fixed[(label, float(million), int(k))].append(float(cost))
                    print(
                        f"round {r} {label}: {million}M K={k}: {seconds} s, fixed {cost} s",
                        flush=True,
                    )
    finally:
        for tree, home in sides.values():
            stop_server(tree, home)
        for tree in trees:  # this run's own checkouts and clusters, nothing else
            remove = ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)]
            subprocess.run(remove, check=False)
        shutil.rmtree(base, ignore_errors=True)
    lines = [
        f"A/B of the fixed cost: baseline {baseline}, candidate {candidate or 'this tree'}",
        "| weights | K | baseline: fixed s (median, min–max) | candidate | candidate / baseline |",
        "|---|---|---|---|---|",
    ]
    for million, k in sorted({(m, k) for _, m, k in fixed}):
        a, b = fixed[("baseline", million, k)], fixed[("candidate", million, k)]
        lines.append(
            f"| {million:g}M | {k} | {statistics.median(a):.3f} ({min(a):.3f}–{max(a):.3f}) | "
            f"{statistics.median(b):.3f} ({min(b):.3f}–{max(b):.3f}) | "
            f"{statistics.median(b) / statistics.median(a):.2f} |"
        )
    return "\n".join(lines)
