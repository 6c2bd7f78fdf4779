"""Whether Greenplum's interconnect settings change an iteration's fixed cost (issue 25, item 3):
gpcnn's sessions against other packet queues and UDP buffers, beside the embedded PostgreSQL,
interleaved, with the UDP datagrams the kernel dropped.

    .venv/bin/python bench/interconnect.py postgresql://gpadmin@127.0.0.1:7000/gpcnn \
        [--size 1] [--rounds 5] [--out bench/results/interconnect.json]

Each round runs ``bench/overhead.py``'s three-iteration fit (K = 2) once on PostgreSQL and once
per setting on Greenplum, and prints each steady iteration's fixed cost and how many datagrams
the kernel dropped for lack of receive buffer during the fit (``RcvbufErrors`` in
``/proc/net/snmp``: the cluster must run on this machine). The settings are swapped into the
``GreenplumBackend``'s session settings and options for the fit, as a user could set them.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

import overhead

import gpcnn
from gpcnn.engines.greenplum import GreenplumBackend

IDLE = "SET gp_vmem_idle_resource_timeout = 0"


def depth(packets: int) -> tuple[str, ...]:
    """Session settings with ``packets`` in flight per connection, sending and receiving."""
    return (
        IDLE,
        f"SET gp_interconnect_queue_depth = {packets}",
        f"SET gp_interconnect_snd_queue_depth = {packets}",
    )


SHIPPED = (GreenplumBackend.session_options, GreenplumBackend.session_settings)
SETTINGS = {
    "gpcnn's (64 KB packets, depth 64)": SHIPPED,
    "depth 16": (SHIPPED[0], depth(16)),
    "depth 4": (SHIPPED[0], depth(4)),
    "4 MB UDP buffers": (f"{SHIPPED[0]} -c gp_udp_bufsize_k=4096", SHIPPED[1]),
}


def dropped() -> int:
    """UDP datagrams this machine's kernel has dropped for a full receive buffer, so far."""
    lines = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines()]
    names, values = [line for line in lines if line[0] == "Udp:"][:2]
    return int(values[names.index("RcvbufErrors")])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("greenplum", help="the Greenplum URL (a cluster on this machine)")
    parser.add_argument("--size", type=float, default=1, help="million weights")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/results/interconnect.json"))
    args = parser.parse_args(argv)
    pg, gp = gpcnn.connect(None), gpcnn.connect(args.greenplum)
    tables = {}
    for name, db in {"postgresql": pg, "greenplum": gp}.items():
        gpcnn.install(db)
        overhead.SCHEMA = f"gpcnn_bench_interconnect_{name}"
        tables[name] = overhead.table_for(db, 2)
    fixed, drops = defaultdict(list), defaultdict(list)
    try:
        for round_ in range(1, args.rounds + 1):
            got: dict = defaultdict(list)
            overhead._one_fit(pg, tables["postgresql"], args.size, 2, got)
            fixed["postgresql"].append(got["fixed"][-1])
            for name, (options, settings) in SETTINGS.items():
                GreenplumBackend.session_options, GreenplumBackend.session_settings = (
                    options,
                    settings,
                )
                before, got = dropped(), defaultdict(list)
                overhead._one_fit(gp, tables["greenplum"], args.size, 2, got)
                fixed[name].append(got["fixed"][-1])
                drops[name].append(dropped() - before)
            print(
                f"round {round_} {args.size:g}M: "
                + ", ".join(f"{n} {v[-1]:.3f} s" for n, v in fixed.items())
                + "; dropped "
                + ", ".join(f"{n} {v[-1]}" for n, v in drops.items()),
                flush=True,
            )
    finally:
        GreenplumBackend.session_options, GreenplumBackend.session_settings = SHIPPED
    base = statistics.median(fixed["postgresql"])
    rows = [
        {
            "setting": name,
            "fixed": values,
            "median": statistics.median(values),
            "ratio": statistics.median(values) / base,
            "dropped": drops.get(name),
        }
        for name, values in fixed.items()
    ]
    args.out.write_text(json.dumps({"million": args.size, "rows": rows}, indent=1) + "\n")
    for row in rows:
        print(
            f"{row['setting']}: median fixed {row['median']:.3f} s, {row['ratio']:.2f}x, "
            f"datagrams dropped {sum(row['dropped'] or [0])}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
