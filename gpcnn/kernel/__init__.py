"""The code that runs inside the database, and nothing else: the wire format of vectors (``wire``),
the image-weighted average (``averaging``), what crosses into the database with each statement
(``protocol``), Keras's setup and the one model build (``keras_setup``) and the segment's TensorFlow
code (``segment``).

Only the standard library, numpy and TensorFlow/Keras are imported here, and modules import each
other relatively: ``gpcnn install`` ships exactly these modules (``BUNDLE``, dependencies first) into
the function bodies, where they load as a private package. Tests import them as plain Python.
"""

BUNDLE = ("wire", "averaging", "protocol", "keras_setup", "segment")
