"""One database for the whole session: ``$GPCNN_TEST_DATABASE_URL`` (any engine, Greenplum
included), else the embedded PostgreSQL. TensorFlow's threads and oneDNN are fixed here, before
anything imports TensorFlow, so local references match what the segments compute.

Fixtures, each named after what it returns and defined here only:

- ``db``: gpcnn's handle (``gpcnn.Database``) on the test schema. In a module marked
  ``every_dispatch`` each test runs once per dispatch mode: the engine's own, and ``"statement"``,
  which runs PostgreSQL's iterations exactly as Greenplum does (one statement for all segments, in
  one session). Tables and runs are shared between the modes.
- ``native_db``: the same handle in the engine's own dispatch, whatever the module's marker.
- ``backend``: ``db.backend``; ``schema``: the test schema's name.

Markers (registered in setup.cfg; README's Tests section says how to select them):

- ``db``: needs the database server. Set here on every test that uses a database fixture; modules
  that start servers of their own mark themselves.
- ``slow``: takes about 10 s or more alone on 2 cores (20 s and more under load).
- ``greenplum``: means something only on Greenplum; skipped on other engines.
- ``every_dispatch``: run each test of the module in both dispatch modes.

Hypothesis runs with the profile ``gpcnn`` registered here: seeded, no example database.
"""

from __future__ import annotations

import os
import tempfile

os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# Hypothesis caches what it reads of the sources: under the temporary directory, not the checkout.
os.environ.setdefault(
    "HYPOTHESIS_STORAGE_DIRECTORY",
    os.path.join(tempfile.gettempdir(), f"gpcnn-hypothesis-{os.getuid()}"),
)

import pytest
from hypothesis import settings

from gpcnn.kernel import keras_setup

TEST_THREADS = 1
keras_setup.keras_module(threads=TEST_THREADS)

# The property tests (test_properties.py): the same examples on every run (derandomized, no
# example database: nothing written under .hypothesis), no deadline on a shared CPU; each property
# sets its own max_examples.
settings.register_profile(
    "gpcnn", derandomize=True, deadline=None, database=None, print_blob=False, max_examples=200
)
settings.load_profile("gpcnn")

TEST_SCHEMA = "gpcnn_test"
DISPATCH_MODES = ("native", "statement")
# The fixtures whose tests need the server: every database fixture asks for ``native_db``.
SERVER_FIXTURE = "native_db"


def database_url() -> str | None:
    """The database under test (None: the embedded PostgreSQL); a plain name so pytest does not collect it."""
    return os.environ.get("GPCNN_TEST_DATABASE_URL")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "db" in metafunc.fixturenames and metafunc.definition.get_closest_marker("every_dispatch"):
        metafunc.parametrize("db", DISPATCH_MODES, indirect=True, scope="session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SERVER_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.db)


@pytest.fixture(autouse=True)
def _greenplum_only(request: pytest.FixtureRequest) -> None:
    """Skips a test marked ``greenplum`` where the test database is another engine."""
    if request.node.get_closest_marker("greenplum"):
        kind = request.getfixturevalue(SERVER_FIXTURE).kind
        if kind != "greenplum":
            pytest.skip(f"means something on Greenplum only; the test database is {kind}")


@pytest.fixture(scope="session")
def native_db():
    import gpcnn

    db = gpcnn.connect(database_url(), schema=TEST_SCHEMA)
    gpcnn.install(db)
    yield db
    db.close()


@pytest.fixture(scope="session")
def handles_by_dispatch(native_db):
    """One handle per dispatch mode, opened on first use and kept for the session."""
    handles = {"native": native_db}
    yield handles
    for mode, handle in handles.items():
        if mode != "native":
            handle.close()


@pytest.fixture(scope="session")
def db(request: pytest.FixtureRequest, handles_by_dispatch):
    # Parametrized by dispatch mode in modules marked every_dispatch; the engine's own elsewhere.
    # The parameter is db's own, so pytest sets it up again, with what depends on it, whenever
    # the mode changes.
    dispatch = getattr(request, "param", "native")
    if dispatch not in handles_by_dispatch:
        import gpcnn

        handle = gpcnn.connect(database_url(), schema=TEST_SCHEMA, dispatch=dispatch)
        # One statement merges in the database whatever the size, as it does past the backend's
        # database_merge_bytes: so the suite's small models also take Greenplum's path for big
        # ones (test_big_models checks that the client's merge of one statement gives the same
        # model).
        handle.backend.database_merge_bytes = 0
        handles_by_dispatch[dispatch] = handle
    return handles_by_dispatch[dispatch]


@pytest.fixture(scope="session")
def backend(db):
    return db.backend


@pytest.fixture(scope="session")
def schema() -> str:
    return TEST_SCHEMA
