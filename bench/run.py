"""Run gpcnn's benchmarks and write their result files and docs/benchmarks.md.

    .venv/bin/python bench/run.py [NAME ...] [--quick] [--set NAME=VALUE ...]
        [--database URL] [--greenplum URL] [--notes TEXT] [--no-save]
    .venv/bin/python bench/run.py --report
    .venv/bin/python bench/run.py fixed_cost --baseline COMMIT [--candidate COMMIT]
        [--set rounds=5] [--set 'sizes=[1,25]'] [--set 'segments=[2]']

docs/benchmarks.md's introduction says what each option does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench.suite, from any working directory

from bench.suite import ab, metadata, registry, report, runner  # noqa: E402
from bench.suite.base import Context  # noqa: E402

RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs" / "benchmarks.md"


def server_versions(database: str | None, greenplum: str | None) -> tuple[str, str | None]:
    """The PostgreSQL server's version (``SHOW server_version``), and Greenplum's ``version()``."""
    import gpcnn

    with gpcnn.connect(database) as db, db.connect() as conn:
        server = conn.exec_driver_sql("SHOW server_version").scalar()
    if not greenplum:
        return server, None
    with gpcnn.connect(greenplum) as db, db.connect() as conn:
        return server, conn.exec_driver_sql("SELECT version()").scalar()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(registry.names()))
    parser.add_argument("--quick", action="store_true", help="short parameters: does it work")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument(
        "--database", help="a PostgreSQL URL (default: $GPCNN_DATABASE_URL or the embedded cluster)"
    )
    parser.add_argument("--greenplum", help="a Greenplum URL, for the greenplum benchmark")
    parser.add_argument("--notes", default="", help="a note on the run, kept in its result file")
    parser.add_argument("--no-save", action="store_true", help="write no result file")
    parser.add_argument("--report", action="store_true", help="only write docs/benchmarks.md")
    parser.add_argument("--baseline", metavar="COMMIT", help="fixed_cost: A/B against COMMIT")
    parser.add_argument(
        "--candidate", metavar="COMMIT", help="with --baseline (default: this tree)"
    )
    args = parser.parse_args(argv)
    if args.report:
        DOCS.write_text(report.render(report.load(RESULTS)))
        print(f"wrote {DOCS.relative_to(ROOT)}")
        return 0
    names = args.names or registry.names()
    try:
        sets = runner.parse_sets(args.set)
        benchmarks = [registry.get(name) for name in names]
        chosen = {b.name: runner.parameters(b, args.quick, sets) for b in benchmarks}
    except (KeyError, ValueError) as error:
        parser.error(str(error.args[0]))
    if args.baseline:
        if names != ["fixed_cost"]:
            parser.error("--baseline compares the fixed_cost benchmark only: name it alone")
        p = chosen["fixed_cost"]
        print(ab.compare(args.baseline, args.candidate, p["rounds"], p["sizes"], p["segments"]))
        return 0
    server, greenplum = server_versions(args.database, args.greenplum)
    for benchmark in benchmarks:
        params = chosen[benchmark.name]
        print(f"== {benchmark.name}: {params}", flush=True)
        meta = metadata.record(server)
        if greenplum:
            meta["versions"]["greenplum"] = greenplum
        outcome = benchmark.run(Context(params, args.database, args.greenplum))
        line = runner.command(
            benchmark.name, args.quick, args.set, bool(args.database), bool(args.greenplum)
        )
        content = runner.result(benchmark, params, outcome, meta, line, args.notes)
        for target in content["targets"]:
            print(f"   {report.met_word(target['met'])}: {target['target']}: {target['value']}")
        if outcome.skipped:
            print(f"   not run: {outcome.skipped}")
        kept = RESULTS / f"{benchmark.name}.json"
        if outcome.skipped and kept.exists() and not report.load_one(kept).get("skipped"):
            print(f"   kept {kept.relative_to(ROOT)}: a run beats a skip", flush=True)
        elif not args.no_save:
            print(f"   wrote {runner.write(RESULTS, content).relative_to(ROOT)}", flush=True)
    if not args.no_save:
        DOCS.write_text(report.render(report.load(RESULTS)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
