"""``gpcnn forecast``: its arguments and what it runs (``gpcnn.forecast`` on a table, with a named
model or one from the model library)."""

from __future__ import annotations

import argparse

from gpcnn.estimator.forecasting import forecast
from gpcnn.estimator.named_models import MODELS, OPTIMIZERS, optimizer
from gpcnn.fit.rules import RULES
from gpcnn.tools import study_arguments
from gpcnn.tools.commands import connect_from
from gpcnn.tools.help_texts import subcommand


def cmd_forecast(args: argparse.Namespace) -> int:
    model = MODELS.get(args.model, args.model)  # else a name in the model library
    found = forecast(
        connect_from(args),
        args.table,
        model,
        epochs=args.epochs,
        segments=args.segments,
        validation_table=args.validation_table,
        seed=args.seed,
        merge=args.merge,
        merges_per_epoch=args.merges_per_epoch,
        optimizer=optimizer(args.optimizer, args.learning_rate),
        learning_rate=None,
        batch_size=args.batch_size,
        verbose=1,
    )
    print(f"forecast for {args.table}: {found.message()}")
    return 0


def add_parser(sub, with_database) -> None:
    """``gpcnn forecast``'s parser, added to the subcommands ``sub``."""
    p = with_database(
        subcommand(
            sub,
            "forecast",
            "forecast a fit's gap to one worker, with an interval, from two short pilots",
            "gpcnn forecast --table fm.train --validation-table fm.test --model bn-cnn "
            "--segments 8 --epochs 15 --merge bmuf",
        )
    )
    p.add_argument("--table", required=True, help="the image table the fit will train on")
    p.add_argument("--validation-table", required=True, help="the table the pilots validate on")
    p.add_argument(
        "--model",
        default="bn-cnn",
        help=f"one of {', '.join(MODELS)}, or a name in the model library",
    )
    p.add_argument("--epochs", type=float, required=True, help="the epoch the forecast is for")
    p.add_argument("--segments", type=study_arguments.positive_int, help="K (default: the table's)")
    p.add_argument("--merge", default="average", choices=list(RULES), help="the merge rule")
    p.add_argument(
        "--merges-per-epoch", type=study_arguments.positive_int, default=1, help="merges per epoch"
    )
    p.add_argument("--optimizer", default="momentum", choices=OPTIMIZERS, help="each segment's")
    p.add_argument("--learning-rate", type=float, default=0.01, help="the optimizer's")
    p.add_argument("--batch-size", type=study_arguments.positive_int, default=32)
    p.add_argument("--seed", type=int, default=0, help="the pilots' seed")
    p.set_defaults(func=cmd_forecast)
