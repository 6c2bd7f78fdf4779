"""One fit of ``GreenplumCNN`` over an image table: the run started or resumed, the merge rule and
the plan built from the parameters, the loop run, and the fitted state adopted (``model_``,
``history_``, ``run_id_``, ...). ``TableFitting`` is a mixin of the estimator: ``fit`` and
``partial_fit`` end here once their arrays are staged, and the model hopper hands each
configuration's result back through ``_adopt``."""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from gpcnn.data.label_skew import skew_warning
from gpcnn.data.tables import ImageTable
from gpcnn.engines import Database
from gpcnn.fit import compiling, loop, rules
from gpcnn.fit.forecast.early_warning import EARLY_EPOCHS
from gpcnn.fit.forecast.pilots import early_basis
from gpcnn.fit.history import History
from gpcnn.fit.schedule import plan_slices
from gpcnn.fit.training import Plan
from gpcnn.fit.validation import Validation, check_model_fits, validation_source
from gpcnn.kernel import layout, wire
from gpcnn.kernel.keras_setup import compiled_model
from gpcnn.kernel.protocol import CompileOptions, SegmentOptions


class TableFitting:
    """The fit of an image table, from the estimator's parameters (``merge``, ``merge_options``,
    ``merges_per_epoch``, ``local_epochs``, ``validation_freq``, ...)."""

    if TYPE_CHECKING:  # what the estimator (``GreenplumCNN``) gives its mixin
        batch_size: int
        shuffle: bool
        seed: int | None
        optimizer_state: str
        threads_per_segment: int | None

        def _compile_options(self) -> CompileOptions: ...

    def _drop_fitted_models(self) -> None:
        """Free a previous fit's local model before building a new one: a refit would otherwise
        hold two at its peak. Keras models are cycles, so only a collection frees them."""
        if self.__dict__.pop("model_", None) is not None:
            gc.collect()

    def _validation_of(self, validation_data):
        """The validation data of a call: its own, else the ``validation_table`` parameter."""
        return self.validation_table if validation_data is None else validation_data

    def _fit(self, db, table, validation_data, callbacks, resume, total, warm=None):
        loop.check_callbacks(callbacks)
        info = loop.described(db, table)
        params = self.stored_params()
        if info.label_skew is not None:  # recorded with the run (it does not key resume)
            params["label_skew"] = info.label_skew._asdict()
            if (warning := skew_warning(info)) is not None:
                logging.getLogger("gpcnn").warning(warning)
        model = self._model(info)
        input_shape = check_model_fits(model, info)
        source = validation_source(db, self._indexed(validation_data), model, info)
        options = self._segment_options(db, info, input_shape)
        for warning in compiling.model_warnings(model, options.compile):
            logging.getLogger("gpcnn").warning(warning)
        model_json, manifest = model.to_json(), wire.manifest(model)
        rule = rules.make_rule(
            self.merge,
            wire.trainable_mask(manifest),
            info.segments,
            statistics=layout.moving_statistics(manifest),
            optimizer=options.compile.optimizer,
            **(self.merge_options or {}),
        )
        slices = plan_slices(db, info, self.merges_per_epoch, self.local_epochs)
        warm = (self.warm_start if warm is None else warm) and hasattr(self, "model_")
        history = list(self.history_) if warm and resume is None else []
        start = loop.initialize(
            db,
            info,
            model_json,
            manifest,
            params,
            resume,
            self.model_ if warm else model,
        )
        self._drop_fitted_models()
        history = start.stored.iterations if start.stored is not None else history
        self._adopt(info, start.run_id, model_json, options, history)
        validation = Validation(db, source, self.validation_freq, model_json, options)
        reached = slices.at(len(history))[1] if history else 0.0
        ends = slices.at(total)[1] if total > len(history) else reached
        early = (
            early_basis(
                db, info.table, params, model_json, final_epoch=ends, segments=info.segments
            )
            if reached < EARLY_EPOCHS <= ends
            else None
        )
        plan = Plan(
            db=db,
            info=info,
            run_id=start.run_id,
            model_json=model_json,
            options=options,
            manifest=manifest,
            rule=rule,
            slices=slices,
            local_epochs=int(self.local_epochs),
            validation=validation,
            early=early,
        )
        loop.run(
            plan,
            start,
            model=self.model_,
            history=self.history_,
            held=self._held(),
            callbacks=callbacks,
            verbose=self.verbose,
            total=total,
        )
        return self

    def _segment_options(
        self, db: Database, info: ImageTable, input_shape: Sequence[int]
    ) -> SegmentOptions:
        """What the segments train with, from the parameters; ``input_shape``: the model's
        input, which the segments reshape the table's items to (``check_model_fits``)."""
        threads = self.threads_per_segment or db.backend.default_threads(info.segments)
        return SegmentOptions(
            compile=self._compile_options(),
            image_shape=tuple(input_shape),
            batch_size=int(self.batch_size),
            shuffle=bool(self.shuffle),
            seed=self.seed,
            threads=int(threads),
            optimizer_state=self.optimizer_state,
        )

    def _adopt(self, info, run_id: int, model_json: str, options, history: list) -> None:
        """The fitted state of run ``run_id`` (its weights set on ``model_`` later): also how the
        model hopper hands each configuration's result back as a fitted estimator."""
        self.model_ = compiled_model(model_json, options.compile)
        self.history_ = History(history)
        self.run_id_ = run_id
        self.segments_ = info.segments
        fitted = self.__dict__.pop("_arrays_fitted", None)
        self.classes_ = np.arange(info.num_classes) if fitted is None else fitted[0]
        self.class_names_ = info.class_names
        self.__dict__.pop("n_features_in_", None)
        if fitted is not None and fitted[1] is not None:
            self.n_features_in_ = fitted[1]
        self._model_json, self._options = model_json, options
