"""``GreenplumCNN``: a scikit-learn style estimator whose ``fit`` trains inside the database.

One iteration = one aggregate query over the image table: every segment trains the current model on
its own buffers, the aggregate's merge combines the segment models, and the merged weights come back
into ``model_``, are evaluated, recorded in ``history_`` and the run tables, and sent out again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sklearn.base import BaseEstimator, ClassifierMixin

from gpcnn.data import array_checks
from gpcnn.data.tables import ImageTable, describe
from gpcnn.engines import Database, connect
from gpcnn.estimator import parameters
from gpcnn.estimator.array_fitting import ArrayFitting, is_builder, takes_rows
from gpcnn.estimator.predicting import Predicting
from gpcnn.estimator.saving import Saving
from gpcnn.estimator.table_fitting import TableFitting
from gpcnn.fit import compiling, rules, runs
from gpcnn.fit.database_errors import TrainingError
from gpcnn.kernel.keras_setup import keras_module
from gpcnn.kernel.protocol import OPTIMIZER_STATES, CompileOptions
from gpcnn.serving import model_library


class GreenplumCNN(TableFitting, ArrayFitting, Predicting, Saving, ClassifierMixin, BaseEstimator):
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
    model : keras.Model, str or callable
        The network; its input takes the data's items (images (H, W, C), rows (F,), or any
        shape of as many values: ``gpcnn.data.pixels``'s rule), its last layer has one unit per
        class. Never changed: ``model_`` is a copy. A name: the model stored under it in the
        model library (``gpcnn.store_model``), with its stored weights if any. A function
        ``model(input_shape, classes)`` (as ``gpcnn.models.small_cnn``): the model built for
        each fit's data, so one estimator fits rows of any width and any number of classes.
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
    merges_per_epoch : int or list of int, default 1
        Merges per pass over the data (each segment trains a slice of its rows in between); a
        list is each epoch's count, the last repeating (``[8, 8, 1]``: post-local SGD).
    merge : {RULES}
        How the segment models are combined (``gpcnn.fit.rules``, whose registry this list is).
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
        Makes shuffles, staging and each segment's random draws reproducible, and a model
        function's initial weights (``keras.utils.set_random_seed`` before it builds).
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
    history_ : History (a list of dict)
        One row per iteration: loss, metrics, val_*, seconds, ...; ``history_.history`` is the
        same as Keras's ``History.history``, a dict of lists.
    run_id_ : int
        The run in ``gpcnn.runs``; ``fit(table, resume=run_id_)`` continues it.
    segments_ : int
    classes_ : ndarray
        The sorted distinct labels of arrays ``y`` (``predict`` returns them, ``predict_proba``'s
        columns follow them); ``0..units-1`` for a table, or labels that are all class indices.
    class_names_ : tuple of str
    n_features_in_ : int
        The width of feature rows (N, F) fitted (absent after images or a table).

    Notes
    -----
    ``X`` is a table name, or arrays with labels ``y`` of any type (staged into a table for the
    estimator's lifetime): feature rows (N, F) or images (N, H, W) or (N, H, W, C), of integer
    pixels 0..255, float images in [0, 1] or float rows of any value (``gpcnn.data.pixels``).
    README's "Use" lists how scikit-learn's estimator checks fare.

    Examples
    --------
    >>> import gpcnn
    >>> from gpcnn.models import small_cnn
    >>> est = GreenplumCNN(small_cnn(), iterations=10, merge="bmuf", seed=0,
    ...                    database=gpcnn.connect())
    >>> est.fit("fm.train").score("fm.test")  # doctest: +SKIP
    0.87
    """

    # what each parameter may be, declared (scikit-learn's convention), checked by every fit
    _parameter_constraints: ClassVar[dict] = parameters.PARAMETER_CONSTRAINTS

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
        merges_per_epoch: int | list[int] = 1,
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
        """What scikit-learn may pass: a table name, or dense arrays with labels. A model that
        takes feature rows (a Keras input (F,), or a function building one for the data) takes
        2-D arrays of any sign, and scikit-learn runs its generic checks; an image model (or a
        stored one, unseen) takes images of non-negative pixels, and the checks, which feed
        2-D rows of varying width, are skipped. ``fit(table)`` needs no y: the table holds it."""
        tags = super().__sklearn_tags__()
        rows = takes_rows(self.model)
        tags.input_tags.two_d_array = rows
        tags.input_tags.three_d_array = True
        tags.input_tags.positive_only = not rows
        tags.input_tags.sparse = False
        tags.target_tags.required = False
        return tags

    def __sklearn_clone__(self) -> GreenplumCNN:
        # The model is never modified, so clones may share it (deep-copying Keras models is slow).
        return type(self)(**self.get_params(deep=False))

    # -- setup ------------------------------------------------------------------------------

    def _check_params(self) -> None:
        parameters.check(self.get_params(deep=False))

    def _model(self, info: ImageTable | None = None) -> Any:
        """``model``, the model stored under that name (read again by every call), or the
        function's model built for ``info``'s items and classes (None before a table)."""
        if is_builder(self.model):
            if info is None:
                return None
            if self.seed is not None:  # the builder's initial weights follow the seed too
                keras_module().utils.set_random_seed(int(self.seed))
            return self.model(tuple(info.image_shape), info.num_classes)
        return model_library.keras_model(self._db(), self.model)

    def _units(self) -> int | None:
        """The model's output units, the classes it predicts (None: a function's, built later)."""
        model = self._model()
        return None if model is None else int(model.output_shape[-1])

    def _db(self) -> Database:
        """The handle of ``database``: a handle, a URL, or None for $GPCNN_DATABASE_URL or the
        embedded cluster (gpcnn's schema is the handle's)."""
        return connect(self.database)

    def _compile_options(self) -> CompileOptions:
        return compiling.compile_options(
            self.optimizer, self.learning_rate, self.loss, self.metrics
        )

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
        """Train until ``iterations`` merges over ``X``, in a new run (or the run ``resume``).

        Arrays are checked against the model before anything reaches the database, then staged
        into a gpcnn-owned table that ``close()`` (or garbage collection of the estimator) drops.
        With ``warm_start`` and a previous fit, training continues from ``model_`` and its
        ``classes_``, in a new run whose history follows the old one.

        Parameters
        ----------
        X : str, (schema, table), ndarray or array-like
            An image table (``load_images``, ``pack_table``), or images (N, H, W) or
            (N, H, W, C) of integer pixels 0..255 or floats in [0, 1], or feature rows (N, F)
            (``gpcnn.data.pixels``).
        y : array-like, optional
            The labels of arrays ``X``, of any type (at least two classes); ``classes_`` holds
            them sorted. None for a table, which holds its labels.
        callbacks : sequence of keras.callbacks.Callback, optional
            Called once per iteration, as per epoch in Keras, with ``model_`` as their model.
            Callbacks that act per batch are refused: the batches run inside the segments.
        validation_data : str, (schema, table) or (x, y), optional
            Evaluated after each iteration ``validation_freq`` selects, instead of the
            ``validation_table`` parameter.
        resume : int, optional
            A stored run (``run_id_``, ``gpcnn.list_runs``) to continue up to ``iterations`` in
            all: the same table and model, with at least one iteration stored.

        Returns
        -------
        GreenplumCNN
            The estimator itself, fitted.

        Raises
        ------
        ValueError
            Bad parameters or arrays, ``y`` given with a table, a model that does not take the
            data, a per-batch callback, or a ``resume`` run of another table or model.
        TypeError
            Arrays ``X`` of non-numeric values.
        TrainingError
            Training failed in the database; the message names the segment and what to do.

        Examples
        --------
        >>> from gpcnn.models import small_cnn
        >>> est = GreenplumCNN(small_cnn, iterations=5, database=db)
        >>> est.fit("fm.train", validation_data="fm.test")  # doctest: +SKIP
        >>> est.fit(x_train, y_train)  # arrays, staged into a table  # doctest: +SKIP
        >>> est.set_params(iterations=10).fit("fm.train", resume=est.run_id_)  # doctest: +SKIP
        """
        self._check_params()
        X, y = self._checked_input(X, y, at_least_two=True)
        db = self._db()
        warm = self.warm_start and hasattr(self, "model_")
        table = self._training_table(db, X, y, *self._reference(warm))
        validation = self.validation_table if validation_data is None else validation_data
        return self._fit(db, table, validation, callbacks, resume, self.iterations)

    def partial_fit(
        self, X, y=None, *, classes=None, callbacks=None, validation_data=None
    ) -> GreenplumCNN:
        """One more iteration over ``X``.

        The first call starts a run of one iteration. Later calls continue the current run when
        ``X`` is its table, else train from ``model_``'s weights in a new run (the history goes
        on); arrays are staged into a new table at each call.

        Parameters
        ----------
        X : str, (schema, table), ndarray or array-like
            An image table, or arrays as ``fit`` takes them.
        y : array-like, optional
            The labels of arrays ``X``; a batch may hold one class only. None for a table.
        classes : array-like, optional
            As in scikit-learn: every label ``y`` may hold, as many as the model's output units
            (default: the labels of the first call); ``classes_`` is them sorted. Used by the
            first call; later calls keep ``classes_``.
        callbacks : sequence of keras.callbacks.Callback, optional
            As in ``fit``.
        validation_data : str, (schema, table) or (x, y), optional
            As in ``fit``: instead of the ``validation_table`` parameter.

        Returns
        -------
        GreenplumCNN
            The estimator itself, fitted.

        Raises
        ------
        ValueError
            Bad parameters, arrays or ``classes``, or ``y`` given with a table.
        TrainingError
            Training failed in the database.
        """
        if classes is not None:
            classes = array_checks.check_classes(classes, self._units())
        X, y = self._checked_input(X, y, at_least_two=False)
        if not hasattr(self, "model_"):
            self._check_params()
            db = self._db()
            table = self._training_table(db, X, y, classes, self._model())
            return self._fit(db, table, self._validation_of(validation_data), callbacks, None, 1)
        db = self._db()
        table = self._training_table(db, X, y, *self._reference(True))
        total = len(self.history_) + 1
        validation = self._validation_of(validation_data)
        if str(describe(db, table).table) == runs.load_run(db, self.run_id_).table:
            return self._fit(db, table, validation, callbacks, self.run_id_, total)
        return self._fit(db, table, validation, callbacks, None, total, warm=True)

    def set_params(self, **params) -> GreenplumCNN:
        """Set parameters, as scikit-learn's ``set_params``, plus the merge rule's options.

        Parameters
        ----------
        **params
            Estimator parameters by name; ``merge__<option>=value`` (skorch-style routing, e.g.
            ``merge__eta=0.9``) sets that option in ``merge_options``, checked at once against
            the options of the rule (``merge``, the new one if given too).

        Returns
        -------
        GreenplumCNN
            The estimator itself.

        Raises
        ------
        ValueError
            An unknown parameter, or a ``merge__`` option the rule does not have or a value out
            of its range.
        """
        routed = {
            k.split("__", 1)[1]: params.pop(k) for k in list(params) if k.startswith("merge__")
        }
        if routed:
            options = {**(params.get("merge_options", self.merge_options) or {}), **routed}
            rules.check_options(params.get("merge", self.merge), options, segments=1)
            params["merge_options"] = options
        return super().set_params(**params)

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


# The rules as registered when the estimator is imported (``gpcnn.fit.rules.RULES``).
if GreenplumCNN.__doc__ is not None:  # None under python -OO
    GreenplumCNN.__doc__ = GreenplumCNN.__doc__.replace(
        "{RULES}", "{" + ", ".join(f'"{name}"' for name in rules.RULES) + "}"
    )


__all__ = ["OPTIMIZER_STATES", "GreenplumCNN", "TrainingError"]
