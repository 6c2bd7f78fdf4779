"""The ``gpcnn`` command line."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

from gpcnn.data.by_name import DATASET_NAMES, check_path, load_by_name
from gpcnn.engines import DriverError, connect, dispatch_names
from gpcnn.estimator import OPTIMIZER_STATES
from gpcnn.estimator.named_models import MODELS, OPTIMIZERS
from gpcnn.study.experiments import RULES
from gpcnn.tools import embedded


def _db(args: argparse.Namespace):
    return connect(args.database, schema=args.schema, dispatch=args.dispatch)


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
    from gpcnn.tools.environment import check_environment

    report = check_environment(_db(args))
    print(json.dumps(report.as_dict(), indent=2) if args.json else report)
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    from gpcnn.engines.install import install
    from gpcnn.engines.roles import role_name

    print(f"installed gpcnn {install(_db(args))} into schema {args.schema!r}")
    print(f"ordinary users run it once granted the role: GRANT {role_name(args.schema)} TO <user>")
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    from gpcnn.engines.install import uninstall

    uninstall(_db(args), keep_data=args.keep_data)
    kept = " (runs and catalog kept)" if args.keep_data else ""
    print(f"removed gpcnn from schema {args.schema!r}{kept}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from gpcnn.fit import runs

    db = _db(args)
    if args.action == "list":
        rows = runs.list_runs(db)
        if args.json:
            print(json.dumps(rows, indent=1))
            return 0
        print(
            f"{'run':>5}  {'status':<13} {'merge':<8} {'iterations':>10} {'epochs':>6} "
            f"{'val_acc':>7} {'best':>6} {'val_loss':>8} {'best':>6} {'ckpts':>5} "
            f"{'stored':>9}  table"
        )
        for r in rows:
            stored = f"{r['stored_bytes'] / 1e6:.1f} MB"
            print(
                f"{r['run_id']:>5}  {r['status']:<13} {r['merge']!s:<8} {r['iterations']:>10} "
                f"{_number(r['epochs'], 6, 2)} {_number(r['val_accuracy'], 7)} "
                f"{_number(r['best_val_accuracy'], 6)} {_number(r['val_loss'], 8)} "
                f"{_number(r['best_val_loss'], 6)} {r['checkpoints']:>5} {stored:>9}  {r['table']}"
            )
        return 0
    if not args.run_ids:
        raise ValueError(f"gpcnn runs {args.action} needs run ids")
    if args.action == "show":
        for run_id in args.run_ids:
            shown = runs.show_run(db, run_id)
            print(json.dumps(shown, indent=1) if args.json else _run_text(shown))
    else:
        print(f"deleted {runs.delete_runs(db, args.run_ids)} run(s)")
    return 0


HISTORY_COLUMNS = ("iteration", "epoch", "loss", "accuracy", "val_loss", "val_accuracy", "seconds")


def _number(value, width: int, digits: int = 4) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def _run_text(shown: dict) -> str:
    """A run as ``gpcnn runs show`` prints it: its summary, then one line per iteration."""
    params = shown["params"]
    optimizer = params.get("optimizer")
    if isinstance(optimizer, dict):  # a Keras optimizer object, serialized
        optimizer = optimizer.get("class_name")
    lines = [
        f"run {shown['run_id']}: {shown['status']}, {shown['table']}, merge={shown['merge']}, "
        f"{shown['iterations']} iterations ({shown['epochs'] or 0:g} epochs), "
        f"optimizer={optimizer}, learning_rate={params.get('learning_rate')}",
    ]
    if shown["error"]:
        lines.append(f"error: {shown['error']}")
    lines.append("  ".join(f"{c:>12}" for c in HISTORY_COLUMNS))
    for row in shown["history"]:
        cells = [row.get(c) for c in HISTORY_COLUMNS]
        lines.append(
            "  ".join(
                f"{'-':>12}" if v is None else f"{v:>12}" if isinstance(v, int) else f"{v:>12.4f}"
                for v in cells
            )
        )
    return "\n".join(lines)


def cmd_models(args: argparse.Namespace) -> int:
    from gpcnn.fit import model_library

    db = _db(args)
    if args.action == "list":
        rows = model_library.list_models(db)
        if args.json:
            print(json.dumps(rows, indent=1))
            return 0
        for m in rows:
            weights = f"weights {m['stored_bytes'] / 1e6:.1f} MB" if m["weights"] else "no weights"
            about = f"  {m['description']}" if m["description"] else ""
            print(f"{m['name']}  {weights}, stored {m['created_at'][:19]}{about}")
        return 0
    if not args.names:
        raise ValueError(f"gpcnn models {args.action} needs model names")
    for name in args.names:
        if args.action == "show":
            model = model_library.load_model(db, name)
            print(f"{name}: {model.count_params():,} weights")
            for layer in model.layers:
                frozen = "" if layer.trainable else "  (frozen)"
                print(f"  {layer.name:<24} {type(layer).__name__}{frozen}")
        elif model_library.delete_model(db, name):
            print(f"deleted model {name}")
        else:
            raise ValueError(f"no model {name!r} to delete (gpcnn models list lists them)")
    return 0


def cmd_tables(args: argparse.Namespace) -> int:
    from gpcnn.data.tables import drop_table, list_tables

    db = _db(args)
    if args.action == "list":
        for info in list_tables(db):
            shape = "x".join(map(str, info.image_shape))
            print(
                f"{info.table}  {info.images:,} images {shape}, {info.num_classes} classes, "
                f"{info.segments} segments"
            )
        return 0
    if args.staging:
        from gpcnn.data.staging import sweep

        for name in sweep(db):
            print(f"dropped staging table {name}")
        if not args.tables:
            return 0
    if not args.tables:
        raise ValueError("gpcnn tables drop needs table names (or --staging)")
    for table in args.tables:
        if drop_table(db, table, missing_ok=args.missing_ok):
            print(f"dropped {table}")
    return 0


def _load_folder(args: argparse.Namespace) -> int:
    """``gpcnn load --folder PATH --table NAME``: one table from one sub-folder per class."""
    from gpcnn.data.image_folder import load_image_folder
    from gpcnn.data.tables import load_images

    if args.table is None or args.train_table or args.test_table or args.path:
        raise ValueError("--folder loads one table: give --table only (no --path, no splits)")
    folder = load_image_folder(args.folder, size=args.size, color=args.color, seed=args.seed)
    info = load_images(
        _db(args),
        args.table,
        folder,
        segments=args.segments,
        buffer_size=args.buffer_size,
        replace=args.replace,
        progress=not args.quiet,
        source=f"image folder {folder.path}, {args.size[0]}x{args.size[1]} {args.color}",
    )
    print(
        f"{info.images:,} images {'x'.join(map(str, info.image_shape))} -> {info.table} "
        f"({info.segments} segments; {info.num_classes} classes: {', '.join(info.class_names)})"
    )
    return 0


def cmd_load(args: argparse.Namespace) -> int:
    from gpcnn.data.tables import TableName, load_images
    from gpcnn.engines import catalog

    if args.folder is not None:
        return _load_folder(args)
    check_path(args.dataset, args.path)  # before the database is touched
    if args.table is None and not (args.train_table and args.test_table):
        raise ValueError("give --table, or both --train-table and --test-table")
    base = TableName.parse(args.table) if args.table is not None else None
    targets = {
        "train": TableName.parse(args.train_table or base.with_suffix("_train")),
        "test": TableName.parse(args.test_table or base.with_suffix("_test")),
    }
    db = _db(args)
    if not args.replace:  # fail before loading either split, not between them
        with db.connect() as conn:
            for table in targets.values():
                if catalog.relation_exists(conn, table.sql(db.backend)):
                    raise ValueError(f"table {table} exists: pass --replace to reload it")
    data, source = load_by_name(args.dataset, args.path)
    for split, table in targets.items():
        x, y = getattr(data, f"x_{split}"), getattr(data, f"y_{split}")
        info = load_images(
            db,
            table,
            x,
            y,
            segments=args.segments,
            buffer_size=args.buffer_size,
            class_names=data.class_names,
            seed=args.seed,
            replace=args.replace,
            progress=not args.quiet,
            source=f"{source}, {split} split",
        )
        counts = ", ".join(f"{c:,}" for c in info.images_per_segment)
        print(
            f"{split}: {info.images:,} images {'x'.join(map(str, info.image_shape))} "
            f"-> {info.table} ({info.segments} segments: {counts}; "
            f"buffers of <= {info.buffer_size:,}; {info.num_classes} classes)"
        )
    return 0


def _study(args: argparse.Namespace, dataset: str, segments, rules, merges, epochs) -> int:
    from gpcnn.study.experiments import plan, run_study

    db = _db(args)
    specs = plan(
        dataset,
        segments,
        rules,
        merges,
        epochs,
        learning_rate=args.learning_rate,
        batch_size=args.batch_size,
        seeds=args.seeds,
        skews=args.skew,
        optimizer_states=args.optimizer_state,
        merge_options=_option_sets(getattr(args, "merge_option", None) or []),
        model=args.model,
        optimizer=args.optimizer,
        shuffle=args.shuffle,
        scale_lr=args.scale_lr,
    )
    print(f"convergence study: {len(specs)} runs into {args.out}/")
    run_study(db, specs, args.out, path=getattr(args, "path", None), target=args.target)
    out = Path(args.out).resolve()
    print(f"history: {out / 'history.csv'}\nreport:  {out / 'report.md'}")
    print("figures:\n" + "\n".join(f"  {p}" for p in sorted(out.glob("*.png"))))
    return 0


def cmd_converge(args: argparse.Namespace) -> int:
    return _study(
        args,
        args.dataset,
        args.segments,
        args.merge,
        args.merges_per_epoch,
        args.iterations,
    )


def cmd_mop(args: argparse.Namespace) -> int:
    """Study part h: configurations trained by the model hopper and one after another merged."""
    from gpcnn.study import hopping

    runs = hopping.plan(
        args.dataset,
        hopping.parse_configurations(args.configs),
        args.merge,
        args.segments[0],
        args.iterations,
        model=args.model,
        seed=args.seeds[0],
        shuffle=args.shuffle,
        optimizer_state=args.optimizer_state[0],
    )
    print(f"MOP against the merge: {sum(map(len, runs.values()))} runs into {args.out}/")
    print(hopping.run_part(_db(args), runs, args.out, path=args.path, target=args.target))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """A short preset of the study: one worker, and K=4 without merge, with MADlib's average and
    with BMUF, on real Fashion-MNIST in the embedded database."""
    from gpcnn.engines.install import install
    from gpcnn.tools.environment import check_environment

    db = _db(args)
    install(db)  # the quick start sets everything up, upgrades included
    print(check_environment(db), end="\n\n")
    return _study(
        args, args.dataset, [4], ["single", "none", "average", "bmuf"], [1], args.iterations
    )


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers separated by commas, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def _schedules(text: str) -> list[int | list[int]]:
    """Merge frequencies, comma-separated; each a count or a schedule of counts per epoch
    written with slashes, the last repeating (``1,4,8/8/1``)."""
    try:
        found = [[int(m) for m in part.split("/")] for part in text.split(",") if part.strip()]
    except ValueError:
        found = []
    if not found or not all(m >= 1 for schedule in found for m in schedule):
        raise argparse.ArgumentTypeError(
            f"{text!r}: counts >= 1 separated by commas, a schedule with slashes (e.g. 1,4,8/8/1)"
        )
    return [schedule[0] if len(schedule) == 1 else schedule for schedule in found]


def _merge_option(text: str) -> tuple[str, list[float | bool]]:
    """NAME=VALUE[,VALUE...]: a rule's option and the values to run it at (true/false, or
    numbers)."""

    def value(word: str) -> float | bool:
        lowered = word.strip().lower()
        return lowered == "true" if lowered in ("true", "false") else float(word)

    name, sep, values = text.partition("=")
    try:
        parsed = [value(v) for v in values.split(",")]
    except ValueError:
        parsed = []
    if not sep or not name.strip() or not parsed:
        raise argparse.ArgumentTypeError(
            f"{text!r}: NAME=VALUE[,VALUE...], e.g. mu=0.01,0.1 or nesterov=false"
        )
    return name.strip(), parsed


def _option_sets(given: list[tuple[str, list[float | bool]]]) -> list[dict]:
    """Every combination of the options' values (one empty set without options)."""
    names = [name for name, _ in given]
    products = itertools.product(*(values for _, values in given))
    return [dict(zip(names, values, strict=True)) for values in products]


def _skews(text: str) -> list[float | None]:
    values: list[float | None] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            values.append(None if part == "iid" else float(part))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: iid or a Dirichlet alpha > 0") from None
        if values[-1] is not None and not values[-1] > 0:
            raise argparse.ArgumentTypeError(f"{part!r}: a Dirichlet alpha must be > 0")
    return values


def _choices(allowed):
    def parse(text: str) -> list[str]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(allowed)}")
        return values

    return parse


def _size(text: str) -> tuple[int, int]:
    try:
        height, width = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected H,W (two integers), got {text!r}") from None
    return height, width


def build_parser() -> argparse.ArgumentParser:
    from gpcnn.version import __version__

    parser = argparse.ArgumentParser(prog="gpcnn", description=__doc__)
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
            help="how iterations reach the segments (default: the engine's own; 'statement' "
            "runs PostgreSQL as Greenplum does)",
        )
        return p

    db = sub.add_parser("db", help="the embedded PostgreSQL cluster")
    db.add_argument("action", choices=["start", "stop", "status", "url", "destroy"])
    db.set_defaults(func=cmd_db)

    doctor = with_database(sub.add_parser("doctor", help="check the database can run gpcnn"))
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(func=cmd_doctor)

    inst = with_database(sub.add_parser("install", help="install or upgrade gpcnn's functions"))
    inst.set_defaults(func=cmd_install)

    uninst = with_database(sub.add_parser("uninstall", help="remove gpcnn's functions and tables"))
    uninst.add_argument("--keep-data", action="store_true", help="keep runs and the catalog")
    uninst.set_defaults(func=cmd_uninstall)

    runs = with_database(sub.add_parser("runs", help="stored runs: list, show, delete"))
    runs.add_argument("action", choices=["list", "show", "delete"])
    runs.add_argument("run_ids", nargs="*", type=int)
    runs.add_argument("--json", action="store_true", help="list or show as JSON")
    runs.set_defaults(func=cmd_runs)

    models = with_database(sub.add_parser("models", help="the model library: list, show, delete"))
    models.add_argument("action", choices=["list", "show", "delete"])
    models.add_argument("names", nargs="*")
    models.add_argument("--json", action="store_true", help="list as JSON")
    models.set_defaults(func=cmd_models)

    tables = with_database(sub.add_parser("tables", help="image tables: list, drop"))
    tables.add_argument("action", choices=["list", "drop"])
    tables.add_argument("tables", nargs="*", help="tables to drop ([schema.]name)")
    tables.add_argument("--missing-ok", action="store_true", help="no error for absent tables")
    tables.add_argument(
        "--staging", action="store_true", help="drop the tables fit() staged for arrays"
    )
    tables.set_defaults(func=cmd_tables)

    load = with_database(
        sub.add_parser("load", help="load a standard image dataset into segment tables")
    )
    source = load.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", choices=DATASET_NAMES)
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
    load.set_defaults(func=cmd_load)

    def with_study(p: argparse.ArgumentParser, out: str, iterations: int):
        with_database(p)
        p.add_argument("--out", default=out, help="folder for history.csv, figures, report.md")
        p.add_argument(
            "--iterations",
            type=int,
            default=iterations,
            help="iterations at one merge per epoch (= epochs of data per run)",
        )
        p.add_argument("--model", default="small-cnn", choices=list(MODELS))
        p.add_argument("--optimizer", default="sgd", choices=list(OPTIMIZERS))
        p.add_argument(
            "--optimizer-state",
            type=_choices(OPTIMIZER_STATES),
            default=["reset"],
            help="policies, comma-separated: reset,local,average",
        )
        p.add_argument("--learning-rate", type=float, default=0.05)
        p.add_argument(
            "--scale-lr", action="store_true", help="learning rate x K (the linear scaling rule)"
        )
        p.add_argument("--batch-size", type=int, default=32)
        p.add_argument(
            "--seeds", type=_int_list, default=[0], help="seeds, comma-separated, e.g. 0,1,2"
        )
        p.add_argument(
            "--skew",
            type=_skews,
            default=[None],
            help="segments' label skew, comma-separated: iid or a Dirichlet alpha, e.g. iid,1,0.1",
        )
        p.add_argument("--target", type=float, help="report epochs to this validation accuracy")
        p.add_argument(
            "--shuffle",
            action="store_true",
            help="train each buffer in a new order every iteration (default: the stored order)",
        )
        return p

    converge = with_study(
        sub.add_parser("converge", help="run a convergence study"), "study-out", 20
    )
    converge.add_argument("--dataset", required=True, choices=DATASET_NAMES)
    converge.add_argument("--path", help="file or folder of the dataset (default per dataset)")
    converge.add_argument(
        "--segments", type=_int_list, default="1,2,4,8", help="K values, comma-separated"
    )
    converge.add_argument(
        "--merge",
        type=_choices(RULES),
        default=",".join(RULES),
        help=f"rules, comma-separated: {','.join(RULES)}",
    )
    converge.add_argument(
        "--merges-per-epoch",
        type=_schedules,
        default="1",
        help="comma-separated, e.g. 1,4; a schedule per epoch with slashes, the last repeating: "
        "8/8/1 (post-local SGD)",
    )
    converge.add_argument(
        "--merge-option",
        type=_merge_option,
        action="append",
        metavar="NAME=VALUE[,VALUE...]",
        help="a rule option for every rule run (repeatable; several values: a run each), "
        "e.g. mu=0.01,0.1 (docs/merge.md)",
    )
    converge.set_defaults(func=cmd_converge)

    mop = with_study(
        sub.add_parser("mop", help="the model hopper against the merge (study part h)"),
        "study-out-h",
        15,
    )
    mop.add_argument("--dataset", required=True, choices=DATASET_NAMES)
    mop.add_argument("--path", help="file or folder of the dataset (default per dataset)")
    mop.add_argument("--segments", type=_int_list, default="4", help="K")
    mop.add_argument(
        "--merge", type=_choices(RULES), default="average,bmuf", help="rules to compare with"
    )
    mop.add_argument(
        "--configs",
        required=True,
        help="optimizer:learning_rate:batch_size items, comma-separated, e.g. momentum:0.01:32",
    )
    mop.set_defaults(func=cmd_mop)

    demo = with_study(
        sub.add_parser("demo", help="the quick-start job (a short study)"), "demo-out", 5
    )
    demo.add_argument(
        "--dataset",
        default="fashion-mnist",
        choices=DATASET_NAMES,
        help="another data set for the same preset (the tests use mnist-sample)",
    )
    demo.set_defaults(func=cmd_demo)
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
        text = str(getattr(e, "orig", None) or e).strip()
        print(
            f"gpcnn: error: {text.splitlines()[0] if text else type(e).__name__}", file=sys.stderr
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
