"""Child processes started together (tests/children/ scripts): each prints "ready", then runs its
call when "go" arrives, and ends printing a JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run_together(commands: list[list[str]], timeout: float = 600) -> list[dict]:
    """Start every command (a script and its arguments, with this gpcnn), send "go" once all are
    ready, and return each one's last JSON line; fails on an exit status or a traceback."""
    children = [
        subprocess.Popen(
            [sys.executable, *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},  # this gpcnn
        )
        for command in commands
    ]
    try:
        for child in children:
            assert child.stdout.readline().strip() == "ready", child.stderr.read()[-3000:]
        for child in children:  # all ready: start them together
            child.stdin.write("go\n")
            child.stdin.flush()
        reports = []
        for child in children:
            out, err = child.communicate(timeout=timeout)
            assert child.returncode == 0, err[-3000:]
            assert "Traceback" not in err, err[-3000:]
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for child in children:
            child.kill()
    assert max(r["started"] for r in reports) < min(r["ended"] for r in reports)  # overlapped
    return reports
