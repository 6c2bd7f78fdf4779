"""``gpcnn.forecast``: before a long fit, the gap to one worker it is heading for, from two short
pilots on the user's own table and model — one worker, and the fit's setting at its K — and the
forecast law (``gpcnn.fit.forecast.pilot_law``). The pilots are ordinary runs, reused by a later
forecast of the same table, model and parameters; the setting's pilot on the table itself can be
continued into the long fit (``fit(table, resume=...)``)."""

from __future__ import annotations

import logging
from typing import Any

from gpcnn.data.dealing import check_shared_sample
from gpcnn.data.redealing import add_shared_sample, redeal
from gpcnn.data.tables import ImageTable, describe
from gpcnn.engines import Database, connect
from gpcnn.estimator.greenplum_cnn import GreenplumCNN
from gpcnn.fit import runs
from gpcnn.fit.forecast.early_warning import CALIBRATED_LAYERS, layer_signature
from gpcnn.fit.forecast.pilot_law import PILOT_EPOCHS, GapForecast, gap_forecast
from gpcnn.fit.forecast.pilots import ONE_WORKER, epoch_seconds, pilot_table
from gpcnn.fit.validation import check_model_fits, validation_source

LOG = logging.getLogger("gpcnn")


def forecast(
    database: Database | str | None,
    table,
    model: Any,
    *,
    epochs: float,
    segments: int | None = None,
    validation_table=None,
    seed: int = 0,
    redealt: bool = False,
    shared_sample: float = 0.0,
    **params: Any,
) -> GapForecast:
    """Forecast a fit's gap to one worker at epoch ``epochs``, with a 90 % interval, before it runs.

    Two pilots of 3 epochs are trained first (or reused): one worker on a one-segment copy of
    the table, and the fit's own setting (``merge``, ``merges_per_epoch``, ...) at ``segments``
    on the table itself (or on an IID copy dealt over ``segments`` when that differs from the
    table's). Their gap at epoch 3, scaled by how the study's gaps decayed from epoch 3 to
    ``epochs`` (more slowly on a label-skewed table), is the forecast. A pilot stored before
    (a finished run of the same table, architecture and result-changing parameters) is reused;
    its initial weights are not compared, so give a model function and a seed for pilots that
    stand for the fit.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    table : str or (schema, table)
        The image table the fit will train on.
    model : keras.Model, str or callable
        As ``GreenplumCNN``'s ``model``.
    epochs : float
        The epoch of the fit the forecast is for (at least 1).
    segments : int, optional
        K of the fit (default: the table's segments).
    validation_table : str or (schema, table)
        The table both pilots validate on: the gap is in validation accuracy.
    seed : int, default 0
        The pilots' seed (and the copies' deal).
    redealt : bool, default False
        Forecast the fit on the table dealt again IID over ``segments`` (``gpcnn.redeal``),
        the remedy for a label-skewed table whose rows may move.
    shared_sample : float, default 0
        Forecast the fit on the table with a shared IID sample of this share of the images
        added beside each segment's own (``gpcnn.add_shared_sample``, e.g. 0.05): the remedy
        when the rows must stay where they are.
    **params
        Any other ``GreenplumCNN`` parameter of the fit (``merge``, ``merges_per_epoch``,
        ``optimizer``, ``learning_rate``, ``batch_size``, ...).

    Returns
    -------
    GapForecast
        ``gap`` (points below one worker; negative: above), ``low`` and ``high`` (the 90 %
        interval), the pilots' gap at epoch 3, the table's skew index, the setting's seconds per
        epoch, ``rests_on``: what the law was calibrated on, and where this forecast differs, and
        ``pilot_runs``: the runs of the setting's and the one worker's pilots (continue the
        setting's into the fit with ``fit(table, resume=...)``, on the table its run names).

    Raises
    ------
    ValueError
        Before any pilot: no validation table, ``epochs`` < 1, ``segments`` < 1 or more than
        the table's images, a merge schedule (a list), parameters or a model the fit refuses.
    TableError
        ``table`` or ``validation_table`` is not an image table.

    Examples
    --------
    >>> f = gpcnn.forecast(db, "fm.train", gpcnn.models.bn_cnn, epochs=15, segments=8,
    ...                    validation_table="fm.test", merge="bmuf")  # doctest: +SKIP
    >>> print(f.message())  # doctest: +SKIP
    """
    db = connect(database)
    info = describe(db, table)
    k = info.segments if segments is None else int(segments)
    _check(info, k, epochs, validation_table, params)
    if shared_sample:
        check_shared_sample(shared_sample)
    if shared_sample and (redealt or k != info.segments):
        raise ValueError(
            f"shared_sample={shared_sample!r} keeps every row on its segment: it cannot be "
            f"forecast re-dealt or at another number of segments than {info.table}'s {info.segments}"
        )
    common = {"database": db, "seed": seed, "validation_table": validation_table}
    setting = GreenplumCNN(model, **{**params, **common})
    setting._check_params()
    built = setting._model(info)
    check_model_fits(built, info)
    validation_source(db, validation_table, built, info)
    one_worker = GreenplumCNN(model, **{**params, **common, **ONE_WORKER})
    merges = int(params.get("merges_per_epoch", 1))
    if shared_sample:
        target = _shared(db, info, shared_sample, seed)
    elif k == info.segments and not redealt:
        target = info
    else:
        target = _copy(db, info, k, seed)
    single = _copy(db, info, 1, seed)
    model_json = built.to_json()  # both pilots' architecture (the copies hold the same items)
    pilots = [(setting, target, PILOT_EPOCHS * merges), (one_worker, single, PILOT_EPOCHS)]
    stored = [_stored(db, est, on, model_json, n) for est, on, n in pilots]
    training = [p for p, (run_id, _) in zip(pilots, stored, strict=True) if not run_id]
    _announce(db, info, training, setting.verbose)
    (setting_run, history), (single_run, reference) = (
        done if done[0] else _train(est, on)
        for (est, on, _), done in zip(pilots, stored, strict=True)
    )
    skew = target.label_skew.max if target.label_skew is not None else 0.0
    return gap_forecast(
        _accuracy(reference),
        _accuracy(history),
        epochs,
        segments=k,
        skew_max=skew,
        seconds_per_epoch=sum(r["seconds"] for r in history) / PILOT_EPOCHS,
        rests_on=_rests_on(model_json, target is not info, shared_sample),
        pilot_runs=(setting_run, single_run),
    )


def _check(info: ImageTable, k: int, epochs: float, validation_table, params: dict) -> None:
    if validation_table is None:
        raise ValueError(
            "a forecast compares validation accuracy: give validation_table (a held-out image "
            "table of the same items)"
        )
    if not epochs >= 1:
        raise ValueError(f"epochs={epochs!r}: the forecast is for an epoch of at least 1")
    if k < 1 or k > info.images:
        raise ValueError(f"segments={k}: choose 1 to {info.images} (the images of {info.table})")
    if not isinstance(params.get("merges_per_epoch", 1), int):
        raise ValueError("merges_per_epoch: a schedule (a list) is not forecast; give a count")
    for owned in ("iterations", "warm_start", "database"):
        if owned in params:
            raise ValueError(f"{owned}: the forecast sets it itself (the pilots' length)")


def _copy(db: Database, info: ImageTable, k: int, seed: int) -> ImageTable:
    """The table dealt IID over ``k`` segments beside it (``pilot_table``): made once, reused
    while it holds the same images."""
    name = pilot_table(info.table, k, seed)
    try:
        copy = describe(db, name)
    except ValueError:
        copy = None
    if copy is not None and copy.segments == k and copy.images == info.images:
        return copy
    return redeal(db, info.table, name, segments=k, seed=seed, replace=copy is not None)


def _shared(db: Database, info: ImageTable, fraction: float, seed: int) -> ImageTable:
    """The table with a shared sample of ``fraction`` added (``pilot_table``): made once."""
    name = pilot_table(info.table, info.segments, seed, shared=fraction)
    try:
        return describe(db, name)
    except ValueError:
        return add_shared_sample(db, info.table, name, fraction, seed=seed)


def _stored(
    db: Database, est: GreenplumCNN, info: ImageTable, model_json: str, iterations: int
) -> tuple[int, list[dict]]:
    """(run id, history) of ``est``'s pilot on ``info`` if one is stored: a finished run of the
    same model, result-changing parameters and validation table; else (0, [])."""
    est.set_params(iterations=iterations)
    params = est.stored_params()
    run_id, history = runs.finished_like(
        db,
        str(info.table),
        params,
        model_json,
        iterations,
        validation_table=params["validation_table"],
    )
    return run_id, history[:iterations]


def _announce(db: Database, info: ImageTable, training: list, verbose: int) -> None:
    """What the pilots to train will cost, before the first starts: on the ``gpcnn`` logger,
    and printed unless ``verbose`` is 0 (each pilot then shows its own bar)."""
    if not training:
        said = "both pilots are stored: nothing to train"
    else:
        names = [
            f"{t.segments} segments" if t.segments > 1 else "one worker" for _, t, _ in training
        ]
        measured = [epoch_seconds(db, str(t.table)) for _, t, _ in training]
        seconds = [s for s in measured if s is not None]
        minutes = PILOT_EPOCHS * sum(seconds) / 60
        if len(seconds) < len(measured):
            cost = "the bars show the time left once the first epoch ends"
        else:
            about = "under a minute" if minutes < 1 else f"about {minutes:.0f} minute(s)"
            cost = f"{about}, as fits of these tables took"
        said = (
            f"{len(training)} pilot(s) of {PILOT_EPOCHS} epochs to train ({', '.join(names)}): "
            + cost
        )
    LOG.info("forecast of %s: %s", info.table, said)
    if verbose:
        print(f"Forecast of {info.table}: {said}")


def _train(est: GreenplumCNN, info: ImageTable) -> tuple[int, list[dict]]:
    with est:
        est.fit(str(info.table))
    return est.run_id_, list(est.history_)


def _accuracy(history: list[dict]) -> float:
    row = next((r for r in history if r["epoch"] >= PILOT_EPOCHS), history[-1])
    if row.get("val_accuracy") is None:
        raise ValueError("the pilot recorded no validation accuracy at epoch 3")
    return float(row["val_accuracy"])


def _rests_on(model_json: str, copied: bool, shared: float) -> str:
    calibrated = layer_signature(model_json) == CALIBRATED_LAYERS
    said = (
        "the study's law (bn_cnn, momentum SGD, Fashion-MNIST; held out: 0.3–0.5 points on IID "
        "tables, 1.1–1.6 on skewed ones)"
    )
    if not calibrated:
        said += "; this model is outside what it was calibrated on"
    if shared:
        said += f"; the setting's pilot ran on a copy with a shared sample of {100 * shared:g} %"
    elif copied:
        said += "; the setting's pilot ran on an IID copy dealt over its segments"
    return said
