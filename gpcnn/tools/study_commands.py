"""The command line's study commands, ``converge``, ``mop`` and ``demo``: their arguments and what
they run (the study is imported here and nowhere else outside ``study/``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpcnn.data.by_name import DATASET_NAMES
from gpcnn.estimator import OPTIMIZER_STATES
from gpcnn.estimator.named_models import MODELS, OPTIMIZERS
from gpcnn.study.experiments import STUDY_RULES
from gpcnn.tools import study_arguments
from gpcnn.tools.commands import connect_from
from gpcnn.tools.help_texts import subcommand


def _plan_options(args: argparse.Namespace) -> dict:
    """``plan``'s settings from the study's arguments (the skews aside)."""
    return dict(
        learning_rate=args.learning_rate,
        batch_size=args.batch_size,
        seeds=args.seeds,
        optimizer_states=args.optimizer_state,
        merge_options=study_arguments.option_sets(getattr(args, "merge_option", None) or []),
        optimizer=args.optimizer,
        shuffle=args.shuffle,
        scale_lr=args.scale_lr,
    )


def _study(args: argparse.Namespace, dataset: str, segments, rules, merges, epochs) -> int:
    from gpcnn.study.experiments import plan, run_study
    from gpcnn.study.own_data import is_library_model

    db = connect_from(args)
    specs = plan(
        dataset,
        segments,
        rules,
        merges,
        epochs,
        skews=args.skew,
        shared_samples=getattr(args, "shared_sample", [None]),
        layouts=getattr(args, "distribute_by", [None]),
        model=args.model,
        library_model=is_library_model(args.model),
        **_plan_options(args),
    )
    print(f"convergence study: {len(specs)} runs into {args.out}/")
    run_study(db, specs, args.out, path=getattr(args, "path", None), target=args.target)
    return _outputs(args)


def _on_table(args: argparse.Namespace) -> int:
    """``converge --table``: the study on the user's table of images and model."""
    if args.shared_sample != [None]:
        raise ValueError("--shared-sample is for the study's own tables: run --table without it")
    from gpcnn.study.experiments import converge_on_table
    from gpcnn.study.own_data import SourceTable

    source = SourceTable(
        args.table,
        x_column=args.x_column,
        y_column=args.y_column,
        id_column=args.id_column,
        normalized=args.normalized,
        class_values=tuple(args.class_values) if args.class_values else None,
        validation_table=args.validation_table,
    )
    print(f"convergence study of {args.table} with model {args.model} into {args.out}/")
    converge_on_table(
        connect_from(args),
        source,
        args.model,
        args.segments,
        args.merge,
        args.merges_per_epoch,
        args.iterations,
        args.out,
        layouts=args.distribute_by,
        keep_tables=args.keep_tables,
        target=args.target,
        skews=args.skew,
        **_plan_options(args),
    )
    return _outputs(args)


def _outputs(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    print(f"history: {out / 'history.csv'}\nreport:  {out / 'report.md'}")
    print("figures:\n" + "\n".join(f"  {p}" for p in sorted(out.glob("*.png"))))
    return 0


def cmd_converge(args: argparse.Namespace) -> int:
    if args.table is not None:
        return _on_table(args)
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
    from gpcnn.study import hopper_vs_merge

    runs = hopper_vs_merge.plan(
        args.dataset,
        hopper_vs_merge.parse_configurations(args.configs),
        args.merge,
        args.segments[0],
        args.iterations,
        model=args.model,
        seeds=args.seeds,
        shuffle=args.shuffle,
        optimizer_state=args.optimizer_state[0],
    )
    print(f"MOP against the merge: {sum(map(len, runs.values()))} runs into {args.out}/")
    print(
        hopper_vs_merge.run_part(
            connect_from(args), runs, args.out, path=args.path, target=args.target
        )
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """A short preset of the study: one worker, and K=4 without merge, with MADlib's average and
    with BMUF, on real Fashion-MNIST in the embedded database."""
    from gpcnn.engines.install import install
    from gpcnn.tools.environment import check_environment

    db = connect_from(args)
    install(db)  # the quick start sets everything up, upgrades included
    print(check_environment(db), end="\n\n")
    return _study(
        args, args.dataset, [4], ["single", "none", "average", "bmuf"], [1], args.iterations
    )


def cmd_study_docs(args: argparse.Namespace) -> int:
    """Render the marked numbers of the study's pages from the stored results (``--check``: only
    say which differ, and fail if any do)."""
    from gpcnn.study import doc_numbers
    from gpcnn.study.doc_sources import facts

    root = Path(args.root)
    fact = facts(root)
    if args.check:
        stale = doc_numbers.differences(root, fact)
        for span, rendered in stale:
            print(f"{span.page}:{span.line}: {span.key}: {span.text!r} should be {rendered!r}")
        return 1 if stale else 0
    for page in doc_numbers.rewrite(root, fact):
        print(f"rewrote {page}")
    return 0


def add_parsers(sub, with_database) -> None:
    """The study commands' parsers, added to the subcommands ``sub``; ``with_database`` adds the
    options that name the database."""

    def with_study(p: argparse.ArgumentParser, out: str, iterations: int, stored: bool = False):
        with_database(p)
        p.add_argument("--out", default=out, help="folder for history.csv, figures, report.md")
        p.add_argument(
            "--iterations",
            type=study_arguments.positive_int,
            default=iterations,
            help="iterations at one merge per epoch (= epochs of data per run)",
        )
        if stored:
            p.add_argument(
                "--model",
                default="small-cnn",
                help=f"one of the study's models ({', '.join(MODELS)}) or a name in the model "
                "library (gpcnn.store_model)",
            )
        else:
            p.add_argument(
                "--model", default="small-cnn", choices=list(MODELS), help="the study's model"
            )
        p.add_argument(
            "--optimizer",
            default="sgd",
            choices=list(OPTIMIZERS),
            help="each segment's optimizer",
        )
        p.add_argument(
            "--optimizer-state",
            type=study_arguments.choices(OPTIMIZER_STATES),
            default=["reset"],
            help="policies, comma-separated: reset,local,average",
        )
        p.add_argument(
            "--learning-rate",
            type=float,
            default=0.05,
            help="the optimizer's learning rate",
        )
        p.add_argument(
            "--scale-lr", action="store_true", help="learning rate x K (the linear scaling rule)"
        )
        p.add_argument(
            "--batch-size",
            type=study_arguments.positive_int,
            default=32,
            help="images per batch on each segment",
        )
        p.add_argument(
            "--seeds",
            type=study_arguments.int_list,
            default=[0],
            help="seeds, comma-separated, e.g. 0,1,2",
        )
        p.add_argument(
            "--skew",
            type=study_arguments.skews,
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
        subcommand(
            sub,
            "converge",
            "run a convergence study: one worker against K segments, with and without merge",
            "gpcnn converge --dataset fashion-mnist --segments 4,8 --merge single,average,bmuf",
            "gpcnn converge --table shop.images --x-column img --y-column label --model my-cnn",
        ),
        "study-out",
        20,
        stored=True,
    )
    converge.add_argument(
        "--shared-sample",
        type=study_arguments.fractions,
        default=[None],
        help="a fraction of the table every segment also trains on (the same images on each), "
        "comma-separated: none or 0 < p <= 0.5, e.g. none,0.01,0.05",
    )
    data = converge.add_mutually_exclusive_group(required=True)
    data.add_argument(
        "--dataset",
        choices=DATASET_NAMES,
        help="the data set to study, read from its files (--path)",
    )
    data.add_argument(
        "--table",
        metavar="SCHEMA.TABLE",
        help="a table of your images, one row per image (pack_table's columns below), packed "
        "for each K (IID, or as --distribute-by lays it out)",
    )
    converge.add_argument(
        "--distribute-by",
        type=study_arguments.layouts,
        default=[None],
        metavar="LAYOUTS",
        help="--table's layouts to compare, comma-separated: iid, or a column whose equal values "
        "stay on one segment (as DISTRIBUTED BY keeps them), e.g. iid,site",
    )
    converge.add_argument("--x-column", default="x", help="--table's pixels column")
    converge.add_argument("--y-column", default="y", help="--table's labels column")
    converge.add_argument("--id-column", default="id", help="--table's image ids column")
    converge.add_argument(
        "--normalized", action="store_true", help="--table's pixels are in 0..1, not 0..255"
    )
    converge.add_argument(
        "--class-values",
        type=lambda text: [v.strip() for v in text.split(",")],
        help="--table's labels in class order, comma-separated (default: sorted)",
    )
    converge.add_argument(
        "--validation-table",
        metavar="SCHEMA.TABLE",
        help="--table's held-out rows, same columns (default: validate on the rows trained on)",
    )
    converge.add_argument(
        "--keep-tables",
        action="store_true",
        help="keep --table's packed copies (default: dropped when the study ends)",
    )
    converge.add_argument("--path", help="file or folder of the dataset (default per dataset)")
    converge.add_argument(
        "--segments",
        type=study_arguments.int_list,
        default="1,2,4,8",
        help="K values, comma-separated",
    )
    converge.add_argument(
        "--merge",
        type=study_arguments.choices(STUDY_RULES),
        default=",".join(STUDY_RULES),
        help=f"rules, comma-separated: {','.join(STUDY_RULES)}",
    )
    converge.add_argument(
        "--merges-per-epoch",
        type=study_arguments.schedules,
        default="1",
        help="comma-separated, e.g. 1,4; a schedule per epoch with slashes, the last repeating: "
        "8/8/1 (post-local SGD)",
    )
    converge.add_argument(
        "--merge-option",
        type=study_arguments.merge_option,
        action="append",
        metavar="NAME=VALUE[,VALUE...]",
        help="a rule option for every rule run (repeatable; several values: a run each), "
        "e.g. mu=0.01,0.1 (docs/merge.md)",
    )
    converge.set_defaults(func=cmd_converge)

    mop = with_study(
        subcommand(
            sub,
            "mop",
            "compare the model hopper with merged training on the same configurations",
            "gpcnn mop --dataset fashion-mnist --configs momentum:0.01:32,adam:0.001:64",
        ),
        "study-out-h",
        15,
    )
    mop.add_argument(
        "--dataset",
        required=True,
        choices=DATASET_NAMES,
        help="the data set to study, read from its files (--path)",
    )
    mop.add_argument("--path", help="file or folder of the dataset (default per dataset)")
    mop.add_argument("--segments", type=study_arguments.int_list, default="4", help="K")
    mop.add_argument(
        "--merge",
        type=study_arguments.choices(STUDY_RULES),
        default="average,bmuf",
        help="rules to compare with",
    )
    mop.add_argument(
        "--configs",
        required=True,
        help="optimizer:learning_rate:batch_size items, comma-separated, e.g. momentum:0.01:32 "
        "(they set --optimizer, --learning-rate and --batch-size)",
    )
    mop.set_defaults(func=cmd_mop)

    demo = with_study(
        subcommand(
            sub,
            "demo",
            "run the quick start's short study, with its figures",
            "gpcnn demo",
            "gpcnn demo --dataset mnist-sample --iterations 2",
        ),
        "demo-out",
        5,
    )
    demo.add_argument(
        "--dataset",
        default="fashion-mnist",
        choices=DATASET_NAMES,
        help="another data set for the same preset (the tests use mnist-sample)",
    )
    demo.set_defaults(func=cmd_demo)

    docs = subcommand(
        sub,
        "study-docs",
        "render the measured numbers of the study's pages from its stored results",
        "gpcnn study-docs --check   # after rerunning a part: which numbers changed",
    )
    docs.add_argument("--root", default=".", help="the repository's root (default: here)")
    docs.add_argument(
        "--check", action="store_true", help="change nothing: list the numbers that differ"
    )
    docs.set_defaults(func=cmd_study_docs)
