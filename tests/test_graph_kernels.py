"""Graph kernels (CPU): gather_reduce, scatter_reduce, segment_softmax.

Each is compared with its NumPy reference twin and with an independent oracle: scipy.sparse for
sums, torch's ``scatter_reduce`` for mean/max/min, ``torch_geometric.utils.softmax`` for the
softmax. Inputs have empty rows, single-edge rows and a hub row.
"""
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch_geometric.utils import softmax as pyg_softmax

from kernels.gather import (_gather_reduce, _gather_reduce_sent, _sent_edges, _sent_positions, gather_reduce,
                            gather_reduce_sent, sent_edges, sent_positions)
from kernels.scatter import _scatter_reduce, scatter_reduce
from kernels.segment_softmax import _segment_softmax, segment_softmax

OPS = ["sum", "mean", "max", "min"]
DTYPES = [np.float32, np.float64]
TORCH_REDUCE = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin"}
NUM_ROWS, NUM_COLS, HUB_DEGREE = 60, 50, 500


def random_csr(rng, index_dtype=np.int64, indptr_dtype=np.int64):
    """indptr [R + 1], indices [E]: empty rows (0, 5, last), single-edge rows (1, 2), a hub row (7)."""
    degrees = rng.integers(0, 6, NUM_ROWS)
    degrees[[0, 5, NUM_ROWS - 1]] = 0
    degrees[[1, 2]] = 1
    degrees[7] = HUB_DEGREE
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(indptr_dtype)
    indices = rng.integers(0, NUM_COLS, int(indptr[-1])).astype(index_dtype)
    return indptr, indices


def edge_rows(indptr):
    """Row id of every edge [E]."""
    return np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))


def torch_segment_reduce(index, values, num_segments, op):
    """Oracle: torch scatter_reduce with include_self=False into zeros (untouched stay 0)."""
    src = torch.from_numpy(np.ascontiguousarray(values))
    idx = torch.from_numpy(np.asarray(index, dtype=np.int64))
    if src.ndim == 2:
        idx = idx[:, None].expand_as(src)
    out = torch.zeros((num_segments,) + tuple(src.shape[1:]), dtype=src.dtype)
    return out.scatter_reduce(0, idx, src, reduce=TORCH_REDUCE[op], include_self=False).numpy()


def assert_close(actual, expected, dtype):
    assert actual.dtype == dtype
    assert actual.shape == expected.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol * scale)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# --------------------------------------------------------------------------------- gather_reduce

@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("num_features", [None, 5], ids=["1d", "2d"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_gather_reduce_matches_reference_and_oracle(rng, op, dtype, num_features, weighted):
    indptr, indices = random_csr(rng)
    shape = (NUM_COLS,) if num_features is None else (NUM_COLS, num_features)
    x = rng.standard_normal(shape).astype(dtype)
    weights = rng.uniform(-2, 2, len(indices)).astype(dtype) if weighted else None

    out = gather_reduce(indptr, indices, x, op, weights)

    assert_close(out, _gather_reduce(indptr, indices, x, op, weights), dtype)
    if op == "sum":
        data = np.ones(len(indices), dtype) if weights is None else weights
        oracle = sp.csr_matrix((data, indices, indptr), shape=(NUM_ROWS, NUM_COLS)) @ x
    else:
        messages = x[indices] if weights is None else x[indices] * (
            weights if x.ndim == 1 else weights[:, None])
        oracle = torch_segment_reduce(edge_rows(indptr), messages, NUM_ROWS, op)
    assert_close(out, oracle.astype(dtype), dtype)
    empty = np.diff(indptr) == 0
    assert np.all(out[empty] == 0)


@pytest.mark.parametrize("num_features", [None, 5], ids=["1d", "2d"])
@pytest.mark.parametrize("op", OPS)
def test_gather_reduce_reads_rows_split_into_x_and_ghosts(rng, op, num_features):
    """Rows [0, k) in x and [k, N) in ghosts give what the whole array gives (the twin and the
    scipy product as oracles); both sides of the split are read."""
    indptr, indices = random_csr(rng)
    shape = (NUM_COLS,) if num_features is None else (NUM_COLS, num_features)
    full = rng.standard_normal(shape).astype(np.float32)
    weights = rng.uniform(-2, 2, len(indices)).astype(np.float32)
    k = NUM_COLS // 3
    assert (indices < k).any() and (indices >= k).any()

    out = gather_reduce(indptr, indices, full[:k], op, weights, ghosts=full[k:])

    assert_close(out, _gather_reduce(indptr, indices, full, op, weights), np.float32)
    assert_close(out, _gather_reduce(indptr, indices, full[:k], op, weights, ghosts=full[k:]), np.float32)
    if op == "sum":
        oracle = sp.csr_matrix((weights, indices, indptr), shape=(NUM_ROWS, NUM_COLS)) @ full
        assert_close(out, oracle.astype(np.float32), np.float32)


def test_gather_reduce_rejects_ghosts_unlike_x(rng):
    indptr, indices = random_csr(rng)
    x = rng.standard_normal((NUM_COLS, 3)).astype(np.float32)
    with pytest.raises(ValueError, match="ghosts must have x's dtype"):
        gather_reduce(indptr, indices, x[:5], "sum", ghosts=x[5:, :2])
    with pytest.raises(ValueError, match="ghosts must have x's dtype"):
        gather_reduce(indptr, indices, x[:5], "sum", ghosts=x[5:].astype(np.float64))
    with pytest.raises(ValueError, match="indices"):
        gather_reduce(indptr, indices, x[:5], "sum", ghosts=x[5:6])


@pytest.mark.parametrize("op", OPS)
def test_gather_reduce_single_edge_rows_are_exact(rng, op):
    indptr, indices = random_csr(rng)
    x = rng.standard_normal((NUM_COLS, 3))
    out = gather_reduce(indptr, indices, x, op)
    for row in (1, 2):
        np.testing.assert_array_equal(out[row], x[indices[indptr[row]]])


@pytest.mark.parametrize("index_dtype,indptr_dtype",
                         [(np.int32, np.int32), (np.int32, np.int64), (np.int64, np.int32)])
def test_gather_reduce_accepts_int32_indices(rng, index_dtype, indptr_dtype):
    indptr, indices = random_csr(rng, index_dtype, indptr_dtype)
    x = rng.standard_normal((NUM_COLS, 4)).astype(np.float32)
    expected = gather_reduce(indptr.astype(np.int64), indices.astype(np.int64), x, "max")
    np.testing.assert_array_equal(gather_reduce(indptr, indices, x, "max"), expected)


@pytest.mark.parametrize("sent_share", [None, 0.4], ids=["all", "some_sent"])
@pytest.mark.parametrize("num_features", [None, 5], ids=["1d", "2d"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_gather_reduce_adds_the_weights_with_weight_op_add(rng, op, dtype, num_features, sent_share):
    """``weight_op='add'``: each term is x[column] + weight (float32 weights, as a graph's), against
    torch over those terms and the twin, split between x and ghosts; max and min bit for bit (each
    term is the same sum). Without weights it is the plain gather."""
    indptr, indices = random_csr(rng)
    shape = (NUM_COLS,) if num_features is None else (NUM_COLS, num_features)
    full = rng.standard_normal(shape).astype(dtype)
    weights = rng.uniform(0, 2, len(indices)).astype(np.float32)
    sent = np.ones(NUM_COLS, bool) if sent_share is None else rng.random(NUM_COLS) < sent_share
    k = NUM_COLS // 3

    if sent_share is None:
        out = gather_reduce(indptr, indices, full[:k], op, weights, weight_op="add", ghosts=full[k:])
        twin = _gather_reduce(indptr, indices, full, op, weights, weight_op="add")
    else:
        out, _ = gather_reduce_sent(indptr, indices, full[:k], sent, op, weights, weight_op="add", ghosts=full[k:])
        twin, _ = _gather_reduce_sent(indptr, indices, full, sent, op, weights, weight_op="add")

    keep = sent[indices]
    added = weights.astype(dtype)[keep]
    terms = full[indices[keep]] + (added if full.ndim == 1 else added[:, None])
    oracle = torch_segment_reduce(edge_rows(indptr)[keep], terms, NUM_ROWS, op)
    compare = np.testing.assert_array_equal if op in ("max", "min") else (lambda a, b: assert_close(a, b, dtype))
    compare(out, oracle)
    compare(out, twin)
    plain = gather_reduce(indptr, indices, full, op, weight_op="add")
    np.testing.assert_array_equal(plain, gather_reduce(indptr, indices, full, op))


def test_gather_reduce_rejects_an_unknown_weight_op(rng):
    indptr, indices = random_csr(rng)
    with pytest.raises(ValueError, match="weight_op must be one of 'mul', 'add'; got 'max'"):
        gather_reduce(indptr, indices, np.ones(NUM_COLS), "min", weight_op="max")


def test_gather_reduce_reads_float32_weights_into_float64_as_their_float64_copy(rng):
    """A float64 gather reads a graph's float32 weights as they are (no [E] copy), with the result of
    the weights widened first: torch over the float64 terms, max and min bit for bit."""
    indptr, indices = random_csr(rng)
    x = rng.standard_normal((NUM_COLS, 3))
    weights = rng.uniform(-2, 2, len(indices)).astype(np.float32)
    wide = weights.astype(np.float64)[:, None]
    for weight_op, terms in (("mul", x[indices] * wide), ("add", x[indices] + wide)):
        for op in OPS:
            out = gather_reduce(indptr, indices, x, op, weights, weight_op=weight_op)
            oracle = torch_segment_reduce(edge_rows(indptr), terms, NUM_ROWS, op)
            if op in ("max", "min"):
                np.testing.assert_array_equal(out, oracle)
            else:
                assert_close(out, oracle, np.float64)


def test_gather_reduce_casts_weights_to_x_dtype(rng):
    indptr, indices = random_csr(rng)
    x = rng.standard_normal(NUM_COLS).astype(np.float32)
    weights = rng.uniform(0, 1, len(indices))  # float64
    out = gather_reduce(indptr, indices, x, "sum", weights)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, gather_reduce(indptr, indices, x, "sum",
                                                      weights.astype(np.float32)))


def test_gather_reduce_without_checks_gives_the_same_result(rng):
    indptr, indices = random_csr(rng)
    x = rng.standard_normal((NUM_COLS, 2))
    np.testing.assert_array_equal(gather_reduce(indptr, indices, x, "mean", check=False),
                                  gather_reduce(indptr, indices, x, "mean"))


@pytest.mark.parametrize("num_features", [None, 5], ids=["1d", "2d"])
@pytest.mark.parametrize("op", OPS)
def test_gather_reduce_sent_reduces_only_the_senders_edges(rng, op, num_features):
    """Only edges whose column sent count: against the twin, and against torch over the kept edges
    (a row whose edges all come from silent columns is 0, as an empty row is); the hub row's
    columns are split between x and ghosts."""
    indptr, indices = random_csr(rng)
    shape = (NUM_COLS,) if num_features is None else (NUM_COLS, num_features)
    full = rng.standard_normal(shape)
    weights = rng.uniform(-2, 2, len(indices))
    sent = rng.random(NUM_COLS) < 0.4
    k = NUM_COLS // 3

    out, counts = gather_reduce_sent(indptr, indices, full[:k], sent, op, weights, ghosts=full[k:])

    keep = sent[indices]
    np.testing.assert_array_equal(counts, np.bincount(edge_rows(indptr)[keep], minlength=NUM_ROWS))
    assert ((counts == 0) & (np.diff(indptr) > 0)).any()  # some rows hear nothing though they have edges
    messages = full[indices[keep]] * (weights[keep] if full.ndim == 1 else weights[keep][:, None])
    assert_close(out, torch_segment_reduce(edge_rows(indptr)[keep], messages, NUM_ROWS, op), np.float64)
    twin, twin_counts = _gather_reduce_sent(indptr, indices, full, sent, op, weights)
    assert_close(out, twin, np.float64)
    np.testing.assert_array_equal(counts, twin_counts)
    assert np.all(out[counts == 0] == 0) and not np.signbit(out[counts == 0]).any()


@pytest.mark.parametrize("sent_share", [None, 0.4], ids=["all", "some"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_gather_reduce_writes_a_slice_of_columns_where_it_lies(rng, op, dtype, sent_share):
    """x a slice of a wider array's columns and ``out`` one too (written where it lies): the slice of
    the whole-width result bit for bit (the twin on the whole width as an oracle), and the other
    columns of ``out``'s array untouched."""
    indptr, indices = random_csr(rng)
    full = rng.standard_normal((NUM_COLS, 7)).astype(dtype)
    weights = rng.uniform(-2, 2, len(indices)).astype(dtype)
    k = NUM_COLS // 3
    columns = slice(2, 5)
    wide = np.full((NUM_ROWS, 7), 9.0, dtype)
    x, ghosts = full[:k, columns], np.ascontiguousarray(full[k:, columns])
    assert not x.flags.c_contiguous and not wide[:, columns].flags.c_contiguous
    if sent_share is None:
        whole = gather_reduce(indptr, indices, full[:k], op, weights, ghosts=full[k:])
        result = gather_reduce(indptr, indices, x, op, weights, ghosts=ghosts, out=wide[:, columns])
        oracle = _gather_reduce(indptr, indices, full, op, weights)
    else:
        sent = rng.random(NUM_COLS) < sent_share
        whole, _ = gather_reduce_sent(indptr, indices, full[:k], sent, op, weights, ghosts=full[k:])
        result, _ = gather_reduce_sent(indptr, indices, x, sent, op, weights, ghosts=ghosts, out=wide[:, columns])
        oracle, _ = _gather_reduce_sent(indptr, indices, full, sent, op, weights)

    assert np.shares_memory(result, wide)
    assert np.array_equal(wide[:, columns], whole[:, columns])
    assert_close(wide[:, columns], oracle[:, columns], dtype)
    assert np.all(wide[:, :2] == 9) and np.all(wide[:, 5:] == 9)


def test_gather_reduce_rejects_an_out_unlike_its_result(rng):
    indptr, indices = random_csr(rng)
    x = rng.standard_normal((NUM_COLS, 3)).astype(np.float32)
    for bad in (np.zeros((NUM_ROWS, 4), np.float32), np.zeros((NUM_ROWS, 3)), np.zeros((NUM_ROWS, 6), np.float32)[:, ::2],
                np.zeros(NUM_ROWS, np.float32)):
        with pytest.raises(ValueError, match="out must be a float32 NumPy array of shape"):
            gather_reduce(indptr, indices, x, "sum", out=bad)


@pytest.mark.parametrize("op", OPS)
def test_gather_reduce_sent_with_every_column_sending_reduces_every_edge(rng, op):
    """Against the NumPy twin of the unmasked gather and torch, every row counting all its edges."""
    indptr, indices = random_csr(rng)
    x = rng.standard_normal((NUM_COLS, 3)).astype(np.float32)
    out, counts = gather_reduce_sent(indptr, indices, x, np.ones(NUM_COLS, bool), op)
    assert_close(out, _gather_reduce(indptr, indices, x, op), np.float32)
    assert_close(out, torch_segment_reduce(edge_rows(indptr), x[indices], NUM_ROWS, op), np.float32)
    np.testing.assert_array_equal(counts, np.diff(indptr))


def test_gather_reduce_sent_rejects_a_bad_mask(rng):
    indptr, indices = random_csr(rng)
    x = rng.standard_normal(NUM_COLS)
    with pytest.raises(ValueError, match="one entry per row of x and ghosts"):
        gather_reduce_sent(indptr, indices, x, np.ones(NUM_COLS - 1, bool), "min")
    with pytest.raises(ValueError, match="bool NumPy array"):
        gather_reduce_sent(indptr, indices, x, np.ones(NUM_COLS), "min")


def test_sent_edges_are_the_edges_of_senders_in_csr_order(rng):
    """Against a NumPy mask of the edges, with int32 indices; the twin agrees."""
    indptr, indices = random_csr(rng, np.int32)
    sent = rng.random(NUM_COLS) < 0.3
    sent_indptr, positions = sent_edges(indptr, indices, sent)
    np.testing.assert_array_equal(positions, np.flatnonzero(sent[indices]))
    kept_rows = edge_rows(indptr)[positions]
    np.testing.assert_array_equal(np.diff(sent_indptr), np.bincount(kept_rows, minlength=NUM_ROWS))
    for got, want in zip(sent_edges(indptr, indices, sent), _sent_edges(indptr, indices, sent)):
        np.testing.assert_array_equal(got, want)
    nothing_indptr, nothing = sent_edges(indptr, indices, np.zeros(NUM_COLS, bool))
    assert nothing.shape == (0,) and not nothing_indptr.any()


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_sent_positions_are_the_edges_of_senders_whatever_the_guess_of_their_number(rng, dtype):
    """Against a NumPy mask of the edges and the twin; a guess too short (down to none), exact or
    too long gives the same positions."""
    _, indices = random_csr(rng, dtype)
    for share in (0.0, 0.01, 0.3, 1.0):
        sent = rng.random(NUM_COLS) < share
        want = np.flatnonzero(sent[indices])
        np.testing.assert_array_equal(_sent_positions(indices, sent), want)
        for expected in (0, 1, len(want) // 2, len(want), 3 * len(want) + 5):
            got = sent_positions(indices, sent, expected)
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="entries of sent"):
        sent_positions(indices, np.ones(int(indices.max()), bool))


@pytest.mark.parametrize("num_cols", [63, 64, 65, 1000])
def test_sent_masks_of_many_columns_are_read_bit_by_bit(rng, num_cols):
    """The kernels read the mask as bits in 64-bit words: columns on both sides of word boundaries,
    and a last word only partly used, against a NumPy mask of the edges."""
    indptr, _ = random_csr(rng)
    indices = rng.integers(0, num_cols, int(indptr[-1]))
    indices[:4] = [0, 63 % num_cols, 64 % num_cols, num_cols - 1]
    sent = rng.random(num_cols) < 0.5
    sent[[0, num_cols - 1]] = True
    _, positions = sent_edges(indptr, indices, sent)
    np.testing.assert_array_equal(positions, np.flatnonzero(sent[indices]))
    np.testing.assert_array_equal(sent_positions(indices, sent, 10), positions)
    x = rng.standard_normal(num_cols)
    _, counts = gather_reduce_sent(indptr, indices, x, sent, "sum")
    np.testing.assert_array_equal(counts, np.bincount(edge_rows(indptr), weights=sent[indices], minlength=NUM_ROWS))


def test_gather_reduce_no_rows_and_no_edges():
    x = np.ones((3, 2), np.float32)
    assert gather_reduce(np.zeros(1, np.int64), np.zeros(0, np.int64), x, "sum").shape == (0, 2)
    out = gather_reduce(np.zeros(4, np.int64), np.zeros(0, np.int64), x, "min")
    np.testing.assert_array_equal(out, np.zeros((3, 2), np.float32))


def _gather_args(rng):
    indptr, indices = random_csr(rng)
    return dict(indptr=indptr, indices=indices, x=rng.standard_normal(NUM_COLS), op="sum")


def _decreasing(indptr):
    indptr = indptr.copy()
    indptr[3], indptr[4] = indptr[4], indptr[3] - 1
    return indptr


GATHER_ERRORS = [
    ("op", lambda a: "prod", "op must be one of 'sum', 'mean', 'max', 'min'; got 'prod'"),
    ("op", lambda a: None, "op must be one of"),
    ("x", lambda a: a["x"].reshape(NUM_COLS, 1, 1), r"x must be 1-D or 2-D; got shape \(50, 1, 1\)"),
    ("x", lambda a: a["x"].astype(np.int64), "x must have dtype float32 or float64; got int64"),
    ("indices", lambda a: a["indices"].astype(np.float64), "indices must have dtype int32 or int64"),
    ("indices", lambda a: a["indices"].reshape(1, -1), "indices must be 1-D"),
    ("indices", lambda a: np.where(np.arange(len(a["indices"])) == 9, NUM_COLS, a["indices"]),
     r"indices must lie in \[0, 50\) \(rows of x\); found 50"),
    ("indices", lambda a: np.where(np.arange(len(a["indices"])) == 9, -1, a["indices"]),
     r"indices must lie in \[0, 50\) \(rows of x\); found -1"),
    ("indptr", lambda a: a["indptr"].astype(np.float64), "indptr must have dtype int32 or int64"),
    ("indptr", lambda a: a["indptr"].reshape(1, -1), "indptr must be 1-D with at least one entry"),
    ("indptr", lambda a: np.zeros(0, np.int64), "indptr must be 1-D with at least one entry"),
    ("indptr", lambda a: a["indptr"] + 1, "indptr must start at 0; got indptr"),
    ("indptr", lambda a: np.append(a["indptr"], a["indptr"][-1] + 1), r"indptr\[-1\] = \d+ must equal the number of edges, "
                                           r"len\(indices\) = \d+"),
    ("indptr", lambda a: _decreasing(a["indptr"]), r"indptr must not decrease; indptr\[4\]"),
    ("weights", lambda a: np.ones(len(a["indices"]) + 1), r"weights must have shape \(\d+,\)"),
    ("weights", lambda a: np.ones((len(a["indices"]), 1)), r"weights must have shape"),
    ("weights", lambda a: np.ones(len(a["indices"]), np.int64), "weights must be a floating-point"),
]


@pytest.mark.parametrize("name,bad,message", GATHER_ERRORS,
                         ids=[f"{name}-{i}" for i, (name, _, _) in enumerate(GATHER_ERRORS)])
def test_gather_reduce_rejects_bad_arguments(rng, name, bad, message):
    args = _gather_args(rng)
    args[name] = bad(args)
    with pytest.raises(ValueError, match=message):
        gather_reduce(**args)


# -------------------------------------------------------------------------------- scatter_reduce

@pytest.mark.parametrize("num_features", [None, 3], ids=["1d", "2d"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_scatter_reduce_matches_reference_and_oracle(rng, op, dtype, num_features):
    num_segments = 40
    index = rng.integers(0, 30, 300)  # segments 30..39 untouched
    index[:150] = 17  # a hub segment
    rng.shuffle(index)
    shape = (len(index),) if num_features is None else (len(index), num_features)
    values = rng.standard_normal(shape).astype(dtype)

    out, counts = scatter_reduce(index, values, num_segments, op)

    ref_out, ref_counts = _scatter_reduce(index, values, num_segments, op)
    assert_close(out, ref_out, dtype)
    np.testing.assert_array_equal(counts, ref_counts)
    assert counts.dtype == np.int64
    if op == "sum":
        oracle = sp.csr_matrix((np.ones(len(index), dtype), (index, np.arange(len(index)))),
                               shape=(num_segments, len(index))) @ values
    else:
        oracle = torch_segment_reduce(index, values, num_segments, op)
    assert_close(out, oracle.astype(dtype), dtype)
    np.testing.assert_array_equal(counts, torch.bincount(torch.from_numpy(index),
                                                         minlength=num_segments).numpy())
    assert np.all(counts[30:] == 0) and np.all(out[30:] == 0)


def test_scatter_reduce_int32_index_and_no_checks(rng):
    index = rng.integers(0, 10, 50)
    values = rng.standard_normal((50, 2)).astype(np.float32)
    out, counts = scatter_reduce(index.astype(np.int32), values, 12, "min", check=False)
    ref_out, ref_counts = scatter_reduce(index, values, 12, "min")
    np.testing.assert_array_equal(out, ref_out)
    np.testing.assert_array_equal(counts, ref_counts)


def test_scatter_reduce_nothing_to_reduce():
    out, counts = scatter_reduce(np.zeros(0, np.int64), np.zeros((0, 2)), 3, "max")
    np.testing.assert_array_equal(out, np.zeros((3, 2)))
    np.testing.assert_array_equal(counts, np.zeros(3, np.int64))


SCATTER_ERRORS = [
    ("op", lambda a: "avg", "op must be one of"),
    ("index", lambda a: np.where(np.arange(20) == 3, 10, a["index"]),
     r"index must lie in \[0, 10\) \(segment ids\); found 10"),
    ("index", lambda a: np.where(np.arange(20) == 3, -2, a["index"]), "found -2"),
    ("index", lambda a: a["index"].astype(np.float32), "index must have dtype int32 or int64"),
    ("index", lambda a: a["index"][:-1], "values has 20 rows but index has 19 entries"),
    ("values", lambda a: a["values"].astype(np.int32), "values must have dtype float32 or float64"),
    ("values", lambda a: a["values"].reshape(20, 1, 1), "values must be 1-D or 2-D"),
    ("num_segments", lambda a: -1, "num_segments must be a non-negative integer; got -1"),
    ("num_segments", lambda a: 2.5, "num_segments must be a non-negative integer; got 2.5"),
]


@pytest.mark.parametrize("name,bad,message", SCATTER_ERRORS,
                         ids=[f"{name}-{i}" for i, (name, _, _) in enumerate(SCATTER_ERRORS)])
def test_scatter_reduce_rejects_bad_arguments(rng, name, bad, message):
    args = dict(index=rng.integers(0, 10, 20), values=rng.standard_normal(20), num_segments=10,
                op="sum")
    args[name] = bad(args)
    with pytest.raises(ValueError, match=message):
        scatter_reduce(**args)


# ------------------------------------------------------------------------------- segment_softmax

@pytest.mark.parametrize("num_heads", [None, 4], ids=["1d", "2d"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_segment_softmax_matches_reference_and_pyg(rng, dtype, num_heads):
    indptr, _ = random_csr(rng)
    num_edges = int(indptr[-1])
    shape = (num_edges,) if num_heads is None else (num_edges, num_heads)
    logits = (rng.standard_normal(shape) * 30).astype(dtype)  # large scores: needs stability

    out = segment_softmax(indptr, logits)

    assert_close(out, _segment_softmax(indptr, logits), dtype)
    rows = torch.from_numpy(edge_rows(indptr))
    oracle = pyg_softmax(torch.from_numpy(logits), index=rows, num_nodes=NUM_ROWS).numpy()
    assert_close(out, oracle, dtype)
    sums = np.add.reduceat(out, indptr[:-1][np.diff(indptr) > 0], axis=0)
    np.testing.assert_allclose(sums, 1.0, rtol=1e-5)
    for row in (1, 2):  # single-edge rows
        assert np.all(out[indptr[row]] == 1)


def test_segment_softmax_survives_huge_scores():
    indptr = np.array([0, 2, 3], np.int64)
    out = segment_softmax(indptr, np.array([1000.0, 1000.0, -1000.0], np.float32))
    np.testing.assert_array_equal(out, np.array([0.5, 0.5, 1.0], np.float32))


SOFTMAX_ERRORS = [
    ("logits", lambda a: a["logits"].astype(np.int64), "logits must have dtype float32 or float64"),
    ("logits", lambda a: a["logits"].reshape(-1, 1, 1), "logits must be 1-D or 2-D"),
    ("logits", lambda a: a["logits"][:-1], r"must equal the number of edges, len\(logits\)"),
    ("indptr", lambda a: a["indptr"] - 1, "indptr must start at 0"),
    ("indptr", lambda a: a["indptr"].astype(np.uint8), "indptr must have dtype int32 or int64"),
]


@pytest.mark.parametrize("name,bad,message", SOFTMAX_ERRORS,
                         ids=[f"{name}-{i}" for i, (name, _, _) in enumerate(SOFTMAX_ERRORS)])
def test_segment_softmax_rejects_bad_arguments(rng, name, bad, message):
    indptr, _ = random_csr(rng)
    args = dict(indptr=indptr, logits=rng.standard_normal(int(indptr[-1])))
    args[name] = bad(args)
    with pytest.raises(ValueError, match=message):
        segment_softmax(**args)
