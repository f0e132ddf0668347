"""Missing (masked / -1) CRF labels: summed out of the likelihood and imputed afterwards.

Ground truth: brute-force enumeration with the missing labels summed out, finite differences for
the gradient, brute-force conditional marginals for the imputation.
"""

import warnings

import numpy as np
import pymc as pm
import pytest
import xarray as xr
from scipy.special import logsumexp

import pymc_crf as pmc
from pymc_crf.inference import BeliefPropagation, BruteForce, ChainEngine, JunctionTree
from pymc_crf.inference.clamp import ObservedLabels
from pymc_crf.model.objective import CRFLogLikelihood, GaussianLogPrior
from pymc_crf.model.spec import extract_crf

K, F, FE = 3, 2, 2
LOOP = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)]  # a 4-cycle with a chord: treewidth 2
BATCHES = {
    "chains": pmc.GraphBatch.chains([4, 3, 2, 3]),
    "trees": pmc.GraphBatch.from_edges([[(0, 1), (0, 2), (0, 3)], [(0, 1), (1, 2)],
                                        [(0, 1)], [(0, 1), (1, 2), (1, 3)]], [4, 3, 2, 4]),
    "loopy": pmc.GraphBatch.from_edges([LOOP, [(0, 1), (1, 2), (2, 0)], LOOP, LOOP],
                                       [4, 3, 4, 4]),
}


def _labels(b, rng):
    """Graph 0 partly observed, graph 1 fully, graph 2 not at all, graph 3 one label missing."""
    y = rng.integers(0, K, b.n_total_nodes)
    o = b.node_offsets
    y[o[0] + 1] = -1
    y[o[0] + 3 if b.n_nodes[0] > 3 else o[0]] = -1
    y[o[2]:o[3]] = -1
    y[o[3]] = -1
    return y


def _brute_summed_out(b, node, edge, y):
    """Per graph: log sum over the missing labels of p(y) (brute force)."""
    out = []
    for g in range(b.n_graphs):
        idx = b.node_index([g])
        sub = b.subset([g])
        e = edge if edge.shape[0] == 1 else edge[b.edge_index([g])]
        configs = np.indices((K,) * idx.size).reshape(idx.size, -1).T
        lo = BruteForce()._enumerate(sub, node[idx], e, 0)[1]  # scores of every labelling
        keep = np.all((y[idx] < 0) | (configs == y[idx]), axis=1)
        out.append(logsumexp(lo[keep]) - logsumexp(lo))
    return np.array(out)


def _model(b, y, edge_kind, rng, potential="loglinear"):
    X = rng.normal(size=(b.n_total_nodes, F))
    Xe = rng.normal(size=(b.n_edges, FE))
    shape_e = (K, K) if edge_kind == "shared" else (FE, K, K)
    with pm.Model() as m:
        W = pm.Normal("W", 0, 1, shape=(F, K))
        T = pm.Normal("T", 0, 1, shape=shape_e)
        pmc.CRF("y", graphs=b, node_features=X, node_weights=W,
                edge_features=None if edge_kind == "shared" else Xe, edge_weights=T,
                potential=potential, epsilon=0.05 if potential == "probit" else 0.0, observed=y)
    return m, X, Xe


def _logp_fn(m, mode="FAST_COMPILE"):
    """Per-graph logp of the CRF as a function of a point (PyTensor's Python linker by default:
    no numba compilation of each small test model)."""
    return m.compile_fn(m.logp(vars=m.observed_RVs, sum=False)[0], mode=mode)


def _tables(m, point):
    spec = extract_crf(m)
    return CRFLogLikelihood(spec).log_potentials(spec.flatten(point))


@pytest.mark.parametrize("name", list(BATCHES))
def test_logp_sums_missing_labels_out(name, rng):
    b = BATCHES[name]
    y = _labels(b, rng)
    m, _, _ = _model(b, y, "shared" if name == "chains" else "features", rng)
    point = {"W": rng.normal(size=(F, K)), "T": rng.normal(size=m["T"].type.shape)}
    # the chain batch through the numba backend (PyMC's default), the others through Python
    lp = _logp_fn(m, None if name == "chains" else "FAST_COMPILE")(point)
    ref = _brute_summed_out(b, *_tables(m, point), y)
    np.testing.assert_allclose(lp, ref, rtol=1e-10, atol=1e-12)
    assert lp[2] == 0.0  # no observed label: contributes nothing
    lik = CRFLogLikelihood(extract_crf(m))
    np.testing.assert_allclose(lik.pointwise(extract_crf(m).flatten(point)), ref, rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("edge_kind,potential", [
    ("shared", "loglinear"),
    # the probit edge-feature kernels' first compile (~25 s with an empty numba cache): slow
    pytest.param("features", "probit", marks=pytest.mark.slow)])
def test_gradient_matches_finite_differences_and_model(edge_kind, potential, rng):
    b = BATCHES["loopy" if edge_kind == "features" else "chains"]
    y = _labels(b, rng)
    m, _, _ = _model(b, y, edge_kind, rng, potential)
    spec = extract_crf(m)
    lik = CRFLogLikelihood(spec)
    w = rng.normal(size=spec.flat_size)
    value, grad = lik(w)
    assert value == pytest.approx(lik.pointwise(w).sum(), rel=1e-12)
    h = 1e-6
    fd = np.array([(lik(w + h * e)[0] - lik(w - h * e)[0]) / (2 * h) for e in np.eye(w.size)])
    np.testing.assert_allclose(grad, fd, atol=1e-6)
    # the compiled model's gradient: the LogPartition Op differentiated through the clamped call
    dlogp = m.compile_fn(m.dlogp(), mode="FAST_COMPILE")(spec.unflatten(w))
    np.testing.assert_allclose(dlogp, grad + GaussianLogPrior(spec)(w)[1], rtol=1e-9, atol=1e-10)


def test_masked_array_nan_and_minus_one_are_the_same(rng):
    b = BATCHES["chains"]
    y = _labels(b, rng)
    masked = np.ma.masked_array(np.where(y < 0, 2, y), mask=y < 0)
    with_nan = np.where(y < 0, np.nan, y.astype(float))
    per_graph = [np.ma.masked_less(y[b.node_index([g])], 0) for g in range(b.n_graphs)]
    ref = pmc.pad_labels(b, y, K, missing=True)
    for obs in (masked, with_nan, per_graph):
        np.testing.assert_array_equal(pmc.pad_labels(b, obs, K, missing=True), ref)
    with pytest.raises(ValueError, match="outside 0..2"):
        pmc.pad_labels(b, np.where(y < 0, -1, 3), K, missing=True)
    with pytest.raises(ValueError, match="outside"):
        pmc.pad_labels(b, y, K)  # without missing=True, -1 is out of range


def test_labels_as_data_sum_missing_out(rng):
    """Labels given through pm.Data are known only at run time; the same values."""
    b = BATCHES["chains"]
    y = _labels(b, rng)
    X = rng.normal(size=(b.n_total_nodes, F))
    point = {"W": rng.normal(size=(F, K)), "T": rng.normal(size=(K, K))}
    out = []
    for data in (False, True):
        with pm.Model() as m:
            W = pm.Normal("W", 0, 1, shape=(F, K))
            T = pm.Normal("T", 0, 1, shape=(K, K))
            obs = pmc.pad_labels(b, y, K, missing=True)
            pmc.CRF("y", graphs=b, node_features=X, node_weights=W, edge_weights=T,
                    observed=pm.Data("labels", obs) if data else y)
        out.append(_logp_fn(m)(point))
    np.testing.assert_allclose(out[1], out[0], rtol=1e-10, atol=1e-12)


def test_fully_observed_and_all_missing(rng):
    b = BATCHES["chains"]
    y = rng.integers(0, K, b.n_total_nodes)
    m, _, _ = _model(b, y, "shared", rng)
    point = {"W": rng.normal(size=(F, K)), "T": rng.normal(size=(K, K))}
    lp = _logp_fn(m)(point)
    np.testing.assert_allclose(lp, _brute_summed_out(b, *_tables(m, point), y), rtol=1e-10)
    # every label missing: the likelihood is 1 and the MAP is the prior mean
    m0, _, _ = _model(b, np.full(b.n_total_nodes, -1), "shared", rng)
    assert np.all(m0.logp(vars=m0.observed_RVs, sum=False)[0].eval() == 0.0)
    spec = extract_crf(m0)
    value, grad = CRFLogLikelihood(spec)(np.ones(spec.flat_size))
    assert value == 0.0 and np.all(grad == 0.0)
    res = pmc.fit(m0, method="map")
    np.testing.assert_allclose(res["posterior"]["W"].values, 0.0, atol=1e-8)


def test_engines_take_clamped_tables(rng):
    """Clamping = -inf entries: every exact engine (and BP on a tree) matches brute force."""
    b = BATCHES["trees"]
    y = _labels(b, rng)
    obs = ObservedLabels(b, y, K)
    part = obs.part(obs.partial)
    node = rng.normal(size=(b.n_total_nodes, K))
    edge = rng.normal(size=(b.n_edges, K, K))
    tables = part.tables(node, edge, shared=False)
    ref = BruteForce().marginals(part.batch, *tables)
    for engine in (JunctionTree(), BeliefPropagation()):
        got = engine.marginals(part.batch, *tables)
        np.testing.assert_allclose(got.log_z, ref.log_z, atol=1e-8)
        np.testing.assert_allclose(got.node, ref.node, atol=1e-8)
        np.testing.assert_allclose(got.edge, ref.edge, atol=1e-8)
    chains = BATCHES["chains"]
    yc = _labels(chains, rng)
    oc = ObservedLabels(chains, yc, K)
    pc = oc.part(~oc.full)
    nodec = rng.normal(size=(chains.n_total_nodes, K))
    tab = pc.tables(nodec, rng.normal(size=(1, K, K)), shared=True)
    got, ref = ChainEngine().marginals(pc.batch, *tab), BruteForce().marginals(pc.batch, *tab)
    np.testing.assert_allclose(got.node, ref.node, atol=1e-12)
    assert np.all(got.node[pc.penalty == -np.inf] == 0.0)


def _brute_conditional(b, node, edge, y):
    """Brute-force conditional marginals (N, K) of every node given the observed labels."""
    obs = ObservedLabels(b, y, K)
    part = obs.part(np.arange(b.n_graphs))
    return BruteForce().marginals(b, *part.tables(node, edge, shared=edge.shape[0] == 1)).node


def test_impute_at_fixed_weights_is_the_exact_conditional(rng):
    b = BATCHES["chains"]
    y = _labels(b, rng)
    m, _, _ = _model(b, y, "shared", rng)
    res = pmc.fit(m, method="map")
    point = {v: res["posterior"][v].values[0, 0] for v in ("W", "T")}
    exact = _brute_conditional(b, *_tables(m, point), y)
    imp = pmc.impute(res, m)
    miss = np.flatnonzero(y < 0)
    np.testing.assert_array_equal(imp["node"].values, miss)
    np.testing.assert_allclose(imp["marginals"].values, exact[miss], atol=1e-12)
    np.testing.assert_array_equal(imp["labels"].values, exact[miss].argmax(1))
    # one label draw per posterior draw: with many copies of the point, frequencies -> marginals
    S = 1500
    post = xr.Dataset({v: (("chain", "draw", *[f"{v}_{i}" for i in range(a.ndim)]),
                           np.broadcast_to(a, (1, S, *a.shape)))
                       for v, a in point.items()})
    many = pmc.impute(xr.DataTree.from_dict({"posterior": post}), m, random_seed=1)
    freq = np.stack([(many["draws"].values[0] == k).mean(0) for k in range(K)], axis=1)
    se = np.sqrt(exact[miss] * (1 - exact[miss]) / S)
    assert np.all(np.abs(freq - exact[miss]) <= 4.5 * se + 1e-12)


def test_impute_of_a_model_on_loopy_bp_is_the_exact_conditional(rng):
    """A model built with inference="bp" on graphs the junction tree handles: the conditional
    marginals come from an exact engine, as the docs promise, not from BP's beliefs (which are
    0.15 off on this strongly coupled 3 x 3 grid)."""
    import networkx as nx

    b = pmc.GraphBatch.from_networkx(nx.grid_2d_graph(3, 3))
    X = rng.normal(size=(9, F))
    y = np.full(9, -1)
    y[[0, 8]] = [0, 1]
    with pm.Model() as m, warnings.catch_warnings():
        warnings.simplefilter("ignore", pmc.ApproximateInferenceWarning)
        W = pm.Normal("W", 0, 1, shape=(F, K))
        T = pm.Normal("T", 0, 1, shape=(K, K))
        pmc.CRF("y", graphs=b, node_features=X, node_weights=W, edge_weights=T, observed=y,
                inference="bp")
    point = {"W": 0.2 * rng.normal(size=(F, K)), "T": 2.5 * (2 * np.eye(K) - 1)}
    exact = _brute_conditional(b, *_tables(m, point), y)
    post = xr.Dataset({v: (("chain", "draw", *[f"{v}_{i}" for i in range(a.ndim)]), a[None, None])
                       for v, a in point.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("error", pmc.ApproximateInferenceWarning)
        imp = pmc.impute(xr.DataTree.from_dict({"posterior": post}), m)
    np.testing.assert_allclose(imp["marginals"].values, exact[y < 0], atol=1e-12)
    # within the model's own treewidth limit: beyond it, the model's approximation, said so
    with pm.Model() as narrow, warnings.catch_warnings():
        warnings.simplefilter("ignore", pmc.ApproximateInferenceWarning)
        W = pm.Normal("W", 0, 1, shape=(F, K))
        T = pm.Normal("T", 0, 1, shape=(K, K))
        pmc.CRF("y", graphs=b, node_features=X, node_weights=W, edge_weights=T, observed=y,
                max_treewidth=1)
    with pytest.warns(pmc.ApproximateInferenceWarning, match="max_treewidth=1.*not the exact"):
        pmc.impute(xr.DataTree.from_dict({"posterior": post}), narrow)


def test_impute_over_nuts_draws_matches_brute_force_average(rng):
    b = pmc.GraphBatch.chains([3, 3])
    y = np.array([0, -1, 1, -1, 2, -1])
    m, _, _ = _model(b, y, "shared", rng)
    res = pmc.fit(m, method="nuts", draws=40, tune=60, chains=1, random_seed=2,
                  nuts_sampler="pymc", compile_kwargs={"mode": "FAST_COMPILE"},
                  compute_convergence_checks=False)
    with pytest.raises(ValueError, match="extend_inferencedata must be True or False"):
        pmc.impute(res, m, extend_inferencedata="False")   # it extended the result
    imp = pmc.impute(res, m, extend_inferencedata=True)
    post = res["posterior"]
    ref = np.mean([_brute_conditional(b, *_tables(m, {"W": post["W"].values[0, s],
                                                      "T": post["T"].values[0, s]}), y)
                   for s in range(post.sizes["draw"])], axis=0)
    np.testing.assert_allclose(imp["marginals"].values, ref[y < 0], atol=1e-12)
    assert post["y_unobserved"].shape == (1, 40, 3)
    assert set(np.unique(post["y_unobserved"].values)) <= set(range(K))


def test_impute_reads_constant_and_deterministic_weights_and_refuses_other_models(rng):
    """Edge weights fixed as a numpy array, held in pm.Data, or a pm.Deterministic: imputation
    reads them as predict does and equals the exact conditional at the MAP; a result whose
    weights have another shape is refused."""
    b = BATCHES["chains"]
    y = _labels(b, rng)
    X = rng.normal(size=(b.n_total_nodes, F))
    T0 = rng.normal(size=(K, K))
    for kind in ("array", "data", "deterministic"):
        with pm.Model() as m:
            W = pm.Normal("W", 0, 1, shape=(F, K))
            if kind == "array":
                T = T0
            elif kind == "data":
                T = pm.Data("T", T0)
            else:
                T = pm.Deterministic("T", 0.5 * pm.Normal("T_raw", 0, 1, shape=(K, K)))
            pmc.CRF("y", graphs=b, node_features=X, node_weights=W, edge_weights=T, observed=y)
        res = pmc.fit(m, method="map")
        w = res["posterior"]["W"].values[0, 0]
        t = res["posterior"]["T"].values[0, 0] if kind == "deterministic" else T0
        node = X @ w
        exact = _brute_conditional(b, node, t[None], y)
        imp = pmc.impute(res, m)
        np.testing.assert_allclose(imp["marginals"].values, exact[y < 0], atol=1e-12)
    other, _, _ = _model(b, y, "shared", rng)
    with pm.Model() as wide:
        pmc.CRF("y", graphs=b, node_features=np.ones((b.n_total_nodes, F + 1)),
                node_weights=pm.Normal("W", 0, 1, shape=(F + 1, K)),
                edge_weights=pm.Normal("T", 0, 1, shape=(K, K)), observed=y)
    with pytest.raises(ValueError, match=rf"the result's 'W' has shape \({F}, {K}\); the "
                                         rf"model's node weights have shape \({F + 1}, {K}\)"):
        pmc.impute(pmc.fit(other, method="map"), wide)


def test_fitters_without_missing_label_support_refuse(rng):
    b = BATCHES["chains"]
    m, _, _ = _model(b, _labels(b, rng), "shared", rng)
    import warnings

    for method in ("ep", "bethe_laplace", "bethe_mh", "exchange"):
        # refused before anything else (no proposal fallback warning first), naming the method
        with warnings.catch_warnings(), pytest.raises(ValueError,
                                                      match=f"method='{method}'.*missing"):
            warnings.simplefilter("error", UserWarning)
            pmc.fit(m, method=method)
    with pytest.raises(ValueError, match="missing"):
        pmc.log_marginal_likelihood(m, method="laplace_exact")
    with pytest.raises(ValueError, match="missing"):
        CRFLogLikelihood(extract_crf(m)).observed_statistics()
    full, _, _ = _model(b, np.zeros(b.n_total_nodes, int), "shared", rng)
    with pytest.raises(ValueError, match="no missing entries"):
        pmc.impute(pmc.fit(full, method="map"), full)


def test_hcrf_and_mrf_refuse_masked_labels(rng):
    train, _ = pmc.datasets.hmm_classes(n_train_per_class=2, n_test_per_class=1, T=5, seed=0)
    labels = np.ma.masked_array(train.labels, mask=np.arange(train.labels.size) == 0)
    S, C = 2, 3
    with pm.Model(), pytest.raises(ValueError, match="cannot be missing"):
        pmc.HCRF("c", graphs=train.graphs, node_features=train.node_features,
                 theta_x=np.zeros((train.node_features.shape[1], S)), theta_y=np.zeros((S, C)),
                 theta_e=np.zeros((S, S, C)), observed=labels)
    g = pmc.GraphBatch.chains([3])
    with pm.Model(), pytest.raises(ValueError, match="cannot be missing"):
        pmc.MRF("x", graphs=g, edge_weights=np.zeros((2, 2)),
                observed=np.ma.masked_array(np.zeros((2, 3), int), mask=[[0, 1, 0], [0, 0, 0]]))


def test_labels_given_as_spins_warn_that_minus_one_is_missing():
    """A binary mask written as -1 / +1: every -1 would be left out as missing without a word.
    Warned, naming the fix; NaN or masked missing entries beside labels 1 are not warned."""
    b = pmc.GraphBatch.grid(3, 3)
    spins = np.array([1, -1, 1, -1, -1, 1, 1, 1, -1])
    with pm.Model():
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        with pytest.warns(UserWarning, match=r"-1 and 1 only.*\(labels \+ 1\) // 2") as rec:
            pmc.CRF("y", graphs=b, edge_weights=w, observed=spins)
    assert rec[0].filename == __file__  # the user's pmc.CRF line
    with pm.Model(), warnings.catch_warnings():
        warnings.simplefilter("error")
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("a", graphs=b, edge_weights=w, observed=(spins + 1) // 2)
        pmc.CRF("b", graphs=b, edge_weights=w, observed=np.where(spins < 0, np.nan, 1.0))
        pmc.CRF("c", graphs=b, edge_weights=w,
                observed=np.ma.masked_array(np.ones(9, int), spins < 0))
        pmc.CRF("d", graphs=b, edge_weights=pm.Normal("v", 0.0, 1.0, shape=(3, 3)),
                observed=np.where(spins < 0, -1, 2))
