"""The command line's database commands: ``db``, ``doctor``, ``install``, ``uninstall``, ``runs``,
``models``, ``tables`` and ``load``, each a function of the parsed arguments returning the exit
status."""

from __future__ import annotations

import argparse
import json

from gpcnn.data.by_name import check_path, load_by_name
from gpcnn.engines import connect
from gpcnn.fit.forecast.early_warning import EarlyBasis, early_message, forecast_gap
from gpcnn.fit.forecast.pilots import stored_basis
from gpcnn.tools import embedded


def connect_from(args: argparse.Namespace):
    """The database the arguments name (``--database``, ``--schema``, ``--dispatch``)."""
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
    from gpcnn.data.tables import describe
    from gpcnn.tools.environment import check_environment

    db = connect_from(args)
    report = check_environment(db)
    tables = [describe(db, table) for table in args.table or ()]
    if args.json:
        print(
            json.dumps({**report.as_dict(), "tables": [_table_dict(t) for t in tables]}, indent=2)
        )
        return 0
    print(report)
    for info in tables:
        print(f"\n{_table_text(info)}")
    return 0


def _table_dict(info) -> dict:
    """An image table as ``gpcnn tables show --json`` prints it."""
    from gpcnn.engines.label_skew_sql import segment_distances

    skew = info.label_skew
    return {
        "table": str(info.table),
        "images": info.images,
        "image_shape": list(info.image_shape),
        "num_classes": info.num_classes,
        "class_names": list(info.class_names),
        "distribution": info.distribution,
        "skew": info.skew,
        "source": info.source,
        "buffer_size": info.buffer_size,
        "shared_images": info.shared_images,
        "label_skew": None if skew is None else {"max": skew.max, "mean": skew.mean},
        "segments": [
            {"key": key, "images": images, "class_counts": counts, "label_skew": distance}
            for key, images, counts, distance in zip(
                info.keys,
                info.images_per_segment,
                info.class_counts or [None] * info.segments,
                segment_distances(info.class_counts)
                if info.class_counts
                else [None] * info.segments,
                strict=True,
            )
        ],
    }


def _table_text(info) -> str:
    """An image table as ``gpcnn tables show`` (and ``gpcnn doctor --table``) prints it: what it
    holds, its label skew against the fit's threshold, each segment's images and class mix."""
    from gpcnn.data.label_skew import SKEW_THRESHOLD

    shown = _table_dict(info)
    shape = "x".join(map(str, info.image_shape))
    lines = [
        f"{info.table}: {info.images:,} images {shape}, {info.num_classes} classes, "
        f"{info.segments} segments, buffers of <= {info.buffer_size:,}; dealt "
        f"{info.distribution}{'' if info.skew is None else f' (alpha {info.skew:g})'}; "
        f"source: {info.source or '-'}",
    ]
    if info.label_skew is None:
        lines.append(
            "label skew: not measured (packed before gpcnn measured it): "
            f"gpcnn.measure_skew(db, {str(info.table)!r}) counts it"
        )
    else:
        verdict = "a fit warns" if info.label_skew.max > SKEW_THRESHOLD else "below"
        lines.append(
            f"label skew: {info.label_skew.max:.3f} at the most, {info.label_skew.mean:.3f} "
            f"image-weighted (total-variation distance from the table's mix; {verdict} "
            f"the threshold {SKEW_THRESHOLD})"
        )
    if info.shared_images:
        lines.append(f"shared sample: {info.shared_images:,} images held by every segment")
    lines.append(f"{'key':>5} {'images':>9} {'skew':>6}  images per class")
    for seg in shown["segments"]:
        skew = "-" if seg["label_skew"] is None else f"{seg['label_skew']:.3f}"
        mix = "-" if seg["class_counts"] is None else " ".join(map(str, seg["class_counts"]))
        lines.append(f"{seg['key']:>5} {seg['images']:>9,} {skew:>6}  {mix}")
    return "\n".join(lines)


def cmd_install(args: argparse.Namespace) -> int:
    from gpcnn.engines.install import install
    from gpcnn.engines.roles import role_name

    print(f"installed gpcnn {install(connect_from(args))} into schema {args.schema!r}")
    print(f"ordinary users run it once granted the role: GRANT {role_name(args.schema)} TO <user>")
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    from gpcnn.engines.install import uninstall

    uninstall(connect_from(args), keep_data=args.keep_data)
    kept = " (runs and catalog kept)" if args.keep_data else ""
    print(f"removed gpcnn from schema {args.schema!r}{kept}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from gpcnn.fit import runs

    db = connect_from(args)
    if args.action == "list":
        rows = runs.list_runs(db)
        if args.json:
            print(json.dumps(rows, indent=1))
            return 0
        if not rows:
            print(f"no runs stored in schema {db.schema!r} yet: a fit stores one")
            return 0
        # the last training loss, the last validation values and the best of them over the run
        print(
            f"{'run':>5}  {'status':<13} {'merge':<12} {'iterations':>10} {'epochs':>6} "
            f"{'loss':>7} {'val_acc':>7} {'best_acc':>8} {'val_loss':>8} {'best_loss':>9} "
            f"{'ckpts':>5} {'stored':>9}  table"
        )
        for r in rows:
            stored = f"{r['stored_bytes'] / 1e6:.1f} MB"
            print(
                f"{r['run_id']:>5}  {r['status']:<13} {r['merge']!s:<12} {r['iterations']:>10} "
                f"{_number(r['epochs'], 6, 2)} {_number(r['loss'], 7)} "
                f"{_number(r['val_accuracy'], 7)} {_number(r['best_val_accuracy'], 8)} "
                f"{_number(r['val_loss'], 8)} {_number(r['best_val_loss'], 9)} "
                f"{r['checkpoints']:>5} {stored:>9}  {r['table']}"
            )
        return 0
    if not args.run_ids:
        raise ValueError(f"gpcnn runs {args.action} needs run ids")
    if args.action == "show":
        for run_id in args.run_ids:
            shown = runs.show_run(db, run_id)
            text = None if args.json else _run_text(shown, stored_basis(db, shown))
            print(json.dumps(shown, indent=1) if text is None else text)
    else:
        print(f"deleted {runs.delete_runs(db, args.run_ids)} run(s)")
    return 0


HISTORY_COLUMNS = (
    "iteration",
    "epoch",
    "loss",
    "accuracy",
    "val_loss",
    "val_accuracy",
    "seconds",
    "drift_ratio",
)


def _number(value, width: int, digits: int = 4) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def _run_text(shown: dict, basis: EarlyBasis | None = None) -> str:
    """A run as ``gpcnn runs show`` prints it: its summary, then one line per iteration, each
    followed by its diagnostics (spread and merged step, and a line per segment), and the early
    warning once epoch 3 has ended."""
    params = shown["params"]
    optimizer = params.get("optimizer")
    if isinstance(optimizer, dict):  # a Keras optimizer object, serialized
        optimizer = optimizer.get("class_name")
    lines = [
        f"run {shown['run_id']}: {shown['status']}, {shown['table']}, merge={shown['merge']}, "
        f"{shown['iterations']} iterations ({shown['epochs'] or 0:g} epochs), "
        f"optimizer={optimizer}, learning_rate={_rate(params.get('learning_rate'))}",
    ]
    if shown["error"]:
        lines.append(f"error: {shown['error']}")
    lines.append("  ".join(f"{c:>12}" for c in HISTORY_COLUMNS))
    for row in shown["history"]:
        lines.append("  ".join(_cell(c, row.get(c)) for c in HISTORY_COLUMNS))
        lines += _diagnostics_lines(row)
    if basis is not None:
        said = early_message(shown["history"], basis)
    else:
        said = None if (found := forecast_gap(shown["history"])) is None else found.message()
    if said is not None:
        lines.append(f"early warning: {said}")
    return "\n".join(lines)


def _rate(value: object) -> str:
    """A learning rate as people write it (a float32 rate stored as 0.1969999998807907 is 0.197)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _cell(column: str, value: object) -> str:
    """One cell of ``runs show``'s table: counts as they are, an epoch to the digits it needs
    (1, 1.25), the rest to 4 decimals."""
    if value is None:
        return f"{'-':>12}"
    if isinstance(value, int):
        return f"{value:>12}"
    if column == "epoch" and isinstance(value, float):
        return f"{value:>12g}"
    return f"{value:>12.4f}"


def _diagnostics_lines(row: dict) -> list[str]:
    """An iteration's diagnostics as ``runs show`` prints them under its line."""
    lines = []
    if "spread" in row:
        lines.append(f"{'':>14}spread {row['spread']:.4g}, merged step {row['merged_step']:.4g}")
    for s in row.get("per_segment", ()):
        lines.append(
            f"{'':>14}segment {s['key']} (shard {s['shard']}): {s['images']} images, "
            f"loss {_number(s.get('loss'), 0)}, accuracy {_number(s.get('accuracy'), 0)}, "
            f"{s['seconds']:.2f} s, step {s['step']:.4g}"
        )
    return lines


def cmd_models(args: argparse.Namespace) -> int:
    from gpcnn.serving import model_library

    db = connect_from(args)
    if args.action == "list":
        rows = model_library.list_models(db)
        if args.json:
            print(json.dumps(rows, indent=1))
            return 0
        if not rows:
            print(f"no models in the library of schema {db.schema!r}: gpcnn.store_model stores one")
        for m in rows:
            weights = f"weights {m['stored_bytes'] / 1e6:.1f} MB" if m["weights"] else "no weights"
            about = f"  {m['description']}" if m["description"] else ""
            print(f"{m['name']}  {weights}, stored {m['created_at'][:19]} by {m['owner']}{about}")
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
    from gpcnn.data.tables import describe, drop_table, list_tables

    db = connect_from(args)
    if args.action == "show":
        if not args.tables:
            raise ValueError("gpcnn tables show needs table names")
        shown = [describe(db, table) for table in args.tables]
        if args.json:
            print(json.dumps([_table_dict(info) for info in shown], indent=1))
        else:
            print("\n\n".join(_table_text(info) for info in shown))
        return 0
    if args.action == "list":
        from gpcnn.serving.predictions import list_prediction_tables

        found = list_tables(db)
        if not found:
            print("no image tables yet: gpcnn load or gpcnn.load_images makes one")
        for info in found:
            shape = "x".join(map(str, info.image_shape))
            print(
                f"{info.table}  {info.images:,} images {shape}, {info.num_classes} classes, "
                f"{info.segments} segments"
            )
        for predictions, source in list_prediction_tables(db):
            print(f"{predictions}  predictions of {source}")
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
        connect_from(args),
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
    from gpcnn.data.loading import check_target
    from gpcnn.data.tables import TableName, load_images

    if args.folder is not None:
        return _load_folder(args)
    check_path(args.dataset, args.path)  # before the database is touched
    if args.table is None and not (args.train_table and args.test_table):
        raise ValueError("give --table, or both --train-table and --test-table")
    train, test = args.train_table, args.test_table
    if args.table is not None:
        base = TableName.parse(args.table)
        train, test = train or base.with_suffix("_train"), test or base.with_suffix("_test")
    targets = {"train": TableName.parse(train), "test": TableName.parse(test)}
    db = connect_from(args)
    with db.connect() as conn:  # fail before loading either split, not between them
        for table in targets.values():
            check_target(conn, db.backend, table.qualified(db.backend), args.replace)
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
