"""The ``gpcnn`` command line."""

from __future__ import annotations

import argparse
import json
import sys

from . import embedded


def _engine(args: argparse.Namespace):
    from . import connect

    return connect(getattr(args, "database", None))


def cmd_db(args: argparse.Namespace) -> int:
    if args.action == "start":
        c = embedded.start()
        print(f"embedded PostgreSQL running: {c.url()}")
    elif args.action == "stop":
        embedded.stop()
        print("embedded PostgreSQL stopped")
    elif args.action == "status":
        print(json.dumps(embedded.status(), indent=2))
    elif args.action == "url":
        print(embedded.url())
    elif args.action == "destroy":
        embedded.destroy()
        print("embedded PostgreSQL removed")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from .environment import check_environment

    report = check_environment(_engine(args), args.schema)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report)
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    from .install import install

    print(f"installed gpcnn {install(_engine(args), args.schema)} into schema {args.schema!r}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpcnn", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def with_database(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--database",
            help="SQLAlchemy URL (default: $GPCNN_DATABASE_URL, else the embedded PostgreSQL)",
        )
        p.add_argument("--schema", default="gpcnn", help="schema of gpcnn's own objects")
        return p

    db = sub.add_parser("db", help="the embedded PostgreSQL cluster")
    db.add_argument("action", choices=["start", "stop", "status", "url", "destroy"])
    db.set_defaults(func=cmd_db)

    doctor = with_database(sub.add_parser("doctor", help="check the database can run gpcnn"))
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(func=cmd_doctor)

    inst = with_database(sub.add_parser("install", help="install or upgrade gpcnn's functions"))
    inst.set_defaults(func=cmd_install)

    demo = with_database(sub.add_parser("demo", help="the quick-start job"))
    demo.add_argument("--out", default="demo-out", help="folder for figures and history")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (embedded.EmbeddedError, RuntimeError, ValueError) as e:
        print(f"gpcnn: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
