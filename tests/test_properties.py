"""Properties of what users give gpcnn, tried on many generated inputs (Hypothesis, the profile
``gpcnn`` of conftest.py: seeded, so every run tries the same examples): table names, image and
label arrays, merge options, and the wire format of weights and their chunks. Each test's name
says what must hold. No database."""

from __future__ import annotations

import math
import re
import uuid
import warnings

import numpy as np
import pytest
import sqlalchemy as sa
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sklearn.exceptions import DataConversionWarning

from gpcnn.data import array_checks
from gpcnn.data.dealing import validate_images
from gpcnn.engines.copying import BinaryRows, chunk_rows
from gpcnn.engines.greenplum import GreenplumBackend
from gpcnn.engines.identifiers import (
    IDENTIFIER_BYTES,
    MAX_NAME_BYTES,
    TableError,
    TableName,
    checked_name,
)
from gpcnn.engines.postgres import PostgresBackend
from gpcnn.engines.results import assemble
from gpcnn.fit import rules
from gpcnn.kernel import states, wire
from gpcnn.kernel.protocol import CompileOptions, SegmentOptions
from gpcnn.kernel.segment import LABEL_DTYPE

OFFLINE = sa.create_engine("postgresql+psycopg2://")  # never connects: quoting only
BACKEND = PostgresBackend(OFFLINE, "gpcnn")
BACKENDS = (BACKEND, GreenplumBackend(OFFLINE, "gpcnn"))
for _offline in BACKENDS:
    _offline.default_schema = "public"  # what a server would say; these never connect
PREPARER = OFFLINE.dialect.identifier_preparer

# -- table and column names ------------------------------------------------------------------------

# What the SQL of a name may be: one or two identifiers joined by a dot, each plain (lower case,
# no quote) or quoted with every inner quote doubled. Nothing else: no separator, comment or
# quote outside a quoted identifier.
PLAIN = r"[a-z_][a-z0-9_$]*"
QUOTED = r'"(?:[^"]|"")*"'
NAME_SQL = re.compile(rf"(?:{PLAIN}|{QUOTED})(?:\.(?:{PLAIN}|{QUOTED}))?", re.DOTALL)

INJECTION = [
    '"',
    '""',
    ".",
    ";",
    " ",
    "--",
    "/*",
    "*/",
    "'",
    "\x00",
    "\\",
    "$$",
    ":",
    "%",
    "\n",
    "x; DROP TABLE y",
    "DROP TABLE y; --",
    "a.b.c",
    '"a"."b"',
    '"a"b',
    "select",
    "é",
    "\ud800",
]
NAMES = st.one_of(
    st.text(max_size=80),
    st.lists(st.sampled_from(INJECTION) | st.text("aZ_9", max_size=3), max_size=6).map("".join),
    st.text("ab", min_size=60, max_size=70),  # around the 63-byte limit
)


def _refusal(error: TableError) -> None:
    event("refused")
    assert str(error), "a refusal says what is wrong"


@settings(max_examples=1000)
@given(NAMES)
def test_a_name_parses_to_parts_whose_quoted_sql_reads_back_the_same_or_is_refused(text):
    try:
        name = TableName.parse(text)
    except TableError as e:
        _refusal(e)
        return
    event("accepted")
    parts = [p for p in (name.schema, name.name) if p is not None]
    for part in parts:
        assert part and "\x00" not in part and "%" not in part
        assert len(part.encode()) <= IDENTIFIER_BYTES
    sql = name.sql(BACKEND)
    assert NAME_SQL.fullmatch(sql), sql
    qualified = name.qualified(BACKEND)  # a name without a schema gets the user's default one
    assert PREPARER.unformat_identifiers(sql) == [qualified.schema, qualified.name]
    assert TableName.parse(sql) == qualified
    for statement in _statements_naming(name):
        outside = re.sub(QUOTED, "", statement)
        assert not set(outside) & set('";\x00%') and "--" not in outside and "/*" not in outside


def _statements_naming(name: TableName) -> list[str]:
    """Statements each engine builds around a table's name: whatever the name, only its quoted
    SQL."""
    staging = name.with_suffix("__gpcnn_staging")
    return [
        statement
        for backend in BACKENDS
        for statement in (
            *backend.image_table_ddl(name, [0, 1]),
            backend.drop_ddl(name, if_exists=True),
            backend.rename_table_ddl(staging, name),
            backend.copy_sql(name),
            backend.read_sql(name, ids=True),
            backend.buffers_sql(name),
        )
    ]


@settings(max_examples=500)
@given(st.tuples(NAMES, NAMES))
def test_a_schema_and_table_tuple_is_quoted_as_given_or_refused(pair):
    try:
        name = TableName.parse(pair)
    except TableError as e:
        _refusal(e)
        assert any(
            not p
            or "\x00" in p
            or "%" in p
            or len(p.encode("utf-8", "surrogatepass")) > IDENTIFIER_BYTES
            or any("\ud800" <= c <= "\udfff" for c in p)
            for p in pair
        )
        return
    event("accepted")
    assert (name.schema, name.name) == pair
    sql = name.sql(BACKEND)
    assert NAME_SQL.fullmatch(sql), sql
    assert PREPARER.unformat_identifiers(sql) == list(pair)


@settings(max_examples=200)
@given(st.text(st.characters(codec="utf-8"), min_size=1, max_size=70))
def test_a_name_gpcnn_creates_is_refused_past_its_byte_limit_and_accepted_within_it(name):
    size = len(name.encode())
    if "\x00" in name or "%" in name or size > IDENTIFIER_BYTES:
        with pytest.raises(TableError):
            checked_name((name, name))
        return
    if size > MAX_NAME_BYTES:
        with pytest.raises(TableError, match=f"longer than {MAX_NAME_BYTES} bytes"):
            checked_name(("s", name))
    else:
        assert checked_name(("s", name)).name == name


@settings(max_examples=200)
@given(NAMES)
def test_a_column_name_reaches_sql_as_one_identifier_that_reads_back_the_same(column):
    if "\x00" in column or not column:
        return  # no column has such a name: pack_table finds columns in the catalog first
    sql = BACKEND.quote(column)
    assert re.fullmatch(rf"{PLAIN}|{QUOTED}", sql, re.DOTALL), sql
    # psycopg2's dialect doubles a % (its parameter marker) as it quotes
    assert PREPARER.unformat_identifiers(sql) == [column.replace("%", "%%")]


# -- images and labels -----------------------------------------------------------------------------

DTYPES = st.one_of(
    hnp.scalar_dtypes(),
    st.sampled_from([np.dtype(object), np.dtype("U3"), np.dtype("S2"), np.dtype("V4")]),
)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=3)


@st.composite
def any_array(draw, dtype=DTYPES, shape=SHAPES):
    dtype, shape = draw(dtype), draw(shape)
    if dtype.kind in "OV":
        return np.zeros(shape, dtype=dtype)
    return draw(hnp.arrays(dtype, shape))


@st.composite
def plausible_images(draw):
    """Images as users give them, with one thing sometimes wrong: a side of 0, a NaN, infinity,
    a negative or too large value, another dtype."""
    n = draw(st.integers(1, 4))
    sides = draw(st.lists(st.integers(1, 3), min_size=2, max_size=3))
    if draw(st.integers(0, 7)) == 0:
        sides[draw(st.integers(0, len(sides) - 1))] = 0
    shape = (n, *sides)
    dtype = draw(
        st.sampled_from(["uint8", "float32", "uint8", "float64", "float16", "int64", "bool"])
    )
    if dtype in ("uint8", "int64"):
        x = draw(hnp.arrays(dtype, shape, elements=st.integers(0, 255)))
    elif dtype == "bool":
        x = draw(hnp.arrays(dtype, shape))
    else:
        x = draw(hnp.arrays(dtype, shape, elements=st.floats(0, 1, width=16)))
    if x.size and draw(st.integers(0, 3)) == 0:
        spoiled = draw(st.sampled_from([math.nan, math.inf, -1.0, 2.0, 300.0]))
        x = x.astype(np.float64) if np.isnan(spoiled) or np.isinf(spoiled) else x
        x.flat[draw(st.integers(0, x.size - 1))] = spoiled if x.dtype.kind == "f" else 0
    return x


@st.composite
def plausible_labels(draw, n=None):
    """One label per image and class indices, or nearly: a wrong length, a negative or huge
    label, integral floats, strings, a second column."""
    n = draw(st.integers(1, 4)) if n is None else n
    y = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    change = draw(
        st.sampled_from(
            ["none", "none", "none", "long", "negative", "huge", "floats", "strings", "column"]
        )
    )
    if change == "long":
        y = np.append(y, 1)
    elif change == "negative":
        y[0] = -1
    elif change == "huge":
        y = y.astype(np.int64)
        y[0] = 2**31
    elif change == "floats":
        y = y.astype(np.float64)
    elif change == "strings":
        y = y.astype(str)
    elif change == "column":
        y = y[:, np.newaxis]
    return y


@st.composite
def plausible_pair(draw):
    """Images and as many labels, each nearly right."""
    x = draw(plausible_images())
    return x, draw(plausible_labels(len(x)))


IMAGE_INPUTS = st.one_of(
    plausible_images(),
    plausible_images(),
    any_array(),
    any_array(st.sampled_from([np.dtype("uint8"), np.dtype("float32"), np.dtype("float64")])),
    st.none(),
    st.text(max_size=3),
    st.lists(st.lists(st.integers(-2, 300), max_size=3), max_size=3),
)
LABEL_INPUTS = st.one_of(
    plausible_labels(),
    plausible_labels(),
    plausible_labels(),
    any_array(shape=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=6)),
    any_array(
        st.sampled_from([np.dtype("int64"), np.dtype("uint64"), np.dtype("int8")]),
        hnp.array_shapes(min_dims=1, max_dims=1, min_side=0, max_side=6),
    ),
    st.none(),
    st.lists(st.integers(-3, 2**40), max_size=6),
)
TRAINING_INPUTS = st.one_of(
    plausible_pair(), plausible_pair(), st.tuples(IMAGE_INPUTS, LABEL_INPUTS)
)


def _accepted(check, *args, **kwargs):
    """What ``check`` returns, or None where it refused with a ValueError or TypeError (a
    TableError is one) that says why: never another exception."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # float images are stored as uint8, with a warning
            result = check(*args, **kwargs)
    except (ValueError, TypeError) as e:
        event("refused")
        assert type(e) in (ValueError, TypeError) or isinstance(e, TableError), repr(e)
        assert len(str(e)) > 10, repr(e)
        return None
    event("accepted")
    return result


@settings(max_examples=600)
@given(IMAGE_INPUTS)
def test_images_to_predict_are_accepted_as_n_h_w_c_numbers_or_refused_with_a_value_or_type_error(x):
    checked = _accepted(array_checks.check_images, x)
    if checked is None:
        return
    assert checked.ndim in (2, 3, 4) and checked.size > 0
    assert checked.dtype.kind in "biuf"
    assert np.isfinite(checked).all() and (checked.dtype.kind in "bu" or checked.min() >= 0)
    assert checked.dtype.kind == "f" or checked.max() <= 255  # integers are pixels


@settings(max_examples=600)
@given(TRAINING_INPUTS, st.booleans())
def test_arrays_to_fit_are_accepted_as_images_or_rows_and_labels_or_refused_with_a_value_or_type_error(
    pair, at_least_two
):
    x, y = pair
    accepted = _accepted(array_checks.check_training, x, y, at_least_two=at_least_two)
    if accepted is None:
        return
    checked, labels = accepted
    assert checked.ndim in (2, 3, 4) and checked.size > 0 and checked.dtype.kind in "biuf"
    assert labels.shape == (len(checked),)
    assert np.array_equal(labels, np.asarray(y).reshape(-1))  # the labels, as they were given
    if at_least_two:
        assert len(np.unique(labels)) >= 2


@settings(max_examples=600)
@given(TRAINING_INPUTS, st.none() | st.none() | st.integers(-2, 6) | st.integers(-2, 2**33))
def test_images_to_load_become_uint8_n_h_w_c_or_float32_rows_and_int32_classes_or_a_table_error(
    pair, num_classes
):
    x, y = pair
    accepted = _accepted(validate_images, x, y, num_classes)  # numpy's refuses ragged lists
    if accepted is None:
        return
    images, labels, classes = accepted
    assert images.size > 0
    assert (images.dtype, images.ndim) in ((np.uint8, 4), (np.uint8, 2), (np.float32, 2))
    assert images.dtype == np.uint8 or np.asarray(x).dtype.kind == "f"  # floats rows, as given
    assert images.flags.c_contiguous
    assert labels.dtype == LABEL_DTYPE and labels.shape == (len(images),)
    assert np.array_equal(labels, np.asarray(y))  # the same classes: nothing wrapped
    assert labels.min() >= 0 and labels.max() < classes
    if num_classes is not None:
        assert classes == num_classes


# -- merge options ---------------------------------------------------------------------------------

# The documented ranges (the user guide's merge rules, each rule's docstring), written out here so that
# the test does not take them from the code it tests: (low, low included, high, high included).
INF = math.inf
DOCUMENTED = {
    "eta": lambda k: (0, True, 1, False),
    "zeta": lambda k: (0, False, INF, False),
    "alpha": lambda k: (0, False, 1 / k, False),
    "mu": lambda k: (0, True, INF, False),
    "server_lr": lambda k: (0, False, INF, False),
    "beta1": lambda k: (0, True, 1, False),
    "beta2": lambda k: (0, True, 1, False),
    "tau": lambda k: (0, False, INF, False),
}
# The documented choices of the options whose values are words.
CHOICES = {"batchnorm_statistics": ("averaged", "pooled")}
BUILT_IN = [
    "average",
    "bmuf",
    "easgd",
    "none",
    "fedprox",
    "scaffold",
    "fedadam",
    "fedyogi",
    "fednova",
]


def _inside(option: str, value: float, k: int) -> bool:
    low, with_low, high, with_high = DOCUMENTED[option](k)
    above = value > low or (with_low and value == low)
    below = value < high or (with_high and value == high)
    if option == "alpha":  # K*alpha < 1, as the rule computes it
        return value > 0 and k * value < 1
    return above and below


VALUES = st.one_of(
    st.floats(),
    st.floats(-2, 2),
    st.sampled_from([0.0, -0.0, 1.0, 1 - 2**-53, 2**-1074, math.nan, math.inf]),
    st.integers(-(10**400), 10**400),
    st.integers(-3, 3),
    st.booleans(),
    st.builds(np.float32, st.floats(-2, 2, width=32)),
    st.builds(np.int64, st.integers(-3, 3)),
    st.builds(np.bool_, st.booleans()),
    st.sampled_from(["0.5", None, 1j, [0.5], object()]),
    st.sampled_from(["averaged", "pooled", "Pooled", ""]),
)


@settings(max_examples=1000)
@given(st.sampled_from(BUILT_IN), st.data(), VALUES, st.integers(1, 64))
def test_a_merge_option_is_accepted_inside_its_documented_range_and_refused_outside_it_by_name(
    name, data, value, k
):
    defaults = rules.RULES[name].option_defaults(k)
    if not defaults:
        with pytest.raises(ValueError, match=f"{name} takes no options"):
            rules.check_options(name, {"eta": value}, k)
        return
    option = data.draw(st.sampled_from(sorted(defaults)))
    try:
        checked = rules.check_options(name, {option: value}, k)
    except ValueError as e:
        event("refused")
        message = str(e)
        assert f'merge="{name}": {option}=' in message
        if isinstance(defaults[option], bool):
            assert not isinstance(value, bool | np.bool_)
            assert "True or False" in message
            return
        if isinstance(defaults[option], str):
            assert value not in CHOICES[option] and "is not a choice" in message
            return
        allowed = rules.RULES[name].option_ranges(k)[option].allowed
        assert f"{option} must be {allowed}" in message
        real = isinstance(value, int | float | np.floating | np.integer)
        if real and not isinstance(value, bool | np.bool_):
            huge = isinstance(value, int) and abs(value) >= 2**1024  # past any float
            number = math.copysign(INF, value > 0) if huge else float(value)
            assert not math.isfinite(number) or not _inside(option, number, k)
        return
    event("accepted")
    assert set(checked) == set(defaults)
    if isinstance(defaults[option], bool):
        assert isinstance(value, bool | np.bool_) and checked[option] is bool(value)
        return
    if isinstance(defaults[option], str):
        assert value in CHOICES[option] and checked[option] == value
        return
    assert type(checked[option]) is float and checked[option] == float(value)
    assert math.isfinite(checked[option]) and _inside(option, checked[option], k)
    rule = rules.make_rule(name, np.ones(3, bool), k, **{option: value})
    assert getattr(rule, option) == checked[option]


@settings(max_examples=200)
@given(st.sampled_from(BUILT_IN), st.text(max_size=12), st.integers(1, 8))
def test_an_unknown_merge_option_is_refused_with_the_valid_ones(name, option, k):
    defaults = rules.RULES[name].option_defaults(k)
    if option in defaults:
        return
    with pytest.raises(ValueError) as refused:
        rules.check_options(name, {option: 0.5}, k)
    message = str(refused.value)
    assert f"{option}=0.5 is not an option" in message
    assert (", ".join(defaults) if defaults else "takes no options") in message


def test_every_built_in_rules_real_option_has_a_documented_range():
    assert list(rules.RULES)[: len(BUILT_IN)] == BUILT_IN
    for name in BUILT_IN:
        for option, default in rules.RULES[name].option_defaults(4).items():
            assert isinstance(default, bool) or option in {**DOCUMENTED, **CHOICES}, (name, option)


# -- the wire format -------------------------------------------------------------------------------

# Any float32 bit pattern: every NaN payload, both infinities and zeros, subnormals.
BITS = st.integers(0, 2**32 - 1)
WEIGHT_SHAPES = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)


@st.composite
def model_layouts(draw):
    """A manifest (scalars and zero-size weights included) and its float32 arrays."""
    entries, values = [], []
    for i, shape in enumerate(draw(st.lists(WEIGHT_SHAPES, max_size=6))):
        size = math.prod(shape)
        bits = draw(st.lists(BITS, min_size=size, max_size=size))
        values.append(np.array(bits, dtype=np.uint32).view(np.float32).reshape(shape))
        entries.append(
            {
                "name": f"w{i}",
                "shape": list(shape),
                "dtype": "float32",
                "trainable": draw(st.booleans()),
            }
        )
    return entries, values


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@settings(max_examples=400)
@given(model_layouts())
def test_any_float32_model_layout_encodes_and_decodes_to_the_same_bits(layout):
    entries, values = layout
    data = wire.to_bytes(wire.flatten(values))
    assert len(data) == 4 * sum(wire.sizes(entries))
    back = wire.unflatten(wire.from_bytes(data), entries)
    assert len(back) == len(values)
    for original, decoded, entry in zip(values, back, entries, strict=True):
        assert decoded.dtype == np.float32 and list(decoded.shape) == entry["shape"]
        assert np.array_equal(_bits(decoded), _bits(original))
    mask = wire.trainable_mask(entries)
    assert mask.dtype == bool and mask.size == sum(wire.sizes(entries))
    expected = [
        np.full(n, e["trainable"]) for e, n in zip(entries, wire.sizes(entries), strict=True)
    ]
    assert np.array_equal(mask, np.concatenate([*expected, np.zeros(0, bool)]))
    with pytest.raises(wire.WeightsError, match="weight values for a model of"):
        wire.unflatten(wire.from_bytes(data + b"\0\0\0\0"), entries)


VECTORS = st.lists(BITS, max_size=70).map(lambda b: np.array(b, np.uint32).view(np.float32))


@settings(max_examples=400)
@given(VECTORS, st.integers(1, 80), st.lists(st.integers(1, 64), max_size=8))
def test_a_vector_sent_as_copy_chunks_in_any_pieces_reassembles_to_the_same_bits(
    vector, chunk_values, cuts
):
    stream = b"".join(chunk_rows(("integer",), [((7,), vector)], chunk_values))
    rows = BinaryRows(("integer", "integer", "bytea"))
    at = 0
    for cut in [*cuts, len(stream)]:  # the driver hands COPY data over in pieces of any size
        rows.write(stream[at : at + cut])
        at += cut
    rows.write(stream[at:])
    assert len(rows.rows) == math.ceil(vector.size / chunk_values)
    assert all(key == 7 and len(data) <= 4 * chunk_values for key, _, data in rows.rows)
    chunks = {chunk: data for _, chunk, data in rows.rows}
    assert np.array_equal(_bits(assemble(chunks)), _bits(vector))


COMPILE = CompileOptions({"class_name": "SGD", "config": {"learning_rate": 0.1}}, "mse", ())


@settings(max_examples=400)
@given(VECTORS, st.integers(1, 80), st.integers(0, 10**6))
def test_a_vector_cut_into_chunks_at_any_size_reassembles_to_the_same_bits_on_both_ends(
    vector, chunk_values, count
):
    # client -> segment: the start vector (never empty: a model has weights) received chunk by
    # chunk into the inbox
    token = f"{uuid.uuid4().hex}/0"
    if vector.size:
        options = SegmentOptions(COMPILE, (2, 2, 1)).with_transport(1, vector.size)
        state = states.new_state(token)
        for index, start in enumerate(range(0, vector.size, chunk_values)):
            states.receive(state, index, vector[start : start + chunk_values].tobytes(), options)
        assert np.array_equal(_bits(states.take_start(state, options, 0)), _bits(vector))
    # segment -> client: the trained vector handed on by state_chunks, reassembled by the client
    states.outbox[token] = vector
    header = states.encode_state({"count": count, "sums": {"loss": 1.5}, "token": token})
    rows = list(states.state_chunks(header, chunk_values))
    assert rows[0][0] == -1 and states.decode_state(rows[0][2])["values"] == vector.size
    assert token not in states.outbox
    assert all(images == count for _, images, _ in rows)
    chunks = {index: data for index, _, data in rows[1:]}
    assert len(chunks) == math.ceil(vector.size / chunk_values)
    assert all(len(data) <= 4 * chunk_values for data in chunks.values())
    assert np.array_equal(_bits(assemble(chunks)), _bits(vector))
    if len(chunks) > 1:
        missing = dict(chunks)
        del missing[0]
        with pytest.raises(ValueError, match=r"came back, not 0\.\."):
            assemble(missing)


# -- what the properties found, kept as plain cases ------------------------------------------------


@pytest.mark.parametrize(
    "table",
    ["a%b", ("s", "100%"), "a\x00b", ("s", "x\x00; DROP TABLE y"), "a" * 64, ("é" * 32, "t")],
)
def test_names_postgres_or_the_driver_would_change_are_refused(table):
    # '%': created as "a%b" but copied into as "a%%b"; NUL: no identifier holds one; over 63
    # bytes: the server cuts the name to another one
    with pytest.raises(TableError, match=r"cannot hold|identifier limit"):
        TableName.parse(table)


def test_a_merge_option_too_large_for_a_float_is_refused_by_name():
    with pytest.raises(ValueError, match=r'merge="bmuf": zeta=1000.* is too large for a float'):
        rules.check_options("bmuf", {"zeta": 10**400}, 2)


def test_a_label_past_int32_is_refused_not_wrapped_to_another_class():
    with pytest.raises(TableError, match="label 2147483648 is larger than the int32 labels"):
        validate_images(np.zeros((2, 2, 2), np.uint8), np.array([0, 2**31]))


@pytest.mark.parametrize("dtype", ["U1", "datetime64[s]", "timedelta64[s]"])
def test_images_that_are_not_numbers_are_refused(dtype):
    with pytest.raises(TypeError, match="numeric pixels"):
        array_checks.check_images(np.zeros((2, 2, 2), dtype))


def test_images_without_pixels_are_refused():
    with pytest.raises(ValueError, match="hold no pixels"):
        array_checks.check_images(np.zeros((2, 0, 3)))
    with pytest.raises(TableError, match="hold no pixels"):
        validate_images(np.zeros((2, 3, 0), np.uint8), np.array([0, 1]))


def test_labels_as_a_column_are_raveled_with_scikit_learns_warning():
    with pytest.warns(DataConversionWarning, match="column-vector y"):
        _, y = array_checks.check_training(
            np.zeros((2, 2, 2)), np.array([[0], [1]]), at_least_two=True
        )
    assert y.shape == (2,)
    with pytest.raises(ValueError, match="Unknown label type: multilabel-indicator"):
        array_checks.check_training(
            np.zeros((2, 2, 2)), np.array([[0, 1], [1, 0]]), at_least_two=True
        )


def test_empty_labels_are_refused_with_a_value_error():
    with pytest.raises(ValueError, match="1 images but 0 labels"):
        array_checks.check_training(
            np.zeros((1, 2, 2)), np.array([], dtype=bool), at_least_two=False
        )
