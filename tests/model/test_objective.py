"""The engine objective (weight-space log-likelihood) against the compiled PyMC model."""

import cloudpickle
import numpy as np
import pymc as pm
import pytest
from helpers.models import node_edge_crf

import pymc_crf as pmc
from pymc_crf.fitters import extract_crf
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.model.objective import CRFLogLikelihood, GaussianLogPrior


def _model(kind: str, potential: str, rng):
    K = 3
    if kind == "chain":
        batch = GraphBatch.chains([4, 1, 6, 3])
    elif kind == "tree_shared":  # one shared table on a tree and a loop (junction tree engine)
        batch = GraphBatch.from_edges([np.array([[0, 1], [1, 2], [1, 3]]),
                                       np.array([[0, 1], [1, 2], [2, 0]])], [4, 3])
    else:  # a four-cycle with a chord and a single edge (junction tree engine)
        batch = GraphBatch.from_edges([np.array([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]]),
                                       np.array([[0, 1]])], [4, 2])
    return node_edge_crf(batch, K, potential, kind in ("chain", "tree_shared"), rng)


@pytest.mark.parametrize("kind", ["chain", "tree_loop", "tree_shared"])
@pytest.mark.parametrize("potential", ["loglinear", "probit"])
def test_engine_objective_equals_compiled_model(kind, potential):
    rng = np.random.default_rng(0)
    m = _model(kind, potential, rng)
    spec = extract_crf(m)
    lik, prior = CRFLogLikelihood(spec), GaussianLogPrior(spec)
    names = [w.name for w in spec.weights]
    fn = m.compile_fn([m.logp(), m.dlogp(vars=[m[n] for n in names])], point_fn=False,
                      inputs=[m.rvs_to_values[m[n]] for n in names])
    fn_ll = m.compile_fn(m.logp(vars=m.observed_RVs, sum=False)[0], point_fn=False,
                         inputs=[m.rvs_to_values[m[n]] for n in names])
    # PyMC keeps a sigma that float32 represents exactly (1.5) as a float32 constant and takes
    # its log in float32: the model's prior constant is off by ~1e-8 per weight, so the totals
    # are compared at 1e-8 and the likelihood parts (pointwise, below) at 1e-10.
    for _ in range(3):
        w = 2.0 * rng.normal(size=spec.flat_size)
        parts = spec.unflatten(w)
        lp_ref, g_ref = fn(*[parts[n] for n in names])
        ll, g = lik(w)
        lp, gp = prior(w)
        np.testing.assert_allclose(ll + lp, lp_ref, rtol=1e-8)
        np.testing.assert_allclose(g + gp, g_ref, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(lik.pointwise(w), fn_ll(*[parts[n] for n in names]),
                                   rtol=1e-10)
        np.testing.assert_allclose(lik.pointwise(w).sum(), ll, rtol=1e-12)


def test_engine_objective_gradient_by_finite_differences():
    rng = np.random.default_rng(1)
    spec = extract_crf(_model("tree_loop", "probit", rng))
    lik = CRFLogLikelihood(spec)
    w = rng.normal(size=spec.flat_size)
    _, g = lik(w)
    h = 1e-6
    fd = np.array([(lik(w + h * e)[0] - lik(w - h * e)[0]) / (2 * h)
                   for e in np.eye(spec.flat_size)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", ["chain", "tree_loop"])
def test_map_engine_path_equals_compiled_path(kind):
    rng = np.random.default_rng(2)
    m = _model(kind, "loglinear", rng)
    fast = pmc.fit(m, method="map")
    slow = pmc.fit(m, method="map", engine_objective=False)
    assert '"engine_objective": true' in fast.attrs["settings"]
    assert '"engine_objective": false' in slow.attrs["settings"]
    for name in fast["posterior"].data_vars:
        np.testing.assert_allclose(fast["posterior"][name].values, slow["posterior"][name].values,
                                   atol=1e-5)
    np.testing.assert_allclose(fast["optimizer_result"]["objective"].item(),
                               slow["optimizer_result"]["objective"].item(), rtol=1e-8)
    ll_f, ll_s = fast["log_likelihood"]["y"], slow["log_likelihood"]["y"]  # both from the engine
    assert ll_f.dims == ll_s.dims
    np.testing.assert_allclose(ll_f.values, ll_s.values, atol=1e-6)


def test_map_engine_objective_refusals():
    rng = np.random.default_rng(3)
    batch = GraphBatch.chains([3, 3])
    with pm.Model() as m:
        s = pm.HalfNormal("s", 1.0)
        # sd an expression of s (not a learned scale s[idx], which map refuses): map compiles
        T = pm.Normal("T", 0.0, s + 0.5, shape=(2, 2))
        pmc.CRF("y", graphs=batch, edge_weights=T, observed=rng.integers(0, 2, size=6))
    with pytest.raises(ValueError, match="engine_objective=True is not possible.*depend on other"):
        pmc.fit(m, method="map", engine_objective=True)
    res = pmc.fit(m, method="map")  # falls back to the compiled model
    assert '"engine_objective": false' in res.attrs["settings"]
    with pm.Model() as m2:
        T = pm.Normal("T", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("y", graphs=batch, edge_weights=T, observed=rng.integers(0, 2, size=6))
    with pytest.raises(ValueError, match="start names unknown variables"):
        pmc.fit(m2, method="map", start={"Q": 1.0})


def test_engine_log_likelihood_group_equals_pymc():
    """The engine's per-graph log-likelihood group (every fitter's default for CRF models) has
    PyMC's values, dims and coords."""
    import arviz as az

    from pymc_crf.model.results import attach_log_likelihood

    rng = np.random.default_rng(4)
    batch = GraphBatch.chains([3, 5, 2])
    X = rng.normal(size=(batch.n_total_nodes, 2))
    y = rng.integers(0, 3, size=batch.n_total_nodes)
    with pm.Model(coords={"graph": range(3), "position": range(5)}) as m:
        s = pm.HalfNormal("s", 1.0)
        W = pm.Normal("W", 0.0, s, shape=(2, 3))
        T = pm.Normal("T", 0.0, 1.0, shape=(3, 3))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T,
                observed=y, dims=("graph", "position"))
    post = {"s": np.abs(rng.normal(size=(2, 4))), "W": rng.normal(size=(2, 4, 2, 3)),
            "T": rng.normal(size=(2, 4, 3, 3))}
    a = az.from_dict({"posterior": post})
    b = az.from_dict({"posterior": post})
    attach_log_likelihood(a, m)
    pm.compute_log_likelihood(b, model=m, progressbar=False)
    la, lb = a["log_likelihood"]["y"], b["log_likelihood"]["y"]
    assert la.dims == lb.dims == ("chain", "draw", "graph")
    np.testing.assert_allclose(la.values, lb.values, rtol=1e-10)


def test_map_engine_path_only_for_pure_crf_models():
    """Other observed variables or potentials send fit_map to the compiled model (the engine
    objective would leave them out); deterministics are kept; the log-likelihood group then
    holds every observed variable."""
    rng = np.random.default_rng(5)
    batch = GraphBatch.chains([4, 3, 5])
    X = rng.normal(size=(batch.n_total_nodes, 2))
    y = rng.integers(0, 3, size=batch.n_total_nodes)

    def build(extra):
        with pm.Model() as m:
            W = pm.Normal("W", 0.0, 1.0, shape=(2, 3))
            pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, observed=y)
            extra(W)
        return m

    m_obs = build(lambda W: pm.Normal("z", W.sum(), 0.1, observed=5.0))
    m_pot = build(lambda W: pm.Potential("pen", -50 * (W**2).sum()))
    m_det = build(lambda W: pm.Deterministic("W2", 2 * W))
    for m, why in ((m_obs, "also observes"), (m_pot, "pm.Potential terms")):
        with pytest.raises(ValueError, match=why):
            pmc.fit(m, method="map", engine_objective=True)
        auto = pmc.fit(m, method="map")
        ref = pmc.fit(m, method="map", engine_objective=False)
        assert '"engine_objective": false' in auto.attrs["settings"]
        np.testing.assert_allclose(auto["posterior"]["W"].values, ref["posterior"]["W"].values)
    assert set(pmc.fit(m_obs, method="map")["log_likelihood"].data_vars) == {"y", "z"}
    res = pmc.fit(m_det, method="map")
    assert '"engine_objective": true' in res.attrs["settings"]
    np.testing.assert_allclose(res["posterior"]["W2"].values, 2 * res["posterior"]["W"].values)
    with pytest.raises(ValueError, match=r"start\['W'\] has shape"):
        pmc.fit(m_det, method="map", start={"W": np.zeros(3)})


@pytest.mark.parametrize("potential", ["loglinear", "probit"])
@pytest.mark.parametrize("shared", [True, False])
def test_score_pullback_pushforward(potential, shared):
    """score + (-log Z) is the log-likelihood; pullback of (statistics - marginals) is its
    gradient; pushforward is the directional derivative of the tables (finite differences)."""
    rng = np.random.default_rng(3)
    batch = pmc.GraphBatch.from_edges([[(0, 1), (1, 2), (2, 3), (3, 0), (1, 3), (3, 4)]], [5])
    K, F, Fe = 3, 2, 2
    X = rng.normal(size=(5, F))
    Xe = rng.normal(size=(batch.n_edges, Fe))
    y = rng.integers(0, K, size=5)
    with pm.Model() as model:
        w = pm.Normal("w", 0.0, 1.0, shape=(F, K))
        v = pm.Normal("v", 0.0, 1.0, shape=(K, K) if shared else (Fe, K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=w,
                edge_features=None if shared else Xe, edge_weights=v, potential=potential,
                epsilon=0.05 if potential == "probit" else 0.0, observed=y[None])
    ll = CRFLogLikelihood(extract_crf(model))
    w0 = rng.normal(size=ll.size)
    value, grad = ll(w0)
    s, sg = ll.score(w0)
    node, edge = ll.log_potentials(w0)
    m = ll.engine.marginals(batch, node, edge)
    np.testing.assert_allclose(s - m.log_z.sum(), value, rtol=1e-12)
    on, oe = ll.observed_statistics()
    np.testing.assert_allclose(ll.pullback(w0, on - m.node, oe - m.edge), grad, atol=1e-10)
    # score gradient by central differences
    h = 1e-6
    fd = np.array([(ll.score(w0 + h * e)[0] - ll.score(w0 - h * e)[0]) / (2 * h)
                   for e in np.eye(ll.size)])
    np.testing.assert_allclose(sg, fd, atol=1e-6)
    d = rng.normal(size=ll.size)
    jn, je = ll.pushforward(w0, d)
    n1, e1 = ll.log_potentials(w0 + h * d)
    n0, e0 = ll.log_potentials(w0 - h * d)
    np.testing.assert_allclose(jn, (n1 - n0) / (2 * h), atol=1e-6)
    np.testing.assert_allclose(je, (e1 - e0) / (2 * h), atol=1e-6)
    # adjoint identity <J^T u, d> = <u, J d>
    un, ue = rng.normal(size=jn.shape), rng.normal(size=je.shape)
    np.testing.assert_allclose(ll.pullback(w0, un, ue) @ d, np.sum(un * jn) + np.sum(ue * je),
                               rtol=1e-10)


def test_constant_edge_features_are_one_shared_table():
    """Edge features whose rows are all equal give the engine one shared (1, K, K) table, in the
    compiled model and in the objective, with the numbers of the per-edge tables."""
    from pytensor.graph.traversal import ancestors

    from pymc_crf.ops.log_partition import LogPartition

    rng = np.random.default_rng(3)
    K = 3
    batch = GraphBatch.chains([5, 2, 7, 1, 4])
    X = rng.normal(size=(batch.n_total_nodes, 2))
    Xe = np.tile([1.0, -0.5], (batch.n_edges, 1))
    y = rng.integers(0, K, size=batch.n_total_nodes)
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.0, shape=(2, K))
        V = pm.Normal("V", 0.0, 1.0, shape=(2, K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_features=Xe,
                edge_weights=V, observed=y)
    logz = [v for v in ancestors([m.logp()])
            if v.owner is not None and isinstance(v.owner.op, LogPartition)]
    assert logz and all(v.owner.inputs[1].type.shape[0] == 1 for v in logz)
    spec = extract_crf(m)
    lik = CRFLogLikelihood(spec)
    fn = m.compile_fn([m.logp(), m.dlogp(vars=[W, V])], point_fn=False,
                      inputs=[m.rvs_to_values[W], m.rvs_to_values[V]])
    for _ in range(2):
        w = rng.normal(size=spec.flat_size)
        parts = spec.unflatten(w)
        ll, g = lik(w)
        # reference: the per-edge tables (public layout) through the engine
        node, edge = lik.log_potentials(w)
        assert edge.shape == (batch.n_edges, K, K)
        mg = lik.engine.marginals(batch, node, edge)
        score, _ = lik.score(w)
        np.testing.assert_allclose(ll, score - mg.log_z.sum(), rtol=1e-12)
        obs_n, obs_e = lik.observed_statistics()
        np.testing.assert_allclose(g, lik.pullback(w, obs_n - mg.node, obs_e - mg.edge),
                                   rtol=1e-12, atol=1e-12)
        lp, gm = fn(parts["W"], parts["V"])
        lp_prior, g_prior = GaussianLogPrior(spec)(w)
        np.testing.assert_allclose(lp, ll + lp_prior, rtol=1e-10)
        np.testing.assert_allclose(gm, g + g_prior, rtol=1e-10, atol=1e-12)


def test_objective_reuses_its_score_arrays_safely():
    """The objective forms its feature products in arrays it keeps from call to call: values
    equal a fresh objective's at every call, a returned array is never overwritten by a later
    call, threads calling at once each get their own numbers, and it pickles."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(7)
    spec = extract_crf(_model("tree_loop", "loglinear", rng))  # per-edge tables
    lik = CRFLogLikelihood(spec)
    ws = [rng.normal(size=spec.flat_size) for _ in range(6)]
    fresh = [CRFLogLikelihood(spec)(w) for w in ws]
    fresh_pw = [CRFLogLikelihood(spec).pointwise(w) for w in ws]
    first = lik.pointwise(ws[0])
    kept = first.copy()
    for w, (v, g), pw in zip(ws, fresh, fresh_pw, strict=True):
        v2, g2 = lik(w)
        assert v2 == v and np.array_equal(g2, g)
        assert np.array_equal(lik.pointwise(w), pw)
    node_buf, edge_buf = lik._buffers
    assert node_buf is not None and edge_buf is not None  # the per-edge products are kept
    assert np.array_equal(first, kept)
    with lik._buffers_lock:  # as if another thread were inside a call: fresh arrays
        v2, g2 = lik(ws[2])
        assert v2 == fresh[2][0] and np.array_equal(g2, fresh[2][1])
    with ThreadPoolExecutor(4) as pool:
        out = list(pool.map(lik, ws * 4))
    for (v, g), (v2, g2) in zip(fresh * 4, out, strict=True):
        assert v2 == v and np.array_equal(g2, g)
    # PyMC pickles step methods (which hold the objective) for spawn / forkserver sampling
    clone = cloudpickle.loads(cloudpickle.dumps(lik))
    assert clone._buffers is None and lik._buffers is not None
    v, g = clone(ws[1])
    assert v == fresh[1][0] and np.array_equal(g, fresh[1][1])


def test_features_dot_into_out():
    """``features_dot`` writes into ``out`` for dense and sparse features alike."""
    import scipy.sparse

    from pymc_crf.feature_products import features_dot

    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 3)) * (rng.random((7, 3)) < 0.5)
    w = rng.normal(size=(3, 2, 2))
    for feats in (x, scipy.sparse.csr_matrix(x)):
        out = np.full((7, 4), np.nan)
        r = features_dot(feats, w, out=out)
        assert r.shape == (7, 2, 2) and np.shares_memory(r, out)
        np.testing.assert_allclose(r, np.einsum("rf,fij->rij", x, w), rtol=1e-14)
    for bad in (np.empty((4, 7)).T, np.empty((7, 5)), np.empty((7, 4), dtype=np.float32)):
        with pytest.raises(ValueError, match="C-contiguous float64 array of 28 entries"):
            features_dot(x, w, out=bad)


def test_edge_features_of_a_batch_without_edges():
    """Single-node graphs with (0, F) edge features: the objective's gradient (zero rows in
    features_tdot) and MAP work, and the edge weights stay at their prior mean."""
    batch = GraphBatch.chains([1, 1, 1])
    X = np.array([[1.0], [-1.0], [0.5]])
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.0, shape=(1, 2))
        T = pm.Normal("T", 0.0, 1.0, shape=(2, 2, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_features=np.zeros((0, 2)),
                edge_weights=T, observed=np.array([0, 1, 0]))
    res = pmc.fit(m, method="map", progressbar=False)
    np.testing.assert_allclose(res["posterior"]["T"].values, 0.0, atol=1e-8)
    ref = pmc.fit(m, method="map", engine_objective=False, progressbar=False)
    np.testing.assert_allclose(res["posterior"]["W"].values, ref["posterior"]["W"].values,
                               atol=1e-6)
