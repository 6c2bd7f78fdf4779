"""One database for the whole session: ``$GPCNN_TEST_DATABASE_URL`` (any engine, Greenplum
included), else the embedded PostgreSQL. TensorFlow's threads and oneDNN are fixed here, before
anything imports TensorFlow, so local references match what the segments compute.

``engine`` is gpcnn's handle (``gpcnn.Database``) on the test schema. Modules that train, evaluate
or predict override it with ``engine_any_dispatch`` so that they run in both dispatch modes: the
engine's own, and ``"statement"``, which runs PostgreSQL's iterations exactly as Greenplum does
(one statement for all segments, in one session)."""

from __future__ import annotations

import os

os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest

from gpcnn.kernel import segment

TEST_THREADS = 1
segment.keras_module(threads=TEST_THREADS)

TEST_SCHEMA = "gpcnn_test"
DISPATCH_MODES = ("native", "statement")


def database_url() -> str | None:
    """The database under test (None: the embedded PostgreSQL); a plain name so pytest does not collect it."""
    return os.environ.get("GPCNN_TEST_DATABASE_URL")


@pytest.fixture(scope="session")
def database():
    import gpcnn

    db = gpcnn.connect(database_url(), schema=TEST_SCHEMA)
    gpcnn.install(db)
    yield db
    db.close()


@pytest.fixture(scope="session")
def engine(database):
    return database


@pytest.fixture(scope="session", params=DISPATCH_MODES)
def engine_any_dispatch(request, database):
    """The test database in each dispatch mode (tables and runs are shared)."""
    import gpcnn

    if request.param == "native":
        yield database
        return
    db = gpcnn.connect(database_url(), schema=TEST_SCHEMA, dispatch=request.param)
    # One statement merges in the database whatever the size, as it does past the backend's
    # database_merge_bytes: so the suite's small models also take Greenplum's path for big ones
    # (test_big_models checks that the client's merge of one statement gives the same model).
    db.backend.database_merge_bytes = 0
    yield db
    db.close()


@pytest.fixture(scope="session")
def backend(engine):
    return engine.backend


@pytest.fixture(scope="session")
def schema():
    return TEST_SCHEMA
