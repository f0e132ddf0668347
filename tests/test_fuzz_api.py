"""Property-based fuzzing of the public API (issue 36, "nothing silently wrong").

Random small graph batches (chains, trees, loops), labels, features (dense / scipy.sparse, with
NaN, inf, wrong shapes, wrong dtypes), options and ``pm.Data`` updates go to ``pmc.CRF``,
``pmc.MRF``, ``pmc.HCRF``, ``pmc.fit`` and ``pmc.predict``. The contract: either a ValueError or
TypeError whose message names the argument at fault, or a result equal to brute-force
enumeration (:class:`pymc_crf.inference.brute_force.BruteForce` and sums over every labelling);
never a segmentation fault, another exception type, or a NaN in a result.

The default run keeps a few examples per entry point (the whole file in ~20-30 s on a quiet
machine; compiled functions are built once per module); the ``slow`` copies run many more.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import numpy as np
import pymc as pm
import pytest
import scipy.sparse as sp
from helpers.brute_force import hcrf_class_log_probs
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import pymc_crf as pmc
from pymc_crf.distributions.hcrf import class_log_probs
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.model.objective import CRFLogLikelihood
from pymc_crf.model.random_field import MRFLogLikelihood, extract_mrf
from pymc_crf.model.spec import extract_crf
from pymc_crf.potentials import log_potential_tables

# no "explain" phase: it reruns a failing case hundreds of times to annotate it
PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink]
FAST = settings(max_examples=8, deadline=None, derandomize=True, phases=PHASES,
                suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=200, deadline=None, phases=PHASES,
                suppress_health_check=list(HealthCheck))
BRUTE = BruteForce()


@contextmanager
def _quiet():
    """Warnings a fuzzed input may rightly raise (a loopy graph's approximation, an optimiser
    at its iteration limit) are not what these tests check."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ---------------------------------------------------------------------------- strategies
@st.composite
def graph_edges(draw, max_nodes=4):
    """One graph: (n nodes, edge list), a chain, a tree or a loop."""
    n = draw(st.integers(1, max_nodes))
    kind = draw(st.sampled_from(["chain", "tree", "loop"]))
    if kind == "tree":
        edges = [(draw(st.integers(0, i - 1)), i) for i in range(1, n)]
    else:
        edges = [(i, i + 1) for i in range(n - 1)]
        if kind == "loop" and n >= 3:
            edges.append((0, n - 1))
    return n, edges


@st.composite
def batches(draw, max_graphs=3, max_nodes=4):
    graphs = draw(st.lists(graph_edges(max_nodes), min_size=1, max_size=max_graphs))
    return pmc.GraphBatch.from_edges([np.array(e, dtype=np.int64).reshape(-1, 2)
                                      for _, e in graphs], [n for n, _ in graphs])


def _floats(draw, shape, scale=1.0):
    seed = draw(st.integers(0, 2**16))
    return scale * np.random.default_rng(seed).normal(size=shape)


#: what a mutation does to an argument, and the words a refusal of it must name
LABEL_WORDS = ("label",)


@st.composite
def crf_labels(draw, batch, K):
    """Flat labels, possibly missing (-1 / NaN), possibly broken: (labels, broken?)."""
    N = batch.n_total_nodes
    y = np.asarray(draw(st.lists(st.integers(-1, K - 1), min_size=N, max_size=N)))
    how = draw(st.sampled_from(["ok", "ok", "ok", "nan", "inf", "range", "length", "fraction",
                                "string", "padded", "negative"]))
    if how == "ok":
        return y, False
    if how == "nan":
        y = y.astype(float)
        y[draw(st.integers(0, N - 1))] = np.nan
        return y, False  # NaN marks a missing label
    if how == "inf":
        y = y.astype(float)
        y[draw(st.integers(0, N - 1))] = np.inf
    elif how == "range":
        y[draw(st.integers(0, N - 1))] = K + draw(st.integers(0, 2))
    elif how == "negative":
        y[draw(st.integers(0, N - 1))] = -2
    elif how == "length":
        y = np.append(y, 0) if draw(st.booleans()) or N == 1 else y[:-1]
    elif how == "fraction":
        y = y.astype(float)
        y[draw(st.integers(0, N - 1))] = 0.5
    elif how == "string":
        y = y.astype(str)
    elif how == "padded":
        return pmc.pad_labels(batch, np.where(y < 0, 0, y)), False
    return y, True


@st.composite
def features(draw, rows, what):
    """(features, broken?) with ``rows`` rows: dense or CSR, sometimes NaN / inf / wrong rows /
    wrong dtype / 1-d."""
    F = draw(st.integers(1, 2))
    X = _floats(draw, (rows, F))
    how = draw(st.sampled_from(["ok", "ok", "ok", "sparse", "nan", "inf", "rows", "dtype",
                                "1d", "int"]))
    if how == "ok":
        return X, False
    if how == "int":
        return np.rint(X).astype(np.int64), False
    if how == "sparse":
        return sp.csr_matrix(np.where(np.abs(X) > 0.5, X, 0.0)), False
    if how in ("nan", "inf"):
        X[draw(st.integers(0, rows - 1)), 0] = np.nan if how == "nan" else -np.inf
        if draw(st.booleans()):
            X = sp.csr_matrix(X)
    elif how == "rows":
        X = np.vstack([X, X[:1]]) if draw(st.booleans()) or rows == 1 else X[:-1]
    elif how == "dtype":
        X = X.astype(str) if draw(st.booleans()) else X.astype(complex)
    elif how == "1d":
        return X[:, 0], False  # one feature per row: read as one column
    return X, True


def _names_argument(err: Exception, words) -> bool:
    msg = str(err).lower()
    return any(w.lower() in msg for w in words)


def _check_refusal(err: Exception, words, broken: bool):
    """A refusal must be of a broken input, a ValueError / TypeError naming one of ``words``."""
    assert isinstance(err, ValueError | TypeError), f"{type(err).__name__}: {err}"
    assert broken, f"refused a valid input: {err}"
    assert _names_argument(err, words), f"{err!r} names none of {words}"


# ---------------------------------------------------------------------------- brute force
def _crf_brute_loglik(batch, node, edge, labels):
    """Per-graph log p(observed labels) by enumeration: log Z(clamped) - log Z."""
    clamped = node.copy()
    obs = labels >= 0
    forbid = np.zeros_like(node, dtype=bool)
    forbid[obs] = True
    forbid[np.flatnonzero(obs), labels[obs]] = False
    clamped[forbid] = -1e30  # exp(-1e30) is exactly 0 in every sum
    return BRUTE.log_partition(batch, clamped, edge) - BRUTE.log_partition(batch, node, edge)


def _close(a, b, tol=1e-8):
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert not np.isnan(a).any(), a
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------- pmc.CRF
def _crf_case(data):
    batch = data.draw(batches())
    K = data.draw(st.integers(2, 3))
    labels, bad_labels = data.draw(crf_labels(batch, K))
    use_nodes = data.draw(st.booleans())
    X, bad_x = data.draw(features(batch.n_total_nodes, "node")) if use_nodes else (None, False)
    per_edge = batch.n_edges > 0 and data.draw(st.booleans())
    Xe, bad_xe = data.draw(features(batch.n_edges, "edge")) if per_edge else (None, False)
    potential = data.draw(st.sampled_from(["loglinear", "probit"]))
    bad_shape = data.draw(st.sampled_from([False] * 5 + [True]))
    return batch, K, labels, bad_labels, X, bad_x, Xe, bad_xe, potential, bad_shape


#: CRF options: (keyword, value, broken?, words a refusal names); "chain" is broken only on a
#: graph that is not a chain, which check_crf decides
CRF_OPTIONS = [None, None, None, None,
               ("inference", "junction_tree", False, ()), ("inference", "brute_force", False, ()),
               ("inference", "bp", False, ()), ("inference", "chain", None, ("chain",)),
               ("inference", "nope", True, ("inference", "nope")),
               ("max_treewidth", 2.5, True, ("max_treewidth",)),
               ("max_treewidth", -1, True, ("max_treewidth",)),
               ("epsilon", 0.7, True, ("epsilon",)), ("epsilon", float("nan"), True, ("epsilon",)),
               ("potential", "logit", True, ("potential",)),
               ("n_labels", 1, True, ("n_labels", "weights", "label")),
               ("n_labels", 2.5, True, ("n_labels",))]


def _n_cols(x):
    return None if x is None or np.ndim(x) != 2 else x.shape[1]


def check_crf(data):
    batch, K, labels, bad_labels, X, bad_x, Xe, bad_xe, potential, bad_shape = _crf_case(data)
    option = data.draw(st.sampled_from(CRF_OPTIONS))
    bad_option = option is not None and (option[2] if option[2] is not None
                                         else not batch.is_chain)
    if option is not None and option[0] == "epsilon":
        potential = "probit"
    broken = bad_labels or bad_x or bad_xe or bad_shape or bad_option
    F, Fe = _n_cols(X) or 1, _n_cols(Xe) or 1
    words = (["label"] * bad_labels + ["node_features", "node feature"] * bad_x
             + ["edge_features", "edge feature"] * bad_xe + ["weights"] * bad_shape
             + list(option[3] if bad_option else ()))
    kwargs = {"potential": potential, "epsilon": 0.1 * (potential == "probit"), "n_labels": K}
    if option is not None:
        kwargs[option[0]] = option[1]
    try:
        with pm.Model() as model, _quiet():
            Wn = (pm.Normal("Wn", 0, 1, shape=(F + bad_shape, K)) if X is not None else None)
            if Xe is not None:
                We = pm.Normal("We", 0, 1, shape=(Fe, K, K + bad_shape))
            else:
                We = pm.Normal("We", 0, 1, shape=(K, K + (bad_shape and X is None)))
            pmc.CRF("y", graphs=batch, node_features=X, node_weights=Wn, edge_features=Xe,
                    edge_weights=We, observed=labels, **kwargs)
    except Exception as err:  # noqa: BLE001 - the contract is checked on every exception
        _check_refusal(err, words or ["label", "feature", "weights"], broken)
        return "refused"
    assert not broken, (f"accepted a broken case: labels {bad_labels}, node {bad_x}, edge "
                        f"{bad_xe}, weights {bad_shape}, option {option}")
    spec = extract_crf(model)
    w = _floats(data.draw, (spec.flat_size,))
    with _quiet():
        got = CRFLogLikelihood(spec).pointwise(w)
    if not spec.exact:  # loopy BP on a loop: an approximation, finite but not brute force's
        assert np.isfinite(got).all(), got
        return "checked"
    parts = spec.unflatten(w)
    node, edge, _, _ = log_potential_tables(
        spec.potential, spec.epsilon, batch.n_total_nodes, K,
        None if X is None else spec.node_features, parts.get("Wn"),
        None if Xe is None else spec.edge_features, parts["We"])
    _close(got, _crf_brute_loglik(batch, node, edge, spec.labels))
    return "checked"


@FAST
@given(st.data())
def test_fuzz_crf(data):
    check_crf(data)


@pytest.mark.slow
@SLOW
@given(st.data())
def test_fuzz_crf_slow(data):
    check_crf(data)


# ---------------------------------------------------------------------------- pmc.MRF
def _mrf_brute(batch, node, edge, rows):
    """Per-row log p(row) by enumeration over the one graph's labellings."""
    log_z = BRUTE.log_partition(batch, node, edge)[0]
    n = batch.n_total_nodes
    score = node[np.arange(n)[None, :], rows].sum(axis=1)
    if batch.n_edges:
        e = np.zeros(batch.n_edges, np.int64) if edge.shape[0] == 1 else np.arange(batch.n_edges)
        u, v = batch.edges[:, 0], batch.edges[:, 1]
        score = score + edge[e[None, :], rows[:, u], rows[:, v]].sum(axis=1)
    return score - log_z


def check_mrf(data):
    batch = data.draw(batches(max_graphs=1, max_nodes=4))
    n, E = batch.n_total_nodes, batch.n_edges
    param = data.draw(st.sampled_from(["table", "ising", "boltzmann", "potts"]))
    K = 2 if param in ("ising", "boltzmann") else data.draw(st.integers(2, 3))
    rows = np.asarray(data.draw(st.lists(st.lists(st.integers(0, K - 1), min_size=n, max_size=n),
                                         min_size=1, max_size=4)))
    how = data.draw(st.sampled_from(["ok", "ok", "ok", "nan", "inf", "range", "width",
                                     "masked", "node_shape", "edge_shape"]))
    words = {"nan": ["NaN"], "inf": ["inf"], "range": ["label", "outside"],
             "width": ["label", "row"], "masked": ["missing"], "node_shape": ["node_weights"],
             "edge_shape": ["edge_weights"]}.get(how, ())
    observed = rows
    if how in ("nan", "inf"):
        observed = rows.astype(float)
        observed[0, data.draw(st.integers(0, n - 1))] = np.nan if how == "nan" else np.inf
    elif how == "range":
        observed = rows.copy()
        observed[0, 0] = K
    elif how == "width":
        observed = np.hstack([rows, rows[:, :1]])
    elif how == "masked":
        observed = np.ma.masked_array(rows, mask=np.eye(*rows.shape, dtype=bool))
    table = param in ("table", "potts")
    node_shape = (n, K) if table else (n,)
    if data.draw(st.booleans()):
        node_shape = node_shape[1:]  # one shared node weight
    edge_shape = (((E, K, K) if param == "table" else (E,))
                  if data.draw(st.booleans()) else ((K, K) if param == "table" else ()))
    if how == "node_shape":
        node_shape = (n + 1, K) if table else (n + 1,)
    if how == "edge_shape":
        edge_shape = (E + 1,) if param != "table" else (E + 1, K, K)
    use_edges = E > 0 and (how == "edge_shape" or data.draw(st.booleans()))
    try:
        with pm.Model() as model, _quiet():
            b = pm.Normal("b", 0, 1, shape=node_shape)
            w = pm.Normal("w", 0, 1, shape=edge_shape) if use_edges else None
            pmc.MRF("x", graphs=batch, node_weights=b, edge_weights=w, parameterization=param,
                    n_labels=None if param in ("ising", "boltzmann") else K, observed=observed)
    except Exception as err:  # noqa: BLE001 - the contract is checked on every exception
        _check_refusal(err, words or ["label", "weights"], how != "ok")
        return "refused"
    assert how == "ok", f"accepted a broken MRF case {how!r}"
    spec = extract_mrf(model)
    wf = _floats(data.draw, (spec.flat_size,))
    got = MRFLogLikelihood(spec).pointwise(wf)
    parts = spec.unflatten(wf)
    node = np.asarray(spec.param.node_table(parts["b"]), float)
    edge = np.asarray(spec.param.edge_table(parts.get("w")), float)
    _close(got, _mrf_brute(batch, node, edge, rows))
    return "checked"


@FAST
@given(st.data())
def test_fuzz_mrf(data):
    check_mrf(data)


@pytest.mark.slow
@SLOW
@given(st.data())
def test_fuzz_mrf_slow(data):
    check_mrf(data)


# ---------------------------------------------------------------------------- pmc.HCRF
def check_hcrf(data):
    batch = data.draw(batches(max_graphs=3, max_nodes=3))
    S, C = data.draw(st.integers(1, 2)), data.draw(st.integers(2, 3))
    X, bad_x = data.draw(features(batch.n_total_nodes, "node"))
    sparse = sp.issparse(X)
    F = _n_cols(X) or 1
    y = np.asarray(data.draw(st.lists(st.integers(0, C - 1), min_size=batch.n_graphs,
                                      max_size=batch.n_graphs)))
    how = data.draw(st.sampled_from(["ok", "ok", "ok", "range", "length", "nan", "theta_y"]))
    words = ({"range": ["label"], "length": ["label"], "nan": ["label"],
              "theta_y": ["theta_y"]}.get(how, [])
             + ["node_features", "node feature", "sparse"] * (bad_x or sparse))
    if how == "range":
        y = y.copy()
        y[0] = C
    elif how == "length":
        y = np.append(y, 0)
    elif how == "nan":
        y = y.astype(float)
        y[0] = np.nan
    try:
        with pm.Model(), _quiet():
            tx = pm.Normal("tx", 0, 1, shape=(F, S))
            ty = pm.Normal("ty", 0, 1, shape=(S + (how == "theta_y"), C))
            te = pm.Normal("te", 0, 1, shape=(S, S, C))
            pmc.HCRF("c", graphs=batch, node_features=X, theta_x=tx, theta_y=ty, theta_e=te,
                     n_states=S, n_classes=C, observed=y)
    except Exception as err:  # noqa: BLE001 - the contract is checked on every exception
        _check_refusal(err, words or ["label", "theta", "feature"], True)
        return "refused"
    assert how == "ok" and not bad_x and not sparse, f"accepted a broken HCRF case {how!r}"
    Xd = np.asarray(X, dtype=float).reshape(batch.n_total_nodes, -1)  # 1-d: one column
    tx, ty, te = (_floats(data.draw, s) for s in ((F, S), (S, C), (S, S, C)))
    got = class_log_probs(batch, Xd, tx, ty, te)
    _close(got, hcrf_class_log_probs(batch, Xd, tx, ty, te))
    return "checked"


@FAST
@given(st.data())
def test_fuzz_hcrf(data):
    check_hcrf(data)


@pytest.mark.slow
@SLOW
@given(st.data())
def test_fuzz_hcrf_slow(data):
    check_hcrf(data)


# ---------------------------------------------------------------------------- pm.Data updates
# One compiled log-likelihood per model for the whole run: each example swaps new labels in with
# pm.Data, as a user would between fits.
DATA_BATCH = pmc.GraphBatch.from_edges([np.array([[0, 1], [1, 2]]),
                                        np.array([[0, 1], [1, 2], [0, 2]])], [3, 3])
DATA_X = np.random.default_rng(1).normal(size=(6, 2))
DATA_K = 3


#: the default run compiles with PyTensor's Python linker (seconds; the numba backend's first
#: compile of these graphs takes a minute on a cold cache); the slow copies use the numba default
PY_MODE = "FAST_COMPILE"


def _crf_data_model(mode=None):
    with pm.Model() as model, _quiet():
        y = pm.Data("y", pmc.pad_labels(DATA_BATCH, np.zeros(6, int)).astype(float))
        W = pm.Normal("W", 0, 1, shape=(2, DATA_K))
        T = pm.Normal("T", 0, 1, shape=(DATA_K, DATA_K))
        rv = pmc.CRF("t", graphs=DATA_BATCH, node_features=DATA_X, node_weights=W,
                     edge_weights=T, observed=y)
    return model, model.compile_logp(vars=[rv], sum=False, mode=mode)


@pytest.fixture(scope="module")
def crf_data_model():
    return _crf_data_model(PY_MODE)


@pytest.fixture(scope="module")
def crf_data_model_numba():
    return _crf_data_model()


@st.composite
def padded_labels(draw):
    """A (G, L) label matrix for DATA_BATCH, sometimes of another shape, out of range, NaN
    (missing) or inf, or with a label in the padding."""
    G, L = 2, 3
    y = np.asarray(draw(st.lists(st.integers(-1, DATA_K - 1), min_size=G * L,
                                 max_size=G * L))).reshape(G, L).astype(float)
    how = draw(st.sampled_from(["ok", "ok", "nan", "inf", "range", "shape", "fraction"]))
    broken = how not in ("ok", "nan")
    if how == "nan":
        y[draw(st.integers(0, G - 1)), draw(st.integers(0, L - 1))] = np.nan
    elif how == "inf":
        y[0, 0] = np.inf
    elif how == "range":
        y[1, 1] = DATA_K
    elif how == "shape":
        y = draw(st.sampled_from([y[:, :2], y[:1], np.vstack([y, y[:1]]), np.hstack([y, y])]))
    elif how == "fraction":
        y[0, 1] = 0.5
    return y, broken


def check_crf_data(model, f, data):
    y, broken = data.draw(padded_labels())
    w = {"W": _floats(data.draw, (2, DATA_K)), "T": _floats(data.draw, (DATA_K, DATA_K))}
    pm.set_data({"y": y}, model=model)
    try:
        [got] = f(w)
        fitted = extract_crf(model)  # what every fitter reads at fit time
    except Exception as err:  # noqa: BLE001 - the contract is checked on every exception
        _check_refusal(err, ["label"], broken)
        return "refused"
    assert not broken, f"accepted labels {y.tolist()}"
    node, edge, _, _ = log_potential_tables("loglinear", 0.0, 6, DATA_K, DATA_X, w["W"], None,
                                            w["T"])
    labels = np.where(np.isnan(y), -1, y)[DATA_BATCH.node_graph, np.r_[0:3, 0:3]].astype(int)
    want = _crf_brute_loglik(DATA_BATCH, node, edge, labels)
    _close(got, want)
    assert fitted.labels.tolist() == labels.tolist()
    _close(CRFLogLikelihood(fitted).pointwise(fitted.flatten(w)), want)
    return "checked"


@FAST
@given(data=st.data())
def test_fuzz_crf_data_updates(crf_data_model, data):
    check_crf_data(*crf_data_model, data)


@pytest.mark.slow
@SLOW
@given(data=st.data())
def test_fuzz_crf_data_updates_slow(crf_data_model_numba, data):
    check_crf_data(*crf_data_model_numba, data)


MRF_GRAPH = pmc.GraphBatch.from_edges([np.array([[0, 1], [1, 2], [2, 3], [0, 3]])], [4])


def _mrf_data_model(mode=None):
    with pm.Model() as model, _quiet():
        y = pm.Data("y", np.zeros((3, 4)))
        b = pm.Data("b", np.zeros(4))
        w = pm.Normal("w", 0, 1)
        rv = pmc.MRF("x", graphs=MRF_GRAPH, node_weights=b, edge_weights=w,
                     parameterization="ising", observed=y)
    return model, model.compile_logp(vars=[rv], sum=False, mode=mode)


@pytest.fixture(scope="module")
def mrf_data_model():
    return _mrf_data_model(PY_MODE)


@pytest.fixture(scope="module")
def mrf_data_model_numba():
    return _mrf_data_model()


def check_mrf_data(model, f, data):
    rows = data.draw(st.integers(1, 4))
    cols = data.draw(st.sampled_from([4, 4, 4, 3, 5]))
    y = np.asarray(data.draw(st.lists(st.integers(0, 1), min_size=rows * cols,
                                      max_size=rows * cols))).reshape(rows, cols)
    bias = data.draw(st.sampled_from([4, 4, 4, 3, 5]))
    bad_value = data.draw(st.sampled_from([None] * 4 + [2, -1, 0.5, np.nan, np.inf]))
    if bad_value is not None:
        y = y.astype(float)
        y[0, 0] = bad_value
    b = _floats(data.draw, (bias,))
    broken = cols != 4 or bias != 4 or bad_value is not None
    pm.set_data({"y": y, "b": b}, model=model)
    w = float(_floats(data.draw, ()))
    try:
        [got] = f({"w": w})
    except Exception as err:  # noqa: BLE001 - the contract is checked on every exception
        words = (["labels", "samples"] if cols != 4 or bad_value is not None else [])
        _check_refusal(err, words + ["node_weights"] * (bias != 4), broken)
        return "refused"
    assert not broken, f"accepted labels of shape {y.shape} / node weights of {bias}"
    s = np.array([-1.0, 1.0])
    node = b[:, None] * s
    edge = (w * np.outer(s, s))[None]
    _close(got, _mrf_brute(MRF_GRAPH, node, edge, y))
    return "checked"


@FAST
@given(data=st.data())
def test_fuzz_mrf_data_updates(mrf_data_model, data):
    check_mrf_data(*mrf_data_model, data)


@pytest.mark.slow
@SLOW
@given(data=st.data())
def test_fuzz_mrf_data_updates_slow(mrf_data_model_numba, data):
    check_mrf_data(*mrf_data_model_numba, data)


# ---------------------------------------------------------------------------- pmc.fit
#: option mutations: (option, value, words its refusal must name); None keeps the defaults
BAD_OPTIONS = {
    "map": [("maxiter", 2.5, "maxiter"), ("maxiter", 0, "maxiter"), ("gtol", -1.0, "gtol"),
            ("jitter", float("nan"), "jitter"), ("random_seed", -3, "random_seed"),
            ("log_likelihood", "False", "log_likelihood"), ("optimizer", "bfgs", "optimizer"),
            ("start", {"nope": 1.0}, "start"), ("max_iter", 5, "max_iter")],
    "ep": [("draws", 0, "draws"), ("max_iter", True, "max_iter"), ("step_size", 2.0, "step_size"),
           ("variant", "xep", "variant"), ("tol", float("nan"), "tol")],
    "bethe_laplace": [("draws", -1, "draws"), ("map", "nope", "map"),
                      ("covariance", "nope", "covariance"), ("maxiter", 1.5, "maxiter")],
}
CHEAP = {"map": {}, "ep": {"draws": 4, "max_iter": 50}, "bethe_laplace": {"draws": 4}}


def check_fit(data, method):
    batch = data.draw(batches(max_graphs=2, max_nodes=3))
    K = data.draw(st.integers(2, 3))
    N = batch.n_total_nodes
    low = 0 if method != "map" else -1  # ep and bethe_laplace need every label
    y = np.asarray(data.draw(st.lists(st.integers(low, K - 1), min_size=N, max_size=N)))
    X = _floats(data.draw, (N, 2))
    bad = data.draw(st.sampled_from([None] * 3 + BAD_OPTIONS[method]))
    options = {**CHEAP[method], "progressbar": False, "random_seed": 1}
    if bad is not None:
        options[bad[0]] = bad[1]
    with pm.Model() as model, _quiet():
        W = pm.Normal("W", 0, 1, shape=(2, K))
        T = pm.Normal("T", 0, 1, shape=(K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T,
                n_labels=K, observed=y)
    try:
        with _quiet():
            result = pmc.fit(model, method=method, **options)
    except Exception as err:  # noqa: BLE001 - the contract is checked on every exception
        _check_refusal(err, [bad[2]] if bad else [method], bad is not None)
        return "refused"
    assert bad is None, f"accepted {bad[0]}={bad[1]!r}"
    post = result["posterior"]
    ll = result["log_likelihood"]["y"].values
    for name in ("W", "T"):
        assert not np.isnan(post[name].values).any()
    assert ll.shape[-1] == batch.n_graphs
    Wd = post["W"].values.reshape(-1, 2, K)
    Td = post["T"].values.reshape(-1, K, K)
    for s in range(min(len(Wd), 3)):
        node, edge, _, _ = log_potential_tables("loglinear", 0.0, N, K, X, Wd[s], None, Td[s])
        _close(ll.reshape(-1, batch.n_graphs)[s], _crf_brute_loglik(batch, node, edge, y))
    return "checked"


@pytest.mark.parametrize("method", ["map", "ep", "bethe_laplace"])
@settings(FAST, max_examples=4)
@given(data=st.data())
def test_fuzz_fit(method, data):
    check_fit(data, method)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["map", "ep", "bethe_laplace"])
@settings(SLOW, max_examples=60)
@given(data=st.data())
def test_fuzz_fit_slow(method, data):
    check_fit(data, method)


# ---------------------------------------------------------------------------- pmc.predict
PRED_K = 3


@pytest.fixture(scope="module")
def fitted():
    """A Bethe-Laplace fit with draws (so "average" averages several weight sets)."""
    batch = pmc.GraphBatch.chains([3, 2])
    with pm.Model() as model, _quiet():
        W = pm.Normal("W", 0, 1, shape=(2, PRED_K))
        T = pm.Normal("T", 0, 1, shape=(PRED_K, PRED_K))
        pmc.CRF("y", graphs=batch, node_features=np.random.default_rng(2).normal(size=(5, 2)),
                node_weights=W, edge_weights=T, observed=np.array([0, 1, 2, 2, 1]))
        result = pmc.fit(model, method="bethe_laplace", draws=6, random_seed=0,
                         progressbar=False)
    return result


def _graph_scores(batch, node, edge, labels):
    N = batch.n_total_nodes
    score = np.zeros(batch.n_graphs)
    np.add.at(score, batch.node_graph, node[np.arange(N), labels])
    if batch.n_edges:
        u, v = batch.edges[:, 0], batch.edges[:, 1]
        np.add.at(score, batch.edge_graph, edge[0, labels[u], labels[v]])
    return score


def check_predict(result, data):
    batch = data.draw(batches())
    N = batch.n_total_nodes
    X, bad_x = data.draw(features(N, "node"))
    if not bad_x and np.ndim(X) == 2 and X.shape[1] != 2:  # the fit has two columns
        X = sp.hstack([X, X]).tocsr() if sp.issparse(X) else np.hstack([X, X])
    if np.ndim(X) == 1 and not bad_x:
        bad_x = True  # one column: the fit has two
    if not bad_x and data.draw(st.sampled_from([False] * 5 + [True])):
        X, bad_x = np.hstack([np.asarray(X.todense() if sp.issparse(X) else X),
                              np.ones((N, 1))]), True  # a column more than the fit's
    labels = (np.asarray(data.draw(st.lists(st.integers(0, PRED_K - 1), min_size=N, max_size=N)))
              if data.draw(st.booleans()) else None)
    method = data.draw(st.sampled_from(["average", "bpe", "map"]))
    draws, bad_draws = data.draw(st.sampled_from([(None, False), (100, False), (0, True),
                                                  (2.5, True), ("3", True)]))
    try:
        crf_data = pmc.CRFData(batch, labels, node_features=X, n_labels=PRED_K)
        with _quiet():
            pred = pmc.predict(result, crf_data, method, draws=draws)
    except Exception as err:  # noqa: BLE001 - the contract is checked on every exception
        words = ["node feature", "node_features"] * bad_x + ["draws"] * bad_draws
        _check_refusal(err, words, bad_x or bad_draws)
        return "refused"
    assert not (bad_x or bad_draws), f"accepted draws={draws!r} / features {np.shape(X)}"
    Xd = np.asarray(X.todense() if sp.issparse(X) else X, dtype=float)
    post = result["posterior"]
    Ws = post["W"].values.reshape(-1, 2, PRED_K)
    Ts = post["T"].values.reshape(-1, PRED_K, PRED_K)
    mean = result["fit"]["mean_vector"].values
    W_mean, T_mean = mean[:2 * PRED_K].reshape(2, PRED_K), mean[2 * PRED_K:].reshape(PRED_K,
                                                                                    PRED_K)

    def tables(W, T):
        node, edge, _, _ = log_potential_tables("loglinear", 0.0, N, PRED_K, Xd, W, None, T)
        return node, edge

    assert not np.isnan(pred.marginals).any()
    if method == "average":  # draws None or 100: every one of the 6 draws
        want = np.mean([BRUTE.marginals(batch, *tables(W, T)).node
                        for W, T in zip(Ws, Ts, strict=True)], axis=0)
        _close(pred.marginals, want)
    else:
        node, edge = tables(W_mean, T_mean)
        _close(pred.marginals, BRUTE.marginals(batch, node, edge).node)
        if method == "map":
            best = BRUTE.map_assignment(batch, node, edge).labels
            _close(_graph_scores(batch, node, edge, pred.labels),
                   _graph_scores(batch, node, edge, best))
    if labels is not None:
        assert pred.error_rate == pytest.approx(np.mean(pred.labels != labels))
    return "checked"


@settings(FAST, max_examples=10)
@given(data=st.data())
def test_fuzz_predict(fitted, data):
    check_predict(fitted, data)


@pytest.mark.slow
@SLOW
@given(data=st.data())
def test_fuzz_predict_slow(fitted, data):
    check_predict(fitted, data)


HCRF_BATCH = pmc.GraphBatch.from_edges([np.array([[0, 1]]), np.array([[0, 1], [1, 2], [0, 2]]),
                                        np.zeros((0, 2), np.int64)], [2, 3, 1])
HCRF_X = np.random.default_rng(3).normal(size=(6, 2))


def _hcrf_data_model(mode=None):
    with pm.Model() as model, _quiet():
        y = pm.Data("y", np.zeros(3))
        tx = pm.Normal("tx", 0, 1, shape=(2, 2))
        ty = pm.Normal("ty", 0, 1, shape=(2, 3))
        te = pm.Normal("te", 0, 1, shape=(2, 2, 3))
        rv = pmc.HCRF("c", graphs=HCRF_BATCH, node_features=HCRF_X, theta_x=tx, theta_y=ty,
                      theta_e=te, observed=y)
    return model, model.compile_logp(vars=[rv], sum=False, mode=mode)


@pytest.fixture(scope="module")
def hcrf_data_model():
    return _hcrf_data_model(PY_MODE)


@pytest.fixture(scope="module")
def hcrf_data_model_numba():
    return _hcrf_data_model()


def check_hcrf_data(model, f, data):
    n = data.draw(st.sampled_from([3, 3, 3, 1, 2, 4]))
    y = np.asarray(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dtype=float)
    bad_value = data.draw(st.sampled_from([None] * 4 + [3, -1, 0.5, np.nan, np.inf]))
    if bad_value is not None:
        y[0] = bad_value
    broken = n != 3 or bad_value is not None
    pm.set_data({"y": y}, model=model)
    w = {"tx": _floats(data.draw, (2, 2)), "ty": _floats(data.draw, (2, 3)),
         "te": _floats(data.draw, (2, 2, 3))}
    try:
        [got] = f(w)
    except Exception as err:  # noqa: BLE001 - the contract is checked on every exception
        _check_refusal(err, ["label"], broken)
        return "refused"
    assert not broken, f"accepted labels {y.tolist()}"
    want = hcrf_class_log_probs(HCRF_BATCH, HCRF_X, w["tx"], w["ty"], w["te"])
    _close(got, want[np.arange(3), y.astype(int)])
    return "checked"


@FAST
@given(data=st.data())
def test_fuzz_hcrf_data_updates(hcrf_data_model, data):
    check_hcrf_data(*hcrf_data_model, data)


@pytest.mark.slow
@SLOW
@given(data=st.data())
def test_fuzz_hcrf_data_updates_slow(hcrf_data_model_numba, data):
    check_hcrf_data(*hcrf_data_model_numba, data)
