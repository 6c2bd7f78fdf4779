"""The study's tables for docs/convergence.md, from each part's committed history.csv.

    .venv/bin/python reproduce/report.py docs/img/study/a --target 0.9

Prints the part's report (``gpcnn.study.report``): validation accuracy and loss per setting as mean ± sd
over seeds at epochs 1, 5, 10, 15, each setting's gap to one worker with its verdict (real only
beyond twice the standard error of the difference of the means), epochs to the target, and the
segments of label-skewed settings; with ``--seconds`` (``reproduce/seconds.py``'s medians) the
time to the target too. The numbers come from ``history.csv``, not from the run files,
so what the docs quote is what is committed; ``--figures`` redraws the part's figures too.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpcnn.study import report
from gpcnn.study.experiments import STUDY_RULES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", type=Path, help="a study part's folder, e.g. docs/img/study/a")
    parser.add_argument("--target", type=float, default=None)
    parser.add_argument(
        "--seconds", type=Path, help="reproduce/seconds.py's result: adds the time to target"
    )
    parser.add_argument("--figures", action="store_true")
    args = parser.parse_args()
    rows = report.read_csv(args.part / "history.csv")
    seconds = json.loads(args.seconds.read_text())["median"] if args.seconds else None
    print(report.report(rows, args.target, report.collect_segments(args.part), seconds))
    if args.figures:
        from gpcnn.study import plots

        plots.write_figures(rows, args.part, STUDY_RULES)


if __name__ == "__main__":
    main()
