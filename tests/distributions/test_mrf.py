"""The MRF distribution against brute force, the CRF over N copies of the graph, and PyMC's tools."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from pytensor.gradient import verify_grad

import pymc_crf as pmc
from pymc_crf.distributions.mrf import MRFParameterization, mrf_parameterization
from pymc_crf.inference import BeliefPropagation, BruteForce, JunctionTree

LOOP = pmc.GraphBatch.from_edges([[(0, 1), (1, 2), (2, 0), (2, 3)]], [4])  # triangle + tail
N_ROWS = 7


def _weights(kind: str, K: int, shared_node: bool, shared_edge: bool, rng):
    n, E = 4, LOOP.n_edges
    if kind in ("table", "potts"):
        wn = rng.normal(size=(K,) if shared_node else (n, K))
    else:
        wn = rng.normal(size=() if shared_node else (n,))
    if kind == "table":
        we = rng.normal(size=(K, K) if shared_edge else (E, K, K))
    else:
        we = rng.normal(size=() if shared_edge else (E,))
    return wn, we


def _tables_by_hand(kind, K, wn, we):
    """The log-potential tables written out directly from the docstring's definitions."""
    n, E = 4, LOOP.n_edges
    node, edge = np.zeros((n, K)), np.zeros((E, K, K))
    for i in range(n):
        for a in range(K):
            if kind in ("table", "potts"):
                node[i, a] = wn[a] if np.ndim(wn) == 1 else wn[i, a]
            else:
                b = wn if np.ndim(wn) == 0 else wn[i]
                node[i, a] = b * ((2 * a - 1) if kind == "ising" else a)
    for e in range(E):
        for a in range(K):
            for c in range(K):
                if kind == "table":
                    edge[e, a, c] = we[a, c] if np.ndim(we) == 2 else we[e, a, c]
                else:
                    w = we if np.ndim(we) == 0 else we[e]
                    f = {"ising": (2 * a - 1) * (2 * c - 1), "boltzmann": a * c,
                         "potts": float(a == c)}[kind]
                    edge[e, a, c] = w * f
    return node, edge


CASES = [("table", 2), ("table", 3), ("ising", 2), ("boltzmann", 2), ("potts", 3)]


@pytest.mark.parametrize("kind,K", CASES)
@pytest.mark.parametrize("shared_node,shared_edge", [(True, True), (False, False), (True, False)])
def test_logp_equals_brute_force_and_crf_copies(kind, K, shared_node, shared_edge, rng):
    """Per-row logp = brute-force score - log Z; equal to a pmc.CRF over N copies of the graph."""
    wn, we = _weights(kind, K, shared_node, shared_edge, rng)
    X = rng.integers(0, K, size=(N_ROWS, 4))
    with pm.Model() as m:
        x = pmc.MRF("x", graphs=LOOP, node_weights=wn, edge_weights=we, parameterization=kind,
                    n_labels=K if kind == "potts" else None, observed=X)
    lp = m.compile_fn(m.logp(vars=[x], sum=False)[0], inputs=[], point_fn=False)()
    node, edge = _tables_by_hand(kind, K, wn, we)
    lz = BruteForce().log_partition(LOOP, node, edge)[0]
    u, v = LOOP.edges.T
    score = node[np.arange(4), X].sum(1) + edge[np.arange(LOOP.n_edges), X[:, u], X[:, v]].sum(1)
    np.testing.assert_allclose(lp, score - lz, rtol=1e-12, atol=1e-12)
    # the same numbers from a CRF over N copies of the graph with per-node one-hot features
    copies = pmc.GraphBatch.from_edges([LOOP.local_edges(0)] * N_ROWS, [4] * N_ROWS)
    with pm.Model() as mc:
        y = pmc.CRF("y", graphs=copies, node_features=np.tile(np.eye(4), (N_ROWS, 1)),
                    node_weights=node, edge_features=np.tile(np.eye(LOOP.n_edges), (N_ROWS, 1)),
                    edge_weights=edge, observed=X.reshape(-1))
    lp_crf = mc.compile_fn(mc.logp(vars=[y], sum=False)[0], inputs=[], point_fn=False)()
    np.testing.assert_allclose(lp, lp_crf, rtol=1e-11)


@pytest.mark.parametrize("mode,expected", [
    ("FAST_COMPILE", {"log_partition": 1, "weighted_marginals": 1}),
    (None, {"log_partition": 0, "weighted_marginals": 0, "log_z_and_weighted_marginals": 1}),
])
def test_log_z_evaluated_once_per_evaluation(mode, expected, rng):
    """logp and dlogp of 500 rows call the engine's log Z once and its marginals once; with the
    default rewrites, one fused call gives both."""

    class Counting(JunctionTree):
        calls: dict = {}

        def log_partition(self, *a, **k):
            Counting.calls["log_partition"] = Counting.calls.get("log_partition", 0) + 1
            return super().log_partition(*a, **k)

        def weighted_marginals(self, *a, **k):
            Counting.calls["weighted_marginals"] = Counting.calls.get("weighted_marginals", 0) + 1
            # the uncounted one-pass method: super() would count it as a second call
            return JunctionTree.log_z_and_weighted_marginals(self, *a, **k)[1:]

        def log_z_and_weighted_marginals(self, *a, **k):
            key = "log_z_and_weighted_marginals"
            Counting.calls[key] = Counting.calls.get(key, 0) + 1
            return super().log_z_and_weighted_marginals(*a, **k)

    X = rng.integers(0, 2, size=(500, 4))
    with pm.Model() as m:
        b = pm.Normal("b", 0, 1, shape=4)
        w = pm.Normal("w", 0, 1, shape=LOOP.n_edges)
        pmc.MRF("x", graphs=LOOP, node_weights=b, edge_weights=w, parameterization="ising",
                inference=Counting(), observed=X)
    fn = m.compile_fn([m.logp(), m.dlogp()], mode=mode)
    Counting.calls = {k: 0 for k in expected}
    fn(m.initial_point())
    assert Counting.calls == expected


@pytest.mark.parametrize("kind,K", [("table", 3), ("ising", 2), ("potts", 3)])
def test_logp_gradient_verify_grad(kind, K, rng):
    X = rng.integers(0, K, size=(9, 4))
    wn, we = _weights(kind, K, False, False, rng)

    def f(Wn, We):
        rv = pmc.MRF.dist(graphs=LOOP, node_weights=Wn, edge_weights=We, parameterization=kind,
                          n_labels=K, n_samples=9)
        return pm.logp(rv, X).sum()

    verify_grad(f, [wn, we], rng=rng)


def test_exact_draws_match_brute_force_probabilities():
    """Frequencies of 4000 junction-tree draws against enumeration: chi-square, 15 dof."""
    wn, we = np.array([0.3, -0.5, 0.1, 0.8]), np.array([0.7, -0.4, 0.5, -0.9])
    rv = pmc.MRF.dist(graphs=LOOP, node_weights=wn, edge_weights=we, parameterization="ising",
                      n_samples=4000)
    draws = pm.draw(rv, random_seed=3)
    assert draws.shape == (4000, 4)
    codes = draws @ np.array([8, 4, 2, 1])
    freq = np.bincount(codes, minlength=16) / len(codes)
    node, edge = _tables_by_hand("ising", 2, wn, we)
    configs = np.indices((2,) * 4).reshape(4, -1).T
    u, v = LOOP.edges.T
    sc = node[np.arange(4), configs].sum(1) + edge[np.arange(4), configs[:, u], configs[:, v]].sum(1)
    p = np.exp(sc - np.logaddexp.reduce(sc))
    chi2 = len(codes) * ((freq - p) ** 2 / p).sum()
    assert chi2 < 37.7  # chi-square, 15 dof, p = 0.001


def test_nuts_prior_posterior_predictive_and_loo(rng):
    X = rng.integers(0, 2, size=(30, 4))
    coords = {"row": range(30), "node": range(4)}
    with pm.Model(coords=coords):
        b = pm.Normal("b", 0.0, 1.0, dims="node")
        w = pm.Normal("w", 0.0, 1.0)
        pmc.MRF("x", graphs=LOOP, node_weights=b, edge_weights=w, parameterization="ising",
                observed=X, dims=("row", "node"))
        prior = pm.sample_prior_predictive(draws=5, random_seed=1)
        idata = pm.sample(draws=30, tune=30, chains=1, random_seed=2, progressbar=False,
                          compute_convergence_checks=False)
        pm.compute_log_likelihood(idata, progressbar=False)
        pp = pm.sample_posterior_predictive(idata, random_seed=1, progressbar=False)
    assert prior["prior_predictive"]["x"].shape == (1, 5, 30, 4)
    assert set(np.unique(prior["prior_predictive"]["x"].values)) <= {0, 1}
    assert pp["posterior_predictive"]["x"].shape == (1, 30, 30, 4)
    ll = idata["log_likelihood"]["x"]
    assert ll.dims == ("chain", "draw", "row")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = az.loo(idata)
    assert np.isfinite(loo["elpd"])
    assert loo["elpd_i"].shape == (30,)


@pytest.mark.parametrize("labels,msg", [
    (np.zeros((3, 5), int), "rows of length 5"),
    (np.array([[0, 1, 2, 0]]), r"label 2 at row 0, node 2 is outside 0..1"),
    (np.array([[0, 1, np.nan, 0]]), "contain NaN at row 0, node 2: the MRF needs whole labellings"),
    (np.array([[0, 1, 0.5, 0]]), "whole numbers"),
    (np.zeros((2, 2, 4), int), r"\(n_samples, n_nodes\)"),
    (np.array([[0, -1, 1, 0]]), "spins are given as label indices"),
])
def test_bad_labels(labels, msg):
    with pm.Model(), pytest.raises(ValueError, match=msg):
        w = pm.Normal("w", 0, 1)
        pmc.MRF("x", graphs=LOOP, edge_weights=w, parameterization="ising", observed=labels)


def test_labels_from_pm_data_are_checked_where_the_logp_runs():
    # swapped in with pm.set_data, they skip the construction-time checks above
    from pymc.logprob.utils import ParameterValueError

    with pm.Model() as m:
        data = pm.Data("data", np.array([[0, 1, 1, 0]]))
        w = pm.Normal("w", 0, 1)
        pmc.MRF("x", graphs=LOOP, edge_weights=w, parameterization="ising", observed=data)
    assert np.isfinite(m.compile_logp()(m.initial_point()))
    pm.set_data({"data": np.array([[0, 1, 2, 0]])}, model=m)
    with pytest.raises(ParameterValueError, match=r"MRF samples must lie in 0..1"):
        m.compile_logp()(m.initial_point())


@pytest.mark.parametrize("use_dims", [False, True])
def test_draws_follow_rows_changed_by_set_data(use_dims):
    """The rows of observed pm.Data (or a row dim) are an input of the draws, not a setting fixed
    at build: after pm.set_data to 6 rows the posterior predictive has 6 rows, as the logp does."""
    X = np.array([[0, 1, 1, 0], [1, 1, 0, 0]])
    coords = {"row": range(2), "node": range(4)} if use_dims else None
    dims = {"dims": ("row", "node")} if use_dims else {}
    with pm.Model(coords=coords) as m:
        data = pm.Data("data", X, **dims)
        w = pm.Normal("w", 0, 1)
        pmc.MRF("x", graphs=LOOP, edge_weights=w, parameterization="ising", observed=data,
                **dims)
    posterior = az.from_dict({"posterior": {"w": np.zeros((1, 3))}})
    with m:
        pm.set_data({"data": np.tile(X, (3, 1))}, coords={"row": range(6)} if use_dims else None)
        pp = pm.sample_posterior_predictive(posterior, random_seed=0, progressbar=False)
    assert m.compile_logp(sum=False)(m.initial_point())[-1].shape == (6,)
    assert pp["posterior_predictive"]["x"].shape == (1, 3, 6, 4)
    with pm.Model(), pytest.raises(ValueError, match="n_samples=3 but observed has 2 rows"):
        pmc.MRF("x", graphs=LOOP, edge_weights=0.5, parameterization="ising", n_samples=3,
                observed=pm.Data("d", X))
    with (pm.Model(coords={"row": range(3), "node": range(4)}),
          pytest.raises(ValueError, match="n_samples=5 but the MRF's shape .* has 3 rows")):
        pmc.MRF("x", graphs=LOOP, edge_weights=0.5, parameterization="ising", n_samples=5,
                dims=("row", "node"))


@pytest.mark.parametrize("kind,wn,we,msg", [
    ("table", np.zeros((3, 2)), None, r"node_weights .* must have shape \(2,\) .* or \(4, 2\)"),
    ("table", np.zeros(2), np.zeros((3, 3)), r"edge_weights .* \(2, 2\) .* \(4, 2, 2\)"),
    ("ising", np.zeros(3), None, r"\(\) \(shared\) or \(4,\)"),
    ("ising", None, np.zeros((4, 2, 2)), r"edge_weights .* \(\) \(shared\) or \(4,\)"),
    ("potts", None, np.zeros(4), "pass n_labels"),
    ("bogus", np.zeros(2), None, "parameterization must be one of"),
    ("table", None, None, "node_weights, edge_weights, or both"),
])
def test_bad_weights(kind, wn, we, msg):
    with pytest.raises(ValueError, match=msg):
        pmc.MRF.dist(graphs=LOOP, node_weights=wn, edge_weights=we, parameterization=kind,
                     n_samples=3)


def test_bad_graphs_and_sizes():
    with pytest.raises(ValueError, match="ONE graph"):
        pmc.MRF.dist(graphs=pmc.GraphBatch.chains([3, 3]), edge_weights=0.5,
                     parameterization="ising", n_samples=2)
    with pytest.raises(TypeError, match="GraphBatch"):
        pmc.MRF.dist(graphs=[(0, 1)], edge_weights=0.5, parameterization="ising", n_samples=2)
    with pytest.raises(ValueError, match="needs n_samples"):
        pmc.MRF.dist(graphs=LOOP, edge_weights=0.5, parameterization="ising")
    with pytest.raises(ValueError, match="has no edges"):
        pmc.MRF.dist(graphs=pmc.GraphBatch.chains([1]), node_weights=0.1, edge_weights=0.5,
                     parameterization="ising", n_samples=2)
    with pm.Model(), pytest.raises(ValueError, match="n_samples=2 but observed has 3 rows"):
        pmc.MRF("x", graphs=LOOP, edge_weights=0.5, parameterization="ising", n_samples=2,
                observed=np.zeros((3, 4), int))
    with pytest.raises(ValueError, match=r"shape \(3, 4\)"):
        pmc.MRF.dist(graphs=LOOP, edge_weights=0.5, parameterization="ising", n_samples=3,
                     shape=(3, 5))
    # a dim's length is symbolic in PyMC: a node coord of the wrong length is refused when the
    # model is built, not by ArviZ after sampling ("conflicting sizes for dimension 'node'")
    with (pm.Model(coords={"row": range(3), "node": range(5)}),
          pytest.raises(ValueError, match=r"shape \(N, 4\) .*dims give 5 nodes")):
        pmc.MRF("x", graphs=LOOP, edge_weights=0.5, parameterization="ising",
                observed=np.zeros((3, 4), int), dims=("row", "node"))


def test_engines_auto_bp_warning_and_named():
    grid = pmc.GraphBatch.grid(5, 5)
    X = np.random.default_rng(0).integers(0, 2, size=(10, 25))
    with pm.Model():
        with pytest.warns(pmc.ApproximateInferenceWarning):
            x = pmc.MRF("x", graphs=grid, edge_weights=0.2, parameterization="ising",
                        max_treewidth=2, observed=X)
        assert x.owner.op.engine.name == "bp"
        # the per-row logp uses the Bethe log Z of loopy BP
        lp = pm.logp(x, X).eval(mode="FAST_COMPILE")
        node, edge = np.zeros((25, 2)), 0.2 * np.array([[[1.0, -1.0], [-1.0, 1.0]]])
        s = 2 * X - 1
        score = 0.2 * (s[:, grid.edges[:, 0]] * s[:, grid.edges[:, 1]]).sum(1)
        np.testing.assert_allclose(lp, score - BeliefPropagation().log_partition(grid, node,
                                                                                  edge)[0])
        y = pmc.MRF("y", graphs=grid, edge_weights=0.2, parameterization="ising", observed=X)
        assert y.owner.op.engine.name == "junction_tree"
        c = pmc.MRF("c", graphs=pmc.GraphBatch.chains([4]), edge_weights=0.2,
                    parameterization="ising", observed=X[:, :4])
        assert c.owner.op.engine.name == "chain"
        with pytest.raises(ValueError, match="treewidth .* above max_treewidth=2"):
            pmc.MRF("z", graphs=grid, edge_weights=0.2, parameterization="ising",
                    inference="junction_tree", max_treewidth=2, observed=X)
        # Gibbs has no log Z, so it cannot define the likelihood: refused when the model is built
        with pytest.raises(ValueError, match="gibbs"):
            pmc.MRF("g", graphs=grid, edge_weights=0.2, parameterization="ising",
                    inference="gibbs", observed=X)


def test_parameterization_adjoint_is_transpose(rng):
    """<J^T u, w> = <u, J w> for every weight layout (the map fitters differentiate through)."""
    for kind, K in CASES:
        for sn, se in [(True, True), (False, False)]:
            wn, we = _weights(kind, K, sn, se, rng)
            p = mrf_parameterization(LOOP, kind, pm.math.constant(wn), pm.math.constant(we),
                                     K if kind == "potts" else None)
            assert isinstance(p, MRFParameterization)
            node, edge = p.node_table(wn), p.edge_table(we)
            un, ue = rng.normal(size=node.shape), rng.normal(size=edge.shape)
            lhs = np.sum(p.node_adjoint(un) * wn) + np.sum(p.edge_adjoint(ue) * we)
            np.testing.assert_allclose(lhs, np.sum(un * node) + np.sum(ue * edge), rtol=1e-12)


@pytest.mark.slow
def test_nuts_posterior_equals_quadrature():
    """NUTS on a two-parameter Ising MRF (shared bias b, shared coupling w on a triangle with a
    tail, 40 rows) against the exact posterior on a 301 x 301 grid (brute-force log Z): posterior
    means within 4 Monte Carlo standard errors, sds within 10%."""
    rng = np.random.default_rng(8)
    configs = np.indices((2,) * 4).reshape(4, -1).T
    s = 2.0 * configs - 1.0
    u, v = LOOP.edges.T
    f_node, f_edge = s.sum(1), (s[:, u] * s[:, v]).sum(1)
    p_true = np.exp(0.2 * f_node + 0.6 * f_edge)
    X = configs[rng.choice(16, size=40, p=p_true / p_true.sum())]
    with pm.Model():
        b = pm.Normal("b", 0.0, 1.0)
        w = pm.Normal("w", 0.0, 1.0)
        pmc.MRF("x", graphs=LOOP, node_weights=b, edge_weights=w, parameterization="ising",
                observed=X)
        idata = pm.sample(draws=2000, tune=1000, chains=2, random_seed=3, progressbar=False)
    bs, ws = np.meshgrid(np.linspace(-3, 3, 301), np.linspace(-3, 3, 301), indexing="ij")
    sx = 2.0 * X - 1.0
    stat_b, stat_w = sx.sum(), (sx[:, u] * sx[:, v]).sum()
    log_z = np.logaddexp.reduce(bs[..., None] * f_node + ws[..., None] * f_edge, axis=-1)
    logpost = bs * stat_b + ws * stat_w - 40 * log_z - 0.5 * (bs**2 + ws**2)
    p = np.exp(logpost - logpost.max())
    p /= p.sum()
    post = idata["posterior"]
    summ = az.summary(idata, var_names=["b", "w"])
    for name, grid in (("b", bs), ("w", ws)):
        mean = float((p * grid).sum())
        sd = float(np.sqrt((p * (grid - mean) ** 2).sum()))
        draws = post[name].values.ravel()
        mcse = float(summ.loc[name, "mcse_mean"])
        assert abs(draws.mean() - mean) < 4 * mcse, (name, draws.mean(), mean, mcse)
        assert abs(draws.std() - sd) < 0.1 * sd, (name, draws.std(), sd)
