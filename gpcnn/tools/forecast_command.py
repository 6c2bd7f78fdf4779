"""``gpcnn forecast`` and ``gpcnn plan``: their arguments and what they run (``gpcnn.forecast`` and
``gpcnn.plan`` on a table, with a named model or one from the model library)."""

from __future__ import annotations

import argparse

from gpcnn.estimator.forecasting import forecast
from gpcnn.estimator.named_models import MODELS, OPTIMIZERS, optimizer
from gpcnn.estimator.planning import plan
from gpcnn.fit.rules import RULES
from gpcnn.tools import study_arguments
from gpcnn.tools.commands import connect_from
from gpcnn.tools.help_texts import subcommand


def _common(args: argparse.Namespace) -> dict:
    """The arguments a forecast and a plan share, as their keyword arguments."""
    return dict(
        epochs=args.epochs,
        segments=args.segments,
        validation_table=args.validation_table,
        seed=args.seed,
        optimizer=optimizer(args.optimizer, args.learning_rate),
        learning_rate=None,
        batch_size=args.batch_size,
        verbose=1,
    )


def cmd_forecast(args: argparse.Namespace) -> int:
    model = MODELS.get(args.model, args.model)  # else a name in the model library
    found = forecast(
        connect_from(args),
        args.table,
        model,
        merge=args.merge,
        merges_per_epoch=args.merges_per_epoch,
        redealt=args.redealt,
        shared_sample=args.shared_sample,
        **_common(args),
    )
    print(f"forecast for {args.table}: {found.message()}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    model = MODELS.get(args.model, args.model)
    made = plan(connect_from(args), args.table, model, tolerance=args.tolerance, **_common(args))
    print(made.text())
    return 0


def _with_pilots(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--table", required=True, help="the image table the fit will train on")
    p.add_argument("--validation-table", required=True, help="the table the pilots validate on")
    p.add_argument(
        "--model",
        default="bn-cnn",
        help=f"one of {', '.join(MODELS)}, or a name in the model library",
    )
    p.add_argument("--epochs", type=float, required=True, help="the epoch the fit ends at")
    p.add_argument("--segments", type=study_arguments.positive_int, help="K (default: the table's)")
    p.add_argument("--optimizer", default="momentum", choices=OPTIMIZERS, help="each segment's")
    p.add_argument("--learning-rate", type=float, default=0.01, help="the optimizer's")
    p.add_argument(
        "--batch-size", type=study_arguments.positive_int, default=32, help="images per batch"
    )
    p.add_argument("--seed", type=int, default=0, help="the pilots' seed")
    return p


def add_parsers(sub, with_database) -> None:
    """``gpcnn forecast``'s and ``gpcnn plan``'s parsers, added to the subcommands ``sub``."""
    forecasting = _with_pilots(
        with_database(
            subcommand(
                sub,
                "forecast",
                "forecast a fit's gap to one worker, with an interval, from two short pilots",
                "gpcnn forecast --table fm.train --validation-table fm.test --model bn-cnn "
                "--segments 8 --epochs 15 --merge bmuf",
            )
        )
    )
    forecasting.add_argument(
        "--merge", default="average", choices=list(RULES), help="the merge rule"
    )
    forecasting.add_argument(
        "--merges-per-epoch", type=study_arguments.positive_int, default=1, help="merges per epoch"
    )
    remedy = forecasting.add_mutually_exclusive_group()
    remedy.add_argument(
        "--redealt", action="store_true", help="forecast the table re-dealt IID over --segments"
    )
    remedy.add_argument(
        "--shared-sample",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="forecast the table with a shared sample of this share added (e.g. 0.05)",
    )
    forecasting.set_defaults(func=cmd_forecast)
    planned = _with_pilots(
        with_database(
            subcommand(
                sub,
                "plan",
                "choose the cheapest setting whose forecast stays within a tolerance of one worker",
                "gpcnn plan --table fm.train --validation-table fm.test --segments 16 --epochs 15",
            )
        )
    )
    planned.add_argument(
        "--tolerance", type=float, default=1.0, help="points below one worker the fit may end"
    )
    planned.set_defaults(func=cmd_plan)
