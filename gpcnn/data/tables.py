"""Image tables: the names other layers and users import, gathered from the modules that do each job.

``dealing`` checks images and deals them to segments, ``sources`` reads them, ``copy_rows`` encodes
the COPY stream, ``loading`` loads a table atomically, ``table_catalog`` describes, lists and drops
tables, ``reading`` reads one back; table names are the engine layer's (``engines.identifiers``).
"""

from gpcnn.data.copy_rows import (
    COPY_ROW_OVERHEAD,
    COPY_STREAM_OVERHEAD,
    copy_row,
    copy_stream,
    source_rows,
)
from gpcnn.data.dealing import (
    class_counts,
    deal,
    default_buffer_size,
    plan_buffers,
    validate_ids,
    validate_images,
)
from gpcnn.data.loading import load_images
from gpcnn.data.reading import read_images
from gpcnn.data.sources import ArrayImages, ImageSource
from gpcnn.data.table_catalog import (
    ImageTable,
    buffer_counts,
    describe,
    drop_table,
    list_tables,
    resolved_name,
)
from gpcnn.engines.identifiers import STAGING_SUFFIX, TableError, TableName, checked_name

__all__ = [
    "COPY_ROW_OVERHEAD",
    "COPY_STREAM_OVERHEAD",
    "STAGING_SUFFIX",
    "ArrayImages",
    "ImageSource",
    "ImageTable",
    "TableError",
    "TableName",
    "buffer_counts",
    "checked_name",
    "class_counts",
    "copy_row",
    "copy_stream",
    "deal",
    "default_buffer_size",
    "describe",
    "drop_table",
    "list_tables",
    "load_images",
    "plan_buffers",
    "read_images",
    "resolved_name",
    "source_rows",
    "validate_ids",
    "validate_images",
]
