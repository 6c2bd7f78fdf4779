"""One database for the whole session: ``$GPCNN_TEST_DATABASE_URL`` (any engine, Greenplum
included), else the embedded PostgreSQL. TensorFlow's threads and oneDNN are fixed here, before
anything imports TensorFlow, so local references match what the segments compute."""

from __future__ import annotations

import os

os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest

from gpcnn import segment

TEST_THREADS = 1
segment.keras_module(threads=TEST_THREADS)

TEST_SCHEMA = "gpcnn_test"


@pytest.fixture(scope="session")
def engine():
    import gpcnn

    eng = gpcnn.connect(os.environ.get("GPCNN_TEST_DATABASE_URL"))
    gpcnn.install(eng, TEST_SCHEMA)
    yield eng
    eng.dispose()


@pytest.fixture(scope="session")
def backend(engine):
    from gpcnn.engines import backend_for

    return backend_for(engine, TEST_SCHEMA)


@pytest.fixture(scope="session")
def schema():
    return TEST_SCHEMA
