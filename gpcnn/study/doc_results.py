"""The study's stored results as the documentation's numbers read them (``gpcnn.study.doc_facts``,
``doc_seconds``, ``doc_sources``): each part's ``docs/img/study/<part>/history.csv`` grouped by
setting, the timing runs' ``seconds-*.json`` and the benchmarks' JSON, each file read once.

A setting is named by its short name: the setting's name without the dataset and the tokens every
part shares (``short_name``: ``single-k1``, ``average-k4-os-local``,
``scaffold-k4-gn-os-local-skew0.1``; part h's add ``@`` and the configuration); a setting of
another part is ``PART:SETTING``, a sub-folder of a part ``PART.SUB`` (``j.early``).
"""

from __future__ import annotations

import json
from pathlib import Path

from gpcnn.study import report
from gpcnn.study.doc_numbers import MissingSource

STUDY = Path("docs/img/study")
DATASETS = ("fashion-mnist-", "mnist-sample-")
# Tokens of a setting's name that every part shares (the study's defaults): left out of short names.
COMMON = {"m1", "shuffled", "bn", "cnn", "momentum"}


def short_name(first_row: dict) -> str:
    """A setting's short name, from its first history row."""
    name = first_row["setting"]
    for prefix in DATASETS:
        name = name.removeprefix(prefix)
    if first_row.get("configuration"):  # part h: the hopper's configurations share one setting
        return f"{first_row['merge']}@{first_row['configuration']}"
    return "-".join(t for t in name.split("-") if t not in COMMON)


class Results:
    """The stored results under a repository's ``root``, each file read once."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._parts: dict[str, dict[str, list[list[dict]]]] = {}
        self._json: dict[str, dict] = {}

    def file(self, relative: str | Path) -> Path:
        path = self.root / relative
        if not path.is_file():
            raise MissingSource(f"{relative} is not there")
        return path

    def json(self, relative: str | Path) -> dict:
        key = str(relative)
        if key not in self._json:
            self._json[key] = json.loads(self.file(relative).read_text())
        return self._json[key]

    def part(self, part: str) -> dict[str, list[list[dict]]]:
        """Short setting name -> one history per seed, of part ``part``."""
        if part not in self._parts:
            rows = report.read_csv(self.file(STUDY / part.replace(".", "/") / "history.csv"))
            grouped: dict[str, list[list[dict]]] = {}
            for setting, histories in report.settings(_by_configuration(rows)).items():
                short = short_name(histories[0][0])
                if short in grouped:  # two settings would be mixed under one key
                    raise ValueError(f"part {part}: {setting} is {short} too")
                grouped[short] = histories
            self._parts[part] = grouped
        return self._parts[part]

    def setting(self, part: str, setting: str) -> list[list[dict]]:
        """The histories of ``setting`` (``PART:SETTING`` names another part's)."""
        if ":" in setting:
            part, setting = setting.split(":", 1)
        found = self.part(part)
        if setting not in found:
            raise MissingSource(
                f"part {part} has no setting {setting!r}: it has {', '.join(found)}"
            )
        return found[setting]

    def values(
        self, part: str, setting: str, epoch: float, metric: str = "val_accuracy"
    ) -> list[float]:
        """Each seed's ``metric`` (validation accuracy unless given) at ``epoch``."""
        found = [report.at_epoch(h, epoch, metric) for h in self.setting(part, setting)]
        values = [v for v in found if v is not None]
        if not values:
            raise MissingSource(f"{part}:{setting} has no epoch {epoch:g}")
        return values

    def seconds(self, file: str, round_: int | None = None) -> dict[str, float]:
        """Short setting name -> seconds per epoch in ``seconds-FILE.json``: the median over its
        rounds, or round ``round_``'s (from 1)."""
        stored = self.json(STUDY / f"seconds-{file}.json")
        if round_ is None:
            found = stored["median"]
        else:
            found = {name: rounds[round_ - 1] for name, rounds in stored["seconds"].items()}
        return {short_name({"setting": name}): value for name, value in found.items()}


def _by_configuration(rows: list[dict]) -> list[dict]:
    """Part h's rows with each configuration a setting of its own (one setting per rule there)."""
    return [
        {
            **row,
            "run": f"{row['run']}@{row['configuration']}",
            "setting": f"{row['setting']}@{row['configuration']}",
        }
        if row.get("configuration")
        else row
        for row in rows
    ]
