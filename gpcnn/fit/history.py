"""A fit's history: one dict per iteration (``GreenplumCNN.history_``), also readable as Keras's
``History.history``, a dict of lists."""

from __future__ import annotations

from collections.abc import Iterable


class History(list):
    """The rows of a fit, one dict per iteration (epoch, loss, metrics, validation metrics when
    validated, diagnostics), in order; a list, as before, with Keras's view beside it.

    Examples
    --------
    >>> h = History([{"epoch": 1.0, "loss": 0.9}, {"epoch": 2.0, "loss": 0.5, "val_loss": 0.6}])
    >>> h.history
    {'epoch': [1.0, 2.0], 'loss': [0.9, 0.5], 'val_loss': [0.6]}
    """

    def __init__(self, rows: Iterable[dict] = ()) -> None:
        super().__init__(rows)

    @property
    def history(self) -> dict[str, list]:
        """Each key's values in iteration order, as ``keras.callbacks.History.history``: a key
        appears in the iterations that recorded it (validation metrics only where validated)."""
        columns: dict[str, list] = {}
        for row in self:
            for key, value in row.items():
                columns.setdefault(key, []).append(value)
        return columns
