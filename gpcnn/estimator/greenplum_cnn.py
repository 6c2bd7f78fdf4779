"""``GreenplumCNN``: a scikit-learn style estimator whose ``fit`` trains inside the database.

One iteration = one aggregate query over the image table: every segment trains the current model on
its own buffers, the aggregate's merge combines the segment models, and the merged weights come back
into ``model_``, are evaluated, recorded in ``history_`` and the run tables, and sent out again.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import logging
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError

from gpcnn.data import arrays, staging
from gpcnn.data.tables import ImageTable, TableName, describe
from gpcnn.engines import Database, connect, transport
from gpcnn.engines.base import StoredStart
from gpcnn.engines.install import ensure_installed
from gpcnn.engines.sessions import SegmentSessions
from gpcnn.fit import rules, runs
from gpcnn.fit.errors import TrainingError, database_call
from gpcnn.fit.predictions import write_predictions
from gpcnn.fit.training import Training, evaluate_table, plan_slices
from gpcnn.kernel import segment, wire

PROGRESS_KEYS = ("loss", "accuracy", "val_loss", "val_accuracy")
LOG = logging.getLogger("gpcnn")

# Metrics whose image-weighted mean over segments equals the metric over all images.
MEAN_METRICS = frozenset(
    {
        "accuracy",
        "acc",
        "sparse_categorical_accuracy",
        "categorical_accuracy",
        "binary_accuracy",
        "sparse_top_k_categorical_accuracy",
        "top_k_categorical_accuracy",
        "sparse_categorical_crossentropy",
        "categorical_crossentropy",
        "binary_crossentropy",
        "mean_squared_error",
        "mse",
        "mean_absolute_error",
        "mae",
    }
)
OPTIMIZER_STATES = ("reset", "local", "average")


class GreenplumCNN(ClassifierMixin, BaseEstimator):
    """Train a Keras model data-parallel over the segments of an image table.

    Parameters are stored untouched; ``fit`` never changes ``model``. Learned state ends in ``_``:
    ``model_`` (a local Keras model with the merged weights), ``history_`` (one dict per
    iteration), ``run_id_``, ``segments_``, ``classes_``, ``class_names_``.

    One iteration is one Keras epoch to callbacks: ``iterations`` is the total, like ``epochs``;
    ``validation_freq`` and ``verbose`` (0 silent, 1 a progress bar, 2 a line per iteration) mean
    what they mean in Keras. The learning rate the segments use is set by the client every
    iteration from ``model_``'s optimizer, so ``LearningRateScheduler`` and ``ReduceLROnPlateau``
    work, and a ``LearningRateSchedule`` continues across merges (its step: the batches the
    busiest segment trained so far). Merge options are also reachable as ``merge__<name>``.

    ``shuffle=True`` trains each buffer's images in a new order every iteration (what Keras's
    ``fit`` inside MADlib's transition does); the default keeps the stored order, which the study
    in docs/convergence.md used and the in-process references reproduce.

    Parameters
    ----------
    model : keras.Model
        The CNN; its input is the table's image shape (H, W, C), its last layer has one unit
        per class. Never changed: ``model_`` is a copy.
    optimizer : str or keras.optimizers.Optimizer, default "sgd"
        What each segment trains with.
    learning_rate : float or None, default 0.01
        Replaces the optimizer's rate; None keeps it.
    loss : str, default "sparse_categorical_crossentropy"
    metrics : sequence of str, default ("accuracy",)
        Only metrics that are means over images (they are merged across segments).
    batch_size : int, default 32
    shuffle : bool, default False
        A new order of each buffer's images every iteration.
    iterations : int, default 10
        The total number of merges, like Keras's ``epochs``.
    local_epochs : int, default 1
        Passes over its rows that each segment trains between merges.
    merges_per_epoch : int, default 1
        Merges per pass over the data (each segment trains a slice of its rows in between).
    merge : {"average", "bmuf", "easgd", "none"}, default "average"
        How the segment models are combined (``gpcnn.fit.rules``).
    merge_options : dict, optional
        The rule's options (e.g. BMUF's ``eta``); also ``merge__<name>`` in ``set_params``.
    optimizer_state : {"reset", "local", "average"}, default "reset"
        What becomes of each segment's optimizer state (momentum) across merges.
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    validation_table : str, (schema, table) or None
        A table evaluated after each iteration due (``validation_freq``).
    validation_freq : int or sequence of int, default 1
        As in Keras: every n-th iteration, or the listed ones.
    seed : int, optional
        Makes shuffles and staging reproducible.
    threads_per_segment : int, optional
        TensorFlow threads in each segment (default: the cores shared among the segments).
    verbose : {0, 1, 2}, default 1
        Silent, a progress bar, or a line per iteration.
    warm_start : bool, default False
        ``fit`` continues from ``model_`` up to ``iterations`` in all.

    Attributes
    ----------
    model_ : keras.Model
        A local model with the merged weights.
    history_ : list of dict
        One row per iteration: loss, metrics, val_*, seconds, ...
    run_id_ : int
        The run in ``gpcnn.runs``; ``fit(table, resume=run_id_)`` continues it.
    segments_ : int
    classes_ : ndarray
        ``0..units-1``: labels are class indices.
    class_names_ : tuple of str

    Notes
    -----
    ``X`` is a table name, or images (N, H, W) or (N, H, W, C) with labels ``y`` (staged into a
    table for the estimator's lifetime); 2-D arrays are refused, not guessed at (README's "Use"
    lists how scikit-learn's estimator checks fare).

    Examples
    --------
    >>> import gpcnn
    >>> from gpcnn.study.models import small_cnn
    >>> est = GreenplumCNN(small_cnn(), iterations=10, merge="bmuf", seed=0,
    ...                    database=gpcnn.connect())
    >>> est.fit("fm.train").score("fm.test")  # doctest: +SKIP
    0.87
    """

    def __init__(
        self,
        model: Any,
        *,
        optimizer: str | Any = "sgd",
        learning_rate: float | None = 0.01,
        loss: str = "sparse_categorical_crossentropy",
        metrics: Sequence[str] = ("accuracy",),
        batch_size: int = 32,
        shuffle: bool = False,
        iterations: int = 10,
        local_epochs: int = 1,
        merges_per_epoch: int = 1,
        merge: str = "average",
        merge_options: dict | None = None,
        optimizer_state: str = "reset",
        database: str | Database | None = None,
        validation_table: str | tuple | None = None,
        validation_freq: int | Sequence[int] = 1,
        seed: int | None = None,
        threads_per_segment: int | None = None,
        verbose: int = 1,
        warm_start: bool = False,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.loss = loss
        self.metrics = metrics
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.iterations = iterations
        self.local_epochs = local_epochs
        self.merges_per_epoch = merges_per_epoch
        self.merge = merge
        self.merge_options = merge_options
        self.optimizer_state = optimizer_state
        self.database = database
        self.validation_table = validation_table
        self.validation_freq = validation_freq
        self.seed = seed
        self.threads_per_segment = threads_per_segment
        self.verbose = verbose
        self.warm_start = warm_start

    def __sklearn_tags__(self):
        """What scikit-learn may pass: a table name, or images (N, H, W[, C]) of non-negative
        pixels, dense, with labels; not 2-D feature rows (``gpcnn.data.arrays`` says why), so
        scikit-learn's generic estimator checks, which feed 2-D arrays, are skipped (README's
        "Use" lists how each fares). ``fit(table)`` needs no y: the table holds it."""
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.three_d_array = True
        tags.input_tags.positive_only = True
        tags.input_tags.sparse = False
        tags.target_tags.required = False
        return tags

    def __sklearn_clone__(self) -> GreenplumCNN:
        # The model is never modified, so clones may share it (deep-copying Keras models is slow).
        return type(self)(**self.get_params(deep=False))

    # -- setup ------------------------------------------------------------------------------

    def _check_params(self) -> None:
        if self.merge not in rules.RULES:
            raise ValueError(f"merge={self.merge!r}: choose one of {', '.join(rules.RULES)}")
        if self.optimizer_state not in OPTIMIZER_STATES:
            raise ValueError(
                f"optimizer_state={self.optimizer_state!r}: choose one of {OPTIMIZER_STATES}"
            )
        for name in ("batch_size", "iterations", "local_epochs", "merges_per_epoch"):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.shuffle, bool | np.bool_):
            raise ValueError(f"shuffle must be True or False, got {self.shuffle!r}")
        if self.verbose not in (0, 1, 2) or isinstance(self.verbose, bool):
            raise ValueError(f"verbose must be 0, 1 or 2 (as in Keras), got {self.verbose!r}")
        freq = self.validation_freq
        if isinstance(freq, int | np.integer) and not isinstance(freq, bool):
            if freq < 1:
                raise ValueError(f"validation_freq must be >= 1, got {freq}")
        elif not (isinstance(freq, Sequence) and all(isinstance(i, int) and i >= 1 for i in freq)):
            raise ValueError(
                f"validation_freq must be a positive integer or a list of iterations, got {freq!r}"
            )
        if self.local_epochs > 1 and self.merges_per_epoch > 1:
            raise ValueError("local_epochs > 1 needs merges_per_epoch=1 (one merge per pass)")
        for metric in self.metrics:
            if metric not in MEAN_METRICS:
                raise ValueError(
                    f"metric {metric!r}: only metrics that are means over images can be merged "
                    f"across segments ({', '.join(sorted(MEAN_METRICS))})"
                )

    def _db(self) -> Database:
        """The handle of ``database``: a handle, a URL, or None for $GPCNN_DATABASE_URL or the
        embedded cluster (gpcnn's schema is the handle's)."""
        return connect(self.database)

    def _compile_options(self) -> dict:
        keras = segment.keras_module()
        if isinstance(self.optimizer, str):
            config = {} if self.learning_rate is None else {"learning_rate": self.learning_rate}
            optimizer = keras.optimizers.get({"class_name": self.optimizer, "config": config})
        else:
            optimizer = keras.optimizers.deserialize(keras.optimizers.serialize(self.optimizer))
            if self.learning_rate is not None:
                optimizer.learning_rate = self.learning_rate
        return {
            "optimizer": keras.optimizers.serialize(optimizer),
            "loss": self.loss,
            "metrics": list(self.metrics),
        }

    def _drop_fitted_models(self) -> None:
        """Free a previous fit's local models before building new ones: a refit would otherwise
        hold two of each at its peak. Keras models are cycles, so only a collection frees them."""
        fitted = vars(self).pop("model_", None)
        validation, self._validation_model = getattr(self, "_validation_model", None), None
        if fitted is not None or validation is not None:
            del fitted, validation
            gc.collect()

    def _local_model(self, model_json: str, compile_options: dict) -> Any:
        keras = segment.keras_module()
        model = keras.saving.deserialize_keras_object(json.loads(model_json), safe_mode=True)
        model.compile(  # deserialize a copy: Keras replaces a schedule's config in place
            optimizer=keras.optimizers.deserialize(copy.deepcopy(compile_options["optimizer"])),
            loss=compile_options["loss"],
            metrics=list(compile_options["metrics"]),
        )
        return model

    def _check_model_fits(self, info: ImageTable) -> None:
        input_shape = tuple(self.model.input_shape[1:])
        if input_shape != tuple(info.image_shape):
            raise ValueError(
                f"the model takes inputs of shape {input_shape}, but {info.table} holds images of "
                f"shape {tuple(info.image_shape)}: change the model's Input"
            )
        units = self.model.output_shape[-1]
        if units != info.num_classes:
            raise ValueError(
                f"the model has {units} output units, but {info.table} has {info.num_classes} "
                "classes: change the last layer"
            )
        if 0 in info.images_per_segment:
            raise ValueError(f"{info.table} has a segment with no rows: reload it")
        wire.manifest(self.model)  # refuses mixed precision early

    # -- fit --------------------------------------------------------------------------------

    def fit(
        self,
        X,
        y=None,
        *,
        callbacks: Sequence[Any] | None = None,
        validation_data=None,
        resume: int | None = None,
    ) -> GreenplumCNN:
        """Train until ``iterations`` merges over ``X``: an image table, or arrays ``X, y``
        (staged into a gpcnn-owned table for the call's lifetime). ``validation_data``: a table
        or ``(x, y)``, instead of the ``validation_table`` parameter. ``callbacks``: Keras
        callbacks, called per iteration with ``model_`` as their model. ``resume=run_id``
        continues a stored run."""
        self._check_params()
        X, y = _checked_input(X, y, at_least_two=True)
        db = self._db()
        table = self._training_table(db, X, y)
        validation = self.validation_table if validation_data is None else validation_data
        return self._fit(db, table, validation, callbacks, resume, self.iterations)

    def partial_fit(
        self, X, y=None, *, classes=None, callbacks=None, validation_data=None
    ) -> GreenplumCNN:
        """One more iteration: of the current run when ``X`` is its table, else from ``model_``'s
        weights in a new run (the history goes on). ``classes``, as in scikit-learn, lists every
        class ``y`` may hold: for gpcnn always ``range(units)`` of the model's last layer, so it
        may be omitted, and a batch may hold one class only."""
        if classes is not None:
            arrays.check_classes(classes, int(self.model.output_shape[-1]))
        X, y = _checked_input(X, y, at_least_two=False)
        if not hasattr(self, "model_"):
            self._check_params()
            db = self._db()
            table = self._training_table(db, X, y)
            return self._fit(db, table, self._validation_of(validation_data), callbacks, None, 1)
        db = self._db()
        table = self._training_table(db, X, y)
        total = len(self.history_) + 1
        validation = self._validation_of(validation_data)
        if str(describe(db, table).table) == runs.load_run(db, self.run_id_).table:
            return self._fit(db, table, validation, callbacks, self.run_id_, total)
        return self._fit(db, table, validation, callbacks, None, total, warm=True)

    def _validation_of(self, validation_data):
        return self.validation_table if validation_data is None else validation_data

    def _training_table(self, db: Database, X, y):
        if _is_table(X):
            if y is not None:
                raise ValueError("y goes with arrays: a table holds its labels")
            return X
        units = int(self.model.output_shape[-1])
        name = staging.stage(db, X, y, num_classes=units, seed=self.seed)
        staged = self.__dict__.setdefault("_staged", [])
        staged.append(name)
        if "_staged_finalizer" not in self.__dict__:
            self._staged_finalizer = weakref.finalize(self, staging.drop_staged, db, staged)
        return name

    def _fit(self, db, table, validation_source, callbacks, resume, total, warm=None):
        self._check_callbacks(callbacks)
        name = TableName.parse(table)
        ensure_installed(db)
        info = describe(db, name)
        self._check_model_fits(info)
        validation = None
        if (
            isinstance(validation_source, tuple)
            and len(validation_source) == 2
            and not _is_table(validation_source)
        ):
            validation = tuple(np.asarray(v) for v in validation_source)
        elif validation_source is not None:
            validation = describe(db, validation_source)
            self._check_model_fits(validation)
        compile_options = self._compile_options()
        model_json = self.model.to_json()
        manifest = wire.manifest(self.model)
        rule = rules.make_rule(
            self.merge, wire.trainable_mask(manifest), info.segments, **(self.merge_options or {})
        )
        slices = plan_slices(db, info, self.merges_per_epoch, self.local_epochs)
        threads = self.threads_per_segment or db.backend.default_threads(info.segments)
        options = {
            "compile": compile_options,
            "batch_size": int(self.batch_size),
            "shuffle": bool(self.shuffle),
            "image_shape": list(info.image_shape),
            "seed": self.seed,
            "threads": int(threads),
            "optimizer_state": self.optimizer_state,
        }
        warm = (self.warm_start if warm is None else warm) and hasattr(self, "model_")

        stored = None
        if resume is not None:
            stored = runs.load_run(db, resume)
            if stored.weights is None:
                raise ValueError(f"run {resume} stored no iteration yet: start a new fit")
            if stored.table != str(info.table):
                raise ValueError(f"run {resume} trained {stored.table}, not {info.table}")
            if stored.weights.size != sum(wire.sizes(manifest)):
                raise ValueError(f"run {resume} trained another model: resume it with the same one")
            run_id, history = resume, stored.iterations
        else:
            history = list(self.history_) if warm else []
            start = wire.flatten((self.model_ if warm else self.model).get_weights())
            run_id = runs.create_run(db, str(info.table), self.stored_params(), model_json)

        self._drop_fitted_models()
        self.model_ = self._local_model(model_json, compile_options)
        self.history_ = history
        self.run_id_ = run_id
        self.segments_ = info.segments
        self.classes_ = np.arange(info.num_classes)
        self.class_names_ = info.class_names
        self._model_json, self._options = model_json, options
        self._validation_model = None
        first = len(history) + 1
        schedule = _learning_rate_schedule(self.model_)
        steps = max(max(p.batches(int(self.batch_size), int(self.local_epochs))) for p in slices)
        hooks = self._callbacks(callbacks, total)
        with self._holding_sessions() as sessions:
            training = Training(
                db=db,
                sessions=sessions,
                info=info,
                run_id=run_id,
                model_json=model_json,
                options=options,
                manifest=manifest,
                rule=rule,
                slices=slices,
                local_epochs=int(self.local_epochs),
                evaluate=lambda weights, stored, it: self._validation(
                    validation, weights, stored, it
                ),
            )
            bar = None
            status = "finished"
            try:
                if stored is not None:
                    training.restore(stored)
                    runs.set_status(db, run_id, "running")
                else:
                    training.start(start)
                    del start  # the rule keeps it, and replaces it at the first merge
                wire.set_model_weights(self.model_, rule.model())
                bar = self._progress_bar(first, total)
                hooks.on_train_begin()
                for iteration in range(first, total + 1):
                    hooks.on_epoch_begin(iteration - 1)
                    training.options = {
                        **options,
                        **_rate_options(self.model_, schedule, (iteration - 1) * steps),
                    }
                    row = database_call(f"iteration {iteration}", training.step, iteration)
                    wire.set_model_weights(self.model_, rule.model())
                    self.history_.append(row)
                    self._report(row, total, bar)
                    hooks.on_epoch_end(iteration - 1, logs=_logs(row))
                    if self.model_.stop_training:
                        status = "stopped_early"
                        break
                training.wait()
            except TrainingError as e:
                _record_failure(db, run_id, e)
                raise e.continued(_resume_hint(run_id, self.history_)) from None
            except BaseException as e:
                _record_failure(db, run_id, e)
                raise
            finally:
                training.close()
                if bar is not None:
                    bar.close()
        runs.set_status(db, run_id, status)
        hooks.on_train_end(logs=_logs(self.history_[-1]) if self.history_ else None)
        return self

    def _callbacks(self, callbacks, total: int):
        """Keras's CallbackList around ``model_``: one epoch per iteration. A callback that acts
        per batch was refused by ``_check_callbacks``."""
        keras = segment.keras_module()
        self.model_.stop_training = False
        return keras.callbacks.CallbackList(
            list(callbacks or []), model=self.model_, epochs=total, verbose=0, steps=None
        )

    @staticmethod
    def _check_callbacks(callbacks) -> None:
        """Refuse, before any work, a callback that acts per batch: the batches run inside the
        segments, out of its reach."""
        keras = segment.keras_module()
        for callback in callbacks or []:
            hooks = _batch_hooks(keras, callback)
            if hooks:
                raise ValueError(
                    f"{type(callback).__name__} acts per batch ({', '.join(hooks)}), but the "
                    "batches run inside the segments: gpcnn calls the epoch hooks only, one "
                    "epoch per iteration (TensorBoard with update_freq='epoch' and no profiling, "
                    "ModelCheckpoint with save_freq='epoch' are fine)"
                )

    def _report(self, row: dict, total: int, bar) -> None:
        shown = {k: f"{row[k]:.4f}" for k in PROGRESS_KEYS if k in row}
        LOG.info("run %s iteration %d/%d: %s", self.run_id_, row["iteration"], total, shown)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(shown)
        if self.verbose == 2:
            values = " - ".join(f"{k}: {v}" for k, v in shown.items())
            print(f"Iteration {row['iteration']}/{total} - {row['seconds']:.1f}s - {values}")

    def _validation(
        self, validation, weights: np.ndarray, stored: StoredStart | None, iteration: int
    ) -> dict | None:
        """Validation metrics of ``weights`` at ``iteration`` (None when not due); a table reads
        them from their checkpoint (``stored``) when they have one."""
        if validation is None or not self._validates(iteration):
            return None
        if isinstance(validation, ImageTable):
            return self._evaluate_table(validation, weights if stored is None else stored)
        if getattr(self, "_validation_model", None) is None:
            self._validation_model = self._local_model(self._model_json, self._options["compile"])
        wire.set_model_weights(self._validation_model, weights)
        return _evaluate_arrays(self._validation_model, *validation)

    def _validates(self, iteration: int) -> bool:
        freq = self.validation_freq
        if isinstance(freq, int | np.integer):
            return iteration % int(freq) == 0
        return iteration in freq

    # -- in-database evaluation and prediction ------------------------------------------------

    def _require_fitted(self) -> None:
        if not hasattr(self, "model_"):
            raise NotFittedError("this GreenplumCNN is not fitted yet: call fit(table) first")

    @contextlib.contextmanager
    def _holding_sessions(self) -> Iterator[SegmentSessions]:
        """The segment sessions for one call (``fit``, ``evaluate``, ``predict``; a call inside
        one uses its caller's): taken from the process's pool of idle sessions, given back at
        the end, closed on an error (a statement may have been cancelled mid-way)."""
        held = getattr(self, "_sessions", None)
        if held is not None:
            yield held
            return
        self._sessions = self._db().backend.open_sessions(self.segments_, self._options["threads"])
        try:
            yield self._sessions
        except BaseException:
            self._sessions.close()
            raise
        else:
            self._sessions.release()
        finally:
            self._sessions = None

    def _evaluate_table(
        self, info: ImageTable, weights: np.ndarray | StoredStart | None = None
    ) -> dict:
        weights = weights if weights is not None else wire.model_to_bytes(self.model_)
        with self._holding_sessions() as sessions:
            return evaluate_table(
                self._db(), sessions, info, self._model_json, self._options, weights
            )

    def _table_info(self, table) -> ImageTable:
        return describe(self._db(), table)

    def predict_proba(self, x) -> np.ndarray:
        """Class probabilities of images (arrays, locally) or of a table (in the database,
        ``buffer_id`` order, as ``read_images`` returns them)."""
        self._require_fitted()
        if not _is_table(x):
            x = arrays.check_images(x)
            return np.asarray(self.model_.predict(_model_input(x), batch_size=1000, verbose=0))
        info = self._table_info(x)
        backend = self._db().backend
        with self._holding_sessions() as sessions, self._weights_sent() as params:
            ordered = database_call(
                "prediction",
                backend.run_prediction,
                sessions,
                info.table.sql(backend),
                {**self._prediction_params(info), **params},
                info.keys,
            )
        classes = info.num_classes
        return np.concatenate(
            [np.frombuffer(bytes(p), dtype="<f4").reshape(-1, classes) for _, p in ordered]
        )

    def predict(
        self,
        x,
        *,
        output_table=None,
        pred_type: str = "response",
        top_k: int | None = None,
        replace: bool = False,
    ):
        """Predicted class labels of images or of a table; with ``output_table`` (a table ``x``
        only), the predictions are computed on the segments and written into that table, keyed
        by image id, with MADlib's columns: ``response`` (id, class_value, class_name, prob),
        ``prob`` (one row per image and class), ``topk`` (id, rank, class_value, class_name,
        prob) for the ``top_k`` most probable classes. Returns the output table's name then."""
        if output_table is None:
            return np.argmax(self.predict_proba(x), axis=1)
        self._require_fitted()
        if not _is_table(x):
            raise ValueError(
                "output_table needs a table to predict: predict(table, output_table=…)"
            )
        info = self._table_info(x)
        self._check_model_fits(info)
        with self._holding_sessions() as sessions, self._weights_sent() as params:
            written = write_predictions(
                self._db(),
                sessions,
                info,
                output_table,
                pred_type,
                top_k,
                {**self._prediction_params(info), **params},
                replace,
            )
        return str(written)

    def _prediction_params(self, info: ImageTable) -> dict:
        return {
            "model": self._model_json,
            "options": json.dumps({**self._options, "image_shape": list(info.image_shape)}),
        }

    @contextlib.contextmanager
    def _weights_sent(self) -> Iterator[dict]:
        """``model_``'s weights in ``transfers`` while the prediction runs: its parameters."""
        with transport.sent(
            self._db().backend, wire.vector_of(list(self.model_.weights))
        ) as transfer:
            yield {"transfer": transfer}

    def evaluate(self, x, y=None) -> dict:
        """Loss and metrics: of a table (in the database) or of arrays ``x, y`` (locally)."""
        self._require_fitted()
        if _is_table(x):
            values = self._evaluate_table(self._table_info(x))
            values.pop("images", None)
            return values
        if y is None:
            raise ValueError("evaluate(x, y) needs labels for arrays")
        return _evaluate_arrays(self.model_, x, y)

    def score(self, X, y=None, sample_weight=None) -> float:
        """Accuracy, the scikit-learn classifier convention: of a table computed in the
        database (only the count of correct images comes back), of arrays locally."""
        self._require_fitted()
        if _is_table(X):
            if y is not None or sample_weight is not None:
                raise ValueError("score(table) takes no y or sample_weight: the table has labels")
            info = self._table_info(X)
            self._check_model_fits(info)
            compile_options = {**self._options["compile"], "metrics": ["accuracy"]}
            options = {**self._options, "compile": compile_options}
            with self._holding_sessions() as sessions:
                values = evaluate_table(
                    self._db(), sessions, info, self._model_json, options,
                    wire.model_to_bytes(self.model_),
                )  # fmt: skip
            return float(values["accuracy"])
        if y is None:
            raise ValueError("score(x, y) needs labels for arrays")
        correct = self.predict(X) == np.asarray(y)
        return float(np.average(correct, weights=sample_weight))

    def set_params(self, **params) -> GreenplumCNN:
        """scikit-learn's, plus skorch-style routing: ``merge__eta=0.9`` sets ``merge_options``'s
        ``eta``, checked against the rule's options."""
        routed = {
            k.split("__", 1)[1]: params.pop(k) for k in list(params) if k.startswith("merge__")
        }
        if routed:
            options = {**(params.get("merge_options", self.merge_options) or {}), **routed}
            rules.check_options(params.get("merge", self.merge), options, segments=1)
            params["merge_options"] = options
        return super().set_params(**params)

    # -- persistence --------------------------------------------------------------------------

    def stored_params(self) -> dict:
        """The parameters as JSON-able values, as stored with each run (the model apart)."""
        params = {k: v for k, v in self.get_params(deep=False).items() if k != "model"}
        if not isinstance(params["optimizer"], str):
            serialized = segment.keras_module().optimizers.serialize(params["optimizer"])
            # Keras numbers the names of new optimizers (sgd, sgd_1, ...): not a parameter
            serialized["config"].pop("name", None)
            params["optimizer"] = serialized
        if isinstance(params["database"], Database):
            params["database"] = params["database"].url.render_as_string(hide_password=True)
        params["metrics"] = list(params["metrics"])
        if not isinstance(params["validation_freq"], int):
            params["validation_freq"] = list(params["validation_freq"])
        if isinstance(params["validation_table"], tuple):
            params["validation_table"] = list(params["validation_table"])
        return params

    def save(self, path: str | Path) -> None:
        """``model_`` as a Keras ``.keras`` file (or ``.weights.h5``), with the estimator's
        parameters and history beside it in ``<path>.gpcnn.json``."""
        self._require_fitted()
        path = Path(path)
        if path.name.endswith(".weights.h5"):
            self.model_.save_weights(path)
        elif path.suffix == ".keras":
            self.model_.save(path)
        else:
            raise ValueError(f"{path}: use a .keras or .weights.h5 file name")
        sidecar = {
            "params": self.stored_params(),
            "model_json": self._model_json,
            "options": self._options,
            "history": self.history_,
            "run_id": self.run_id_,
            "segments": self.segments_,
            "classes": self.classes_.tolist(),
            "class_names": list(self.class_names_),
        }
        Path(f"{path}.gpcnn.json").write_text(json.dumps(sidecar, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> GreenplumCNN:
        """The fitted estimator that ``save`` wrote."""
        path = Path(path)
        sidecar = json.loads(Path(f"{path}.gpcnn.json").read_text())
        keras = segment.keras_module()
        if path.name.endswith(".weights.h5"):
            model = keras.saving.deserialize_keras_object(
                json.loads(sidecar["model_json"]), safe_mode=True
            )
            model.load_weights(path)
        else:
            model = keras.saving.load_model(path, safe_mode=True, compile=False)
        params = dict(sidecar["params"])
        for old in ("schema", "validation_data", "progress"):  # parameters of gpcnn 0.1
            params.pop(old, None)
        if isinstance(params["optimizer"], dict):
            params["optimizer"] = keras.optimizers.deserialize(params["optimizer"])
        params["metrics"] = tuple(params["metrics"])
        if isinstance(params["validation_table"], list):
            params["validation_table"] = tuple(params["validation_table"])
        est = cls(model, **params)
        est._model_json = sidecar["model_json"]
        est._options = sidecar["options"]
        est.model_ = est._local_model(sidecar["model_json"], est._compile_options())
        est.model_.set_weights(model.get_weights())
        est.history_ = sidecar["history"]
        est.run_id_ = sidecar["run_id"]
        est.segments_ = sidecar["segments"]
        est.classes_ = np.asarray(sidecar["classes"])
        est.class_names_ = tuple(sidecar["class_names"])
        return est

    # -- sessions -----------------------------------------------------------------------------

    def close(self) -> None:
        """Drop the tables that ``fit`` staged for arrays (garbage collection does it too).
        Segment sessions (each a server process with TensorFlow loaded) are held only while
        ``fit``, ``evaluate`` or ``predict`` runs, then wait in the process's pool for the next
        call, closed when idle too long or by ``gpcnn.release_sessions()``."""
        finalizer = self.__dict__.pop("_staged_finalizer", None)
        if finalizer is not None:
            finalizer()
        self.__dict__.pop("_staged", None)

    def __enter__(self) -> GreenplumCNN:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for private in ("_sessions", "_validation_model", "_staged", "_staged_finalizer"):
            state.pop(private, None)  # a copy does not own the tables its original staged
        return state

    def _progress_bar(self, first: int, last: int):
        if self.verbose != 1 or last < first:
            return None
        from tqdm.auto import tqdm

        return tqdm(total=last - first + 1, desc=f"run {self.run_id_}", unit="it")


def _learning_rate_schedule(model) -> Any:
    """The optimizer's ``LearningRateSchedule``, or None for a plain rate."""
    keras = segment.keras_module()
    rate = getattr(model.optimizer, "_learning_rate", None)
    return rate if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule) else None


def _rate_options(model, schedule, step: int) -> dict:
    """What the segments set before an iteration: the schedule's step (batches trained so far),
    or the rate that callbacks may have changed on ``model_``."""
    if schedule is not None:
        return {"optimizer_step": int(step)}
    keras = segment.keras_module()
    return {"learning_rate": float(keras.ops.convert_to_numpy(model.optimizer.learning_rate))}


BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end")


def _batch_hooks(keras, callback) -> list[str]:
    """The per-batch hooks a callback really uses (Keras's own that only log per epoch, as
    configured, use none)."""
    callbacks = keras.callbacks
    if isinstance(callback, callbacks.TensorBoard):
        epochal = callback.update_freq == "epoch" and not getattr(callback, "_stop_batch", 0)
        return [] if epochal else ["update_freq or profile_batch"]
    if isinstance(callback, callbacks.ModelCheckpoint):
        return [] if callback.save_freq == "epoch" else ["save_freq"]
    base = callbacks.Callback
    return [
        hook
        for hook in BATCH_HOOKS
        if getattr(type(callback), hook) is not getattr(base, hook) or hook in vars(callback)
    ]


def _logs(row: dict) -> dict:
    """The iteration's numbers, as Keras callbacks read logs (the epoch is their argument:
    ``epoch`` and ``iteration`` would collide with ModelCheckpoint's ``{epoch}``)."""
    return {
        k: v
        for k, v in row.items()
        if k not in ("epoch", "iteration")
        and isinstance(v, int | float)
        and not isinstance(v, bool)
    }


def _record_failure(db: Database, run_id: int, error: BaseException) -> None:
    """The run's status after an exception; the server may be gone, and that error wins."""
    with contextlib.suppress(Exception):  # unreachable: the run stays "running", resumable
        runs.set_status(db, run_id, "failed", f"{type(error).__name__}: {error}"[:2000])


def _resume_hint(run_id: int, history: list[dict]) -> str:
    if not history:
        return f"run {run_id} stored no iteration: start a new fit"
    last = history[-1]["iteration"]
    return f"run {run_id} keeps iteration {last}: fit(table, resume={run_id}) continues it"


def _checked_input(X, y, *, at_least_two: bool):
    """A table as it is (``_training_table`` checks its y), arrays through ``gpcnn.data.arrays``
    before anything reaches the database."""
    if _is_table(X):
        return X, y
    return arrays.check_training(X, y, at_least_two=at_least_two)


def _is_table(x) -> bool:
    return isinstance(x, str | TableName) or (
        isinstance(x, tuple) and len(x) == 2 and all(isinstance(p, str) for p in x)
    )


def _model_input(x) -> np.ndarray:
    """Arrays as the model takes them: uint8 through the one conversion, floats as they are."""
    x = np.asarray(x)
    if x.ndim == 3:
        x = x[..., np.newaxis]
    return segment.to_model_input(x) if x.dtype == np.uint8 else x.astype(np.float32)


def _evaluate_arrays(model, x, y) -> dict:
    logs = model.evaluate(
        _model_input(x), np.asarray(y), batch_size=1000, verbose=0, return_dict=True
    )
    return {k: float(v) for k, v in logs.items()}


__all__ = ["GreenplumCNN", "TrainingError"]
