"""Many configurations trained at once by the model hopper (MADlib's
``madlib_keras_fit_multiple_model`` over a ``generate_mst_table``): ``fit_multiple`` takes
configurations (``GreenplumCNN`` parameters each), checks them all, trains them with
``gpcnn.estimator.hopper.rotation`` and hands each back as a fitted ``GreenplumCNN`` (evaluate, score, predict
into a table); ``GreenplumModelSearch`` draws the configurations from a grid or at random, as
scikit-learn's searches do, and picks the best by validation accuracy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sklearn.base import BaseEstimator
from sklearn.model_selection import ParameterGrid, ParameterSampler

from gpcnn.data.tables import ImageTable
from gpcnn.engines import Database, connect
from gpcnn.estimator.greenplum_cnn import GreenplumCNN
from gpcnn.estimator.hopper import rotation
from gpcnn.fit import loop, runs
from gpcnn.fit.validation import Validation, check_model_fits, validation_source
from gpcnn.kernel import keras_setup, wire

# What the hopper decides itself: no merge, one pass over each key per hop, the optimizer state
# travelling with the model.
HOPPER_OWNS = ("merge", "merge_options", "merges_per_epoch", "local_epochs", "optimizer_state")


def _label(index: int, config: Mapping) -> str:
    """A configuration as an error names it: its number and what it sets (the model by name)."""
    shown = []
    for name, value in config.items():
        text = getattr(value, "name", None) if name == "model" else None
        shown.append(f"{name}={text or value!r}")
    return f"configuration {index} ({', '.join(shown)})"


def _checked(db: Database, info: ImageTable, index: int, config: Mapping, common: dict, source):
    """(estimator, options, Keras model, label) of one configuration, or the error that names
    it."""
    label = _label(index, config)
    try:
        owned = [name for name in HOPPER_OWNS if name in config or name in common]
        if owned:
            raise ValueError(f"the hopper sets {', '.join(owned)} itself: leave them out")
        est = GreenplumCNN(**{"verbose": 0, **common, **config, "database": db})
        est._check_params()
        model = est._model(info)
        input_shape = check_model_fits(model, info)
        options = est._segment_options(db, info, input_shape).replace(optimizer_state="local")
        model_json = model.to_json()
        keras_setup.compiled_model(model_json, options.compile)  # refuses a bad optimizer, loss
        validation_source(db, source, model, info)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{label}: {e}") from None
    return est, options, model, label


def fit_multiple(
    database: Database | str | None,
    table,
    configs: Sequence[Mapping[str, Any]],
    *,
    epochs: int = 1,
    validation_table=None,
    resume: Sequence[int] | None = None,
    on_start: Callable[[list[int]], object] | None = None,  # what it returns is ignored
    **common: Any,
) -> list[GreenplumCNN]:
    """Train many configurations at once by the model hopper, each a stored run.

    MADlib's ``madlib_keras_fit_multiple_model``: the models visit the segments in turn, with no
    merge. All configurations are checked before any run is made: a bad one (unknown optimizer, a
    model that does not fit the table, a duplicate) is refused naming it.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None: ``$GPCNN_DATABASE_URL``, else the
        embedded PostgreSQL.
    table : str
        The image table to train on.
    configs : sequence of dict
        ``GreenplumCNN`` parameters, one dict per configuration (``model``, ``optimizer``,
        ``learning_rate``, ``batch_size``, ...).
    epochs : int, default 1
        Passes over the table; each model sees every row once per epoch.
    validation_table : str, optional
        Evaluated after every epoch for every model.
    resume : sequence of int, optional
        The run ids of an earlier call with the same configurations, in order (a run at another
        place or with other parameters is refused), continued from each one's last stored epoch.
    on_start : callable, optional
        Given the run ids before any training, to keep for a resume after the client is killed.
    **common
        ``GreenplumCNN`` parameters shared by every configuration.

    Returns
    -------
    list of GreenplumCNN
        The fitted estimators, in the order of ``configs`` (``run_id_``, ``history_``).

    Raises
    ------
    ValueError
        For a bad configuration, a duplicate, bad ``epochs`` or a ``resume`` that does not match.

    Examples
    --------
    >>> configs = [{"model": models.small_cnn(), "learning_rate": lr} for lr in (0.01, 0.03)]
    >>> ests = gpcnn.fit_multiple(db, "fm.train", configs, epochs=5,
    ...                           validation_table="fm.test")  # doctest: +SKIP
    """
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    if not configs:
        raise ValueError("no configurations: give at least one")
    db = connect(database)
    info = loop.described(db, table)
    checked = [
        _checked(db, info, i, config, common, validation_table) for i, config in enumerate(configs)
    ]
    seen: dict[str, int] = {}
    for i, (est, _, model, label) in enumerate(checked):
        key = json.dumps([model.to_json(), est.stored_params()], sort_keys=True, default=str)
        if key in seen:
            raise ValueError(f"{label} duplicates configuration {seen[key]}: drop one")
        seen[key] = i
    if resume is not None and len(resume) != len(checked):
        raise ValueError(
            f"resume names {len(resume)} runs for {len(checked)} configurations: give the run "
            "ids fit_multiple returned, in order"
        )
    members = []
    table = str(info.table)
    for i, (est, options, model, label) in enumerate(checked):
        model_json = model.to_json()
        params = {
            **est.stored_params(),
            "merge": "hopper",
            "iterations": epochs,
            "hopper": {"configurations": len(checked), "index": i},
        }
        stored = None if resume is None else _resumable(db, table, int(resume[i]), params, label)
        run_id = stored.run_id if stored else runs.create_run(db, table, params, model_json)
        source = validation_source(db, validation_table, model)
        member = rotation.Member(
            label=label,
            run_id=run_id,
            model_json=model_json,
            options=options,
            rate=_rates(model_json, options),
            validation=Validation(db, source, est.validation_freq, model_json, options),
            weights=wire.flatten(model.get_weights()),
        )
        if stored is not None:
            rotation.restore(member, stored)
        members.append(member)
    if on_start is not None:
        on_start([m.run_id for m in members])
    rotation.train(db, info, members, epochs)
    for (est, options, _, _), member in zip(checked, members, strict=True):
        est._adopt(info, member.run_id, member.model_json, options, member.history)
        wire.set_model_weights(est.model_, member.weights)
    return [est for est, *_ in checked]


def _resumable(db: Database, table: str, run_id: int, params: dict, label: str):
    """Run ``run_id`` if it is this configuration at this place in the search (its position sets
    the order it visits the keys in), else a ValueError that says what it is."""
    stored = runs.load_run(db, run_id)
    if stored.table != table:
        raise ValueError(f"{label}: run {run_id} trained another table")
    if not runs.same_result(stored.params, params):
        place = stored.params.get("hopper")
        was = (
            f"configuration {place['index']} of {place['configurations']}"
            if isinstance(place, dict)
            else "not a run of fit_multiple"
        )
        raise ValueError(
            f"{label}: run {run_id} was started with other parameters or at another place in "
            f"the search ({was}): give the run ids fit_multiple returned, in order, with the "
            "same configurations"
        )
    return stored


def _rates(model_json: str, options) -> Any:
    """batches trained so far -> the rate options of a hop: a schedule's step, or the rate."""
    model = keras_setup.compiled_model(model_json, options.compile)
    rate = getattr(model.optimizer, "_learning_rate", None)
    schedules = keras_setup.keras_module().optimizers.schedules
    if isinstance(rate, schedules.LearningRateSchedule):
        return lambda batches: {"optimizer_step": int(batches)}
    value = float(keras_setup.keras_module().ops.convert_to_numpy(model.optimizer.learning_rate))
    return lambda batches: {"learning_rate": value}


class GreenplumModelSearch(BaseEstimator):
    """Model selection by the hopper, as scikit-learn's searches select by cross-validation.

    Every configuration of ``param_grid``, or ``n_iter`` drawn from ``param_distributions``, over
    ``GreenplumCNN`` parameters (model, optimizer, learning_rate, batch_size, ...), trained at
    once for ``epochs`` epochs. The best has the highest last validation accuracy (training
    accuracy without a validation table).

    Parameters
    ----------
    param_grid : dict or list of dict, optional
        As scikit-learn's ``ParameterGrid`` takes it. Give this or ``param_distributions``.
    param_distributions : dict, optional
        As scikit-learn's ``ParameterSampler`` takes it.
    n_iter : int, default 10
        Configurations drawn from ``param_distributions``.
    random_state : int, optional
        The draw's seed.
    epochs : int, default 1
        Passes over the table for every configuration.
    validation_table : str, optional
        Scores the configurations (else their training accuracy does).
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    estimator_params : dict, optional
        ``GreenplumCNN`` parameters every configuration shares.

    Attributes
    ----------
    estimators_ : list of GreenplumCNN
        Fitted, one per configuration.
    cv_results_ : dict
        ``params``, ``run_id``, ``score`` and ``rank``, one entry per configuration.
    best_index_, best_params_, best_score_, best_estimator_
        The best configuration.

    Examples
    --------
    >>> search = gpcnn.GreenplumModelSearch({"learning_rate": [0.01, 0.03]}, epochs=5,
    ...     validation_table="fm.test", database=db,
    ...     estimator_params={"model": models.small_cnn()})
    >>> search.fit("fm.train").best_params_  # doctest: +SKIP
    {'learning_rate': 0.03}
    """

    def __init__(
        self,
        param_grid: Mapping | Sequence[Mapping] | None = None,
        *,
        param_distributions: Mapping | None = None,
        n_iter: int = 10,
        random_state: int | None = None,
        epochs: int = 1,
        validation_table=None,
        database: Database | str | None = None,
        estimator_params: Mapping | None = None,
    ) -> None:
        self.param_grid = param_grid
        self.param_distributions = param_distributions
        self.n_iter = n_iter
        self.random_state = random_state
        self.epochs = epochs
        self.validation_table = validation_table
        self.database = database
        self.estimator_params = estimator_params

    def configurations(self) -> list[dict]:
        """The configurations this search trains, in order.

        Returns
        -------
        list of dict
            ``GreenplumCNN`` parameters, one dict per configuration.
        """
        if (self.param_grid is None) == (self.param_distributions is None):
            raise ValueError("give param_grid or param_distributions, not both or neither")
        if self.param_grid is not None:
            return list(ParameterGrid(self.param_grid))
        return list(
            ParameterSampler(self.param_distributions, self.n_iter, random_state=self.random_state)
        )

    def fit(self, X, y=None, *, resume: Sequence[int] | None = None) -> GreenplumModelSearch:
        """Train every configuration on a table.

        Parameters
        ----------
        X : str
            The image table.
        y : None
            Not used: the table holds the labels.
        resume : sequence of int, optional
            ``cv_results_["run_id"]`` of an interrupted search, to continue it.

        Returns
        -------
        GreenplumModelSearch
            This search, fitted.
        """
        if y is not None:
            raise ValueError(
                "y goes with arrays: the hopper trains a table, which holds its labels"
            )
        configs = self.configurations()
        self.estimators_ = fit_multiple(
            self.database,
            X,
            configs,
            epochs=self.epochs,
            validation_table=self.validation_table,
            resume=resume,
            **dict(self.estimator_params or {}),
        )
        metric = "val_accuracy" if self.validation_table is not None else "accuracy"
        scores = [est.history_[-1][metric] for est in self.estimators_]
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        ranks = [order.index(i) + 1 for i in range(len(scores))]
        self.cv_results_ = {
            "params": configs,
            "run_id": [est.run_id_ for est in self.estimators_],
            "score": scores,
            "rank": ranks,
        }
        self.best_index_ = order[0]
        self.best_params_ = configs[self.best_index_]
        self.best_score_ = scores[self.best_index_]
        self.best_estimator_ = self.estimators_[self.best_index_]
        return self

    def predict(self, X, **kwargs):
        """The best configuration's predictions.

        Parameters
        ----------
        X : str or array-like
            A table or images, as ``GreenplumCNN.predict`` takes them.
        **kwargs
            ``GreenplumCNN.predict``'s options (``output_table=`` writes them into a table).

        Returns
        -------
        ndarray or ImageTable
            As ``GreenplumCNN.predict`` returns.
        """
        return self.best_estimator_.predict(X, **kwargs)

    def score(self, X, y=None) -> float:
        """The best configuration's accuracy.

        Parameters
        ----------
        X : str or array-like
            A table or images.
        y : array-like, optional
            The labels of images (a table holds its own).

        Returns
        -------
        float
            The fraction of images classified correctly.
        """
        return self.best_estimator_.score(X, y)
