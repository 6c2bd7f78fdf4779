"""The code that runs inside the database, and nothing else: the wire format of vectors (``wire``),
the image-weighted average (``averaging``), what crosses into the database with each statement
(``protocol``), the check of stored model and compile configs before Keras reads them
(``config_check``), TensorFlow kept apart from PostgreSQL's JIT (``server_guard``), Keras's setup
and the one model build (``keras_setup``), the named layout of start and trained vectors
(``layout``), errors (``segment_errors``), ``pack_table``'s decoding (``sql_arrays``), the cached model and
its state (``keras_state``), aggregate states (``states``), the merge rules' local-step hooks
(``local_steps``), the chunked merge (``merging``) and the functions the database calls
(``segment``).

Only the standard library, numpy, TensorFlow/Keras and PL/Python's ``plpy`` are imported here, and
modules import each other relatively: ``gpcnn install`` ships exactly these modules (``BUNDLE``,
dependencies first) into the function bodies, where they load as a private package. Tests import
them as plain Python.
"""

BUNDLE = (
    "wire",
    "averaging",
    "protocol",
    "config_check",
    "server_guard",
    "keras_setup",
    "layout",
    "segment_errors",
    "sql_arrays",
    "keras_state",
    "states",
    "local_steps",
    "merging",
    "segment",
)
