"""The old home of the binary COPY format, kept only for ``data/tables.py``, which still imports
these names from it (another change owns that module); new code imports from ``copying``, and this
module goes once that import does."""

from gpcnn.engines.copying import COPY_HEADER, COPY_TRAILER, CopyStream, copy

__all__ = ["COPY_HEADER", "COPY_TRAILER", "CopyStream", "copy"]
