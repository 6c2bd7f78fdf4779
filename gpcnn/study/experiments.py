"""The convergence study: every combination of segments × merge rule × merges per epoch, one run each.

Each run's history is kept in ``DIR/runs/<name>.json`` once finished (an interrupted study resumes:
finished runs are reused, a half-done run continues from its last stored iteration in the
database). Then ``DIR/history.csv``, the figures and ``DIR/report.md`` are written from all runs.

Rules: ``single`` (one worker on all the data: K=1, the "without merge" reference), ``none`` (K
workers that never merge), ``average`` (MADlib), ``bmuf``, ``easgd``, ``fedprox``, ``scaffold``,
``fedadam``, ``fedyogi`` (their default options, or those given), and ``sync`` (per-batch
synchronous data parallelism with ``tf.distribute.MirroredStrategy`` on K logical CPUs, outside
the database: the successor of Keras's ``multi_gpu_model``). ``--iterations N`` counts iterations at
one merge per epoch; a run with M merges per epoch runs N·M iterations, a schedule (``8/8/1``:
post-local SGD) the sum of its epochs' counts, so all runs see N epochs.

``converge_on_table`` runs the same study on a table of the user's own images and a model from the
model library (``own_data``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TypedDict

from gpcnn.data import by_name
from gpcnn.data.dealing import check_shared_sample
from gpcnn.data.redealing import add_shared_sample
from gpcnn.data.tables import TableError, describe, load_images
from gpcnn.engines import Database
from gpcnn.estimator import GreenplumCNN
from gpcnn.estimator.named_models import MODELS, OPTIMIZERS, optimizer
from gpcnn.fit import runs
from gpcnn.fit.rules import RULES, check_options
from gpcnn.kernel import keras_setup, wire
from gpcnn.study import own_data, report, sync_reference
from gpcnn.study.specs import RunSpec, merges_in

# The study's references around the registry's rules: one worker, K workers that never merge,
# then every other rule in the registry's order, and synchronous data parallelism.
STUDY_RULES = ("single", "none", *(name for name in RULES if name != "none"), "sync")


def plan(
    dataset: str,
    segments: Sequence[int],
    rules: Sequence[str],
    merges_per_epoch: Sequence[int | Sequence[int]],
    epochs: int,
    *,
    seeds: Sequence[int] = (0,),
    skews: Sequence[float | None] = (None,),
    shared_samples: Sequence[float | None] = (None,),
    layouts: Sequence[str | None] = (None,),
    optimizer_states: Sequence[str] = ("reset",),
    merge_options: Sequence[Mapping[str, float | bool]] = ({},),
    **common,
) -> list[RunSpec]:
    """Every combination, per seed: ``single`` once per merge frequency (it has one worker, so
    no skew, no optimizer-state policy and no rule options), the other rules for each K > 1
    (with one segment they all are ``single``), each skew, optimizer-state policy and set of
    rule options (each checked against every rule but ``single`` before any work), and each shared
    sample (a fraction of the table every segment trains on too; None: none) and, for a table of
    the user's (``from_table``), each layout (a column whose equal values ``pack_table`` keeps on
    one segment; None: IID). A merge
    frequency is a count or a schedule of counts per epoch, the last repeating."""
    unknown = set(rules) - set(STUDY_RULES)
    if unknown:
        raise ValueError(f"unknown rules {sorted(unknown)}: choose from {', '.join(STUDY_RULES)}")
    if common.get("model", "small-cnn") not in MODELS and not common.get("library_model"):
        raise ValueError(f"model {common['model']!r}: choose one of {', '.join(MODELS)}")
    if common.get("from_table") and any(skew is not None for skew in skews):
        raise ValueError("a table of the user's images is dealt IID: run it without a skew")
    if common.get("optimizer", "sgd") not in OPTIMIZERS:
        raise ValueError(f"optimizer {common['optimizer']!r}: one of {', '.join(OPTIMIZERS)}")
    for skew in skews:
        if skew is not None and not skew > 0:
            raise ValueError(f"skew {skew}: a Dirichlet alpha > 0 (or iid)")
    for fraction in (f for f in shared_samples if f is not None):
        check_shared_sample(fraction)
    if common.get("from_table") and any(f is not None for f in shared_samples):
        raise ValueError("a shared sample is for the study's own tables: run --table without it")
    if not common.get("from_table") and any(column is not None for column in layouts):
        raise ValueError("distribute_by lays out a table of your images: give --table with it")
    schedules = [_schedule(m) for m in merges_per_epoch]
    if "sync" in rules and any(len(s) > 1 for s in schedules):
        raise ValueError("sync runs a fixed count of merges per epoch: run it without a schedule")
    for options in (o for o in merge_options if o):
        for rule in (r for r in rules if r != "single"):
            if rule == "sync":
                raise ValueError("sync takes no merge options: run it without them")
            for k in (k for k in segments if k > 1):
                check_options(rule, options, k)
    specs = []
    for seed in seeds:
        for schedule in schedules:
            frequency: _Frequency = {
                "merges_per_epoch": schedule[-1],
                "iterations": merges_in(schedule, epochs),
                "early_merges": schedule[:-1],
            }
            for rule in rules:
                if rule == "single":
                    specs.append(RunSpec(dataset, rule, 1, seed=seed, **frequency, **common))
                    continue
                for k in (k for k in segments if k > 1):
                    for skew, shared, layout, state, options in itertools.product(
                        skews,
                        shared_samples if rule != "sync" else (None,),
                        layouts,
                        optimizer_states if rule != "sync" else ("reset",),
                        merge_options,
                    ):
                        specs.append(
                            RunSpec(
                                dataset,
                                rule,
                                k,
                                seed=seed,
                                skew=skew,
                                shared_sample=shared,
                                distribute_by=layout,
                                optimizer_state=state,
                                merge_options=tuple(dict(options).items()),
                                **frequency,
                                **common,
                            )
                        )
    return list(dict.fromkeys(specs))


class _Frequency(TypedDict):
    """A spec's merge frequency (``RunSpec``'s fields of it)."""

    merges_per_epoch: int
    iterations: int
    early_merges: tuple[int, ...]


def _schedule(merges: int | Sequence[int]) -> tuple[int, ...]:
    schedule = (merges,) if isinstance(merges, int) else tuple(merges)
    if not schedule or not all(isinstance(m, int) and m >= 1 for m in schedule):
        raise ValueError(
            f"merges per epoch {merges!r}: a count >= 1 or a schedule of them (e.g. 8/8/1)"
        )
    return schedule


# -- running ------------------------------------------------------------------------------------


def _tables(db: Database, spec: RunSpec, path, data_cache: dict) -> tuple[str, str]:
    """The study's image tables for this dataset, K, seed and skew (in schema
    ``<gpcnn schema>_images``), loaded once and reused."""
    prefix = f"{db.schema}_images.{spec.dataset.replace('-', '_')}"
    train = f"{prefix}_k{spec.segments}"
    if spec.skew is not None:
        train += f"_skew{spec.skew:g}".replace(".", "_")
    if spec.seed:
        train += f"_s{spec.seed}"
    train, test = f"{train}_train", f"{prefix}_test"
    source = f"{spec.dataset} seed={spec.seed} (study)"
    if spec.skew is not None:
        source += f" label-skew alpha={spec.skew:g}"
    loaded = False
    for table, k, split in ((train, spec.segments, "train"), (test, 2, "test")):
        try:
            info = describe(db, table)
            if info.source == source and info.segments == k:
                continue
        except TableError:
            pass
        loaded = loaded or split == "train"
        if spec.dataset not in data_cache:
            data_cache[spec.dataset] = by_name.load_by_name(spec.dataset, path)[0]
        d = data_cache[spec.dataset]
        x, y = (d.x_train, d.y_train) if split == "train" else (d.x_test, d.y_test)
        skewed = split == "train" and spec.skew is not None
        load_images(
            db,
            table,
            x,
            y,
            segments=k,
            distribution="label-skew" if skewed else "iid",
            skew=spec.skew if skewed else None,
            class_names=d.class_names,
            seed=spec.seed,
            replace=True,
            progress=False,
            source=source,
        )
    if spec.shared_sample is None:
        return train, test
    # "_sh<p>", not "_shared<p>_train": table names stay within gpcnn's 39 bytes
    shared = train.removesuffix("_train") + f"_sh{spec.shared_sample:g}".replace(".", "_")
    try:
        fresh = not loaded and describe(db, shared).shared_images > 0
    except TableError:
        fresh = False
    if not fresh:  # made from this train table, with the run's seed
        add_shared_sample(db, train, shared, spec.shared_sample, seed=spec.seed, replace=True)
    return shared, test


def run_one(
    db: Database,
    spec: RunSpec,
    out: Path,
    *,
    path=None,
    data_cache: dict | None = None,
    progress: bool = True,
    source: own_data.SourceTable | None = None,
) -> list[dict]:
    """One run's history; reused when finished, resumed when stored part-way in the database.
    ``source``: the user's table of images, for a spec ``from_table``."""
    done = out / "runs" / f"{spec.name}.json"
    if done.exists():
        return json.loads(done.read_text())["history"]
    done.parent.mkdir(parents=True, exist_ok=True)
    if spec.from_table:
        assert source is not None  # a spec from_table comes with its table
        train, test = own_data.packed_copies(db, source, spec)
    else:
        train, test = _tables(db, spec, path, {} if data_cache is None else data_cache)
    info = describe(db, train)
    keras_setup.keras_module().utils.set_random_seed(spec.seed)
    model = own_data.model_for(db, spec.model, info.image_shape, info.num_classes)
    if spec.merge == "sync":
        history = sync_reference.in_fresh_process(
            sync_reference.run_sync,
            db,
            spec,
            model.to_json(),
            wire.model_to_bytes(model),
            train,
            test,
            progress,
        )
    else:
        est = GreenplumCNN(
            model,
            optimizer=optimizer(spec.optimizer, spec.effective_learning_rate),
            optimizer_state=spec.optimizer_state,
            learning_rate=spec.effective_learning_rate,
            batch_size=spec.batch_size,
            shuffle=spec.shuffle,
            iterations=spec.iterations,
            merges_per_epoch=list(spec.schedule) if spec.early_merges else spec.merges_per_epoch,
            merge="average" if spec.merge == "single" else spec.merge,
            merge_options=dict(spec.merge_options) or None,
            database=db,
            validation_table=test,
            seed=spec.seed,
            verbose=1 if progress else 0,
        )
        with est:
            est.fit(train, resume=runs.find_unfinished(db, train, est.stored_params()))
        history = est.history_
    segments = {
        "images_per_segment": list(info.images_per_segment),
        "class_counts": info.class_counts,
    }
    done.write_text(
        json.dumps({"spec": asdict(spec), "segments": segments, "history": history}, indent=1)
    )
    return history


def run_study(
    db: Database,
    specs: Sequence[RunSpec],
    out: str | Path,
    *,
    path=None,
    progress: bool = True,
    target: float | None = None,
    source: own_data.SourceTable | None = None,
) -> list[dict]:
    """Run (or reuse) every spec, then write history.csv, the figures and report.md over all the
    finished runs in ``out`` (with epochs to ``target`` validation accuracy, if given).
    ``source``: the user's table of images, for specs ``from_table``."""
    from tqdm.auto import tqdm

    out = Path(out)
    cache: dict = {}
    bar = tqdm(specs, desc="study", unit="run", disable=not progress)
    for spec in bar:
        bar.set_postfix_str(spec.name)
        run_one(db, spec, out, path=path, data_cache=cache, progress=progress, source=source)
    return write_outputs(out, target)


def converge_on_table(
    db: Database,
    source: own_data.SourceTable,
    model: str,
    segments: Sequence[int],
    rules: Sequence[str],
    merges_per_epoch: Sequence[int | Sequence[int]],
    epochs: int,
    out: str | Path,
    *,
    layouts: Sequence[str | None] = (None,),
    keep_tables: bool = False,
    progress: bool = True,
    target: float | None = None,
    **options,
) -> list[dict]:
    """The study (``plan``'s settings: ``options`` are its keyword arguments; no skew) on
    the user's table of images ``source``, packed for each K and seed IID or by each column of
    ``layouts`` (None: IID; a column: its equal values on one segment), with ``model``: one of
    the study's models or a name in the model library. Everything is checked before any work
    (``own_data.check_source``); the packed copies are dropped at the end, finished or not,
    unless ``keep_tables`` (a resumed study reuses them). The rows of history.csv."""
    specs = plan(
        source.table,
        segments,
        rules,
        merges_per_epoch,
        epochs,
        model=model,
        from_table=True,
        library_model=own_data.is_library_model(model),
        layouts=layouts,
        **options,
    )
    own_data.check_source(db, source, model, [c for c in layouts if c is not None])
    try:
        return run_study(db, specs, out, progress=progress, target=target, source=source)
    finally:
        if not keep_tables:
            own_data.drop_copies(db, source, specs)


def write_outputs(out: str | Path, target: float | None = None) -> list[dict]:
    """history.csv, the figures and report.md over every finished run in ``out``; no database
    needed, so figures can be redrawn from the stored runs."""
    from gpcnn.study import plots

    out = Path(out)
    rows = report.collect(out, STUDY_RULES)
    report.write_csv(rows, out / "history.csv")
    plots.write_figures(rows, out, STUDY_RULES)
    text = report.report(rows, target, report.collect_segments(out))
    (out / "report.md").write_text(text)
    return rows
