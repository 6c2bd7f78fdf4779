"""The ``gpcnn`` command: its parser and ``main``; the commands themselves are in ``commands``
(the database's) and ``study_commands`` (the study's)."""

from __future__ import annotations

import argparse
import sys

from gpcnn.data.by_name import DATASET_NAMES
from gpcnn.engines import DriverError, UnreachableError, dispatch_names
from gpcnn.tools import commands, embedded, forecast_command, study_commands
from gpcnn.tools.help_texts import DATABASE_OPTIONS, subcommand


def _size(text: str) -> tuple[int, int]:
    try:
        height, width = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected H,W (two integers), got {text!r}") from None
    return height, width


def build_parser() -> argparse.ArgumentParser:
    from gpcnn.version import __version__

    parser = argparse.ArgumentParser(
        prog="gpcnn",
        description="Train one Keras CNN data-parallel across the segments of a Greenplum-family "
        "database, and study how it converges.",
        epilog=DATABASE_OPTIONS
        + " 'gpcnn <command> --help' shows a command's options and examples.",
    )
    parser.add_argument("--version", action="version", version=f"gpcnn {__version__}")
    parser.add_argument(
        "--traceback", action="store_true", help="show the full traceback of an error"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def with_database(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--database",
            help="SQLAlchemy URL (default: $GPCNN_DATABASE_URL, else the embedded PostgreSQL)",
        )
        p.add_argument("--schema", default="gpcnn", help="schema of gpcnn's own objects")
        p.add_argument(
            "--dispatch",
            choices=[name for name in dispatch_names() if name],
            help="how iterations reach the segments (default: the engine's own)",
        )
        return p

    db = subcommand(
        sub,
        "db",
        "start, stop or inspect the embedded PostgreSQL cluster",
        "gpcnn db start",
        "gpcnn db url        # the URL other tools can connect with",
    )
    db.add_argument(
        "action",
        choices=["start", "stop", "status", "url", "destroy"],
        help="start (creating it if needed), stop, status (as JSON), url (printed, starting it "
        "if needed), destroy (stop it and delete its data)",
    )
    db.set_defaults(func=commands.cmd_db)

    doctor = with_database(
        subcommand(
            sub,
            "doctor",
            "check the database can run gpcnn",
            "gpcnn doctor",
            "gpcnn doctor --database postgresql://gpadmin@mdw:5432/gpdb --table fm.train",
        )
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--table", action="append", help="also show an image table and its label skew"
    )
    doctor.set_defaults(func=commands.cmd_doctor)

    inst = with_database(
        subcommand(
            sub,
            "install",
            "install or upgrade gpcnn's functions",
            "gpcnn install --database postgresql://gpadmin@mdw:5432/gpdb",
        )
    )
    inst.set_defaults(func=commands.cmd_install)

    uninst = with_database(
        subcommand(
            sub,
            "uninstall",
            "remove gpcnn's functions and tables",
            "gpcnn uninstall --keep-data   # the functions only",
        )
    )
    uninst.add_argument("--keep-data", action="store_true", help="keep runs and the catalog")
    uninst.set_defaults(func=commands.cmd_uninstall)

    runs = with_database(
        subcommand(
            sub,
            "runs",
            "list, show or delete stored runs",
            "gpcnn runs list",
            "gpcnn runs show 7",
            "gpcnn runs delete 7 8",
        )
    )
    runs.add_argument(
        "action",
        choices=["list", "show", "delete"],
        help="list every run, or show or delete the runs named",
    )
    runs.add_argument("run_ids", nargs="*", type=int, help="run ids to show or delete")
    runs.add_argument("--json", action="store_true", help="list or show as JSON")
    runs.set_defaults(func=commands.cmd_runs)

    models = with_database(
        subcommand(
            sub,
            "models",
            "list, show or delete the models stored in the model library",
            "gpcnn models list",
            "gpcnn models show my-cnn",
        )
    )
    models.add_argument(
        "action",
        choices=["list", "show", "delete"],
        help="list the library, or show the layers of or delete the models named",
    )
    models.add_argument("names", nargs="*", help="model names to show or delete")
    models.add_argument("--json", action="store_true", help="list as JSON")
    models.set_defaults(func=commands.cmd_models)

    tables = with_database(
        subcommand(
            sub,
            "tables",
            "list image and predictions tables, show or drop image tables",
            "gpcnn tables list",
            "gpcnn tables show fm.train   # segments, classes, label skew",
            "gpcnn tables drop fm.train fm.test",
        )
    )
    tables.add_argument(
        "action",
        choices=["list", "show", "drop"],
        help="list every image table, show what tables hold (segments, classes, label skew), "
        "or drop tables",
    )
    tables.add_argument("tables", nargs="*", help="tables to show or drop ([schema.]name)")
    tables.add_argument("--json", action="store_true", help="show as JSON")
    tables.add_argument("--missing-ok", action="store_true", help="no error for absent tables")
    tables.add_argument(
        "--staging", action="store_true", help="drop the tables fit() staged for arrays"
    )
    tables.set_defaults(func=commands.cmd_tables)

    load = with_database(
        subcommand(
            sub,
            "load",
            "load an image dataset or a folder of images into tables spread over the segments",
            "gpcnn load --dataset fashion-mnist --table fm --segments 4",
            "gpcnn load --folder photos/ --size 64,64 --table photos",
        )
    )
    source = load.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--dataset",
        choices=DATASET_NAMES,
        help="a standard dataset, read from its files on disk (--path); nothing is downloaded",
    )
    source.add_argument("--folder", help="one sub-folder of PNG/JPEG images per class")
    load.add_argument(
        "--size", type=_size, default=(28, 28), help="H,W every folder image is resized to"
    )
    load.add_argument("--color", choices=["rgb", "gray"], default="rgb", help="folder images as")
    load.add_argument("--path", help="file or folder of the dataset (default per dataset)")
    load.add_argument("--table", help="base name: loads <table>_train and <table>_test")
    load.add_argument("--train-table", help="name of the training table (overrides --table)")
    load.add_argument("--test-table", help="name of the test table (overrides --table)")
    load.add_argument("--segments", type=int, help="K (default: CPUs or Greenplum primaries)")
    load.add_argument("--buffer-size", type=int, help="images per buffer (default ~1,000 28x28)")
    load.add_argument("--seed", type=int, default=0, help="shuffle seed")
    load.add_argument("--replace", action="store_true", help="replace existing tables")
    load.add_argument("--quiet", action="store_true", help="no progress bar")
    load.set_defaults(func=commands.cmd_load)

    forecast_command.add_parsers(sub, with_database)
    study_commands.add_parsers(sub, with_database)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; an error is one line on stderr and exit status 1 (``--traceback`` shows
    the whole traceback instead)."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (embedded.EmbeddedError, RuntimeError, ValueError, OSError, DriverError) as e:
        if args.traceback:
            raise
        # the driver's own line, unless gpcnn told the error in its words
        told = isinstance(e, UnreachableError)
        text = str(e if told else getattr(e, "orig", None) or e).strip()
        print(
            f"gpcnn: error: {text.splitlines()[0] if text else type(e).__name__}", file=sys.stderr
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
