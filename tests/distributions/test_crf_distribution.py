import numpy as np
import pymc as pm
import pytest
from pytensor.gradient import verify_grad

import pymc_crf as pmc
from pymc_crf.distributions.crf import crf_log_potentials
from pymc_crf.inference import BruteForce
from pymc_crf.potentials import log_potential

GRAPHS = [pmc.GraphBatch.chains([3, 1, 4]),
          pmc.GraphBatch.from_edges([[(0, 1), (1, 2), (2, 0)], [(0, 1), (0, 2), (0, 3)]], [3, 4])]


def _brute_logp(b, node, edge, y):
    lz = BruteForce().log_partition(b, node, edge)
    rows = np.zeros(b.n_edges, int) if edge.shape[0] == 1 else np.arange(b.n_edges)
    sc = (np.bincount(b.node_graph, node[np.arange(b.n_total_nodes), y], minlength=b.n_graphs)
          + np.bincount(b.edge_graph, edge[rows, y[b.edges[:, 0]], y[b.edges[:, 1]]],
                        minlength=b.n_graphs))
    return sc - lz


@pytest.mark.parametrize("b", GRAPHS, ids=["chains", "loop+tree"])
@pytest.mark.parametrize("potential,eps", [("loglinear", 0.0), ("probit", 0.0), ("probit", 0.1)])
@pytest.mark.parametrize("edge_kind", ["shared", "features"])
def test_logp_equals_brute_force(b, potential, eps, edge_kind, rng):
    K, F, Fe = 3, 2, 2
    X = rng.normal(size=(b.n_total_nodes, F))
    Xe = rng.normal(size=(b.n_edges, Fe))
    y = rng.integers(0, K, size=b.n_total_nodes)
    shape_e = (K, K) if edge_kind == "shared" else (Fe, K, K)
    with pm.Model() as m:
        W = pm.Normal("W", 0, 1, shape=(F, K))
        T = pm.Normal("T", 0, 1, shape=shape_e)
        obs = pmc.CRF("y", graphs=b, node_features=X, node_weights=W,
                      edge_features=None if edge_kind == "shared" else Xe, edge_weights=T,
                      potential=potential, epsilon=eps, observed=y)
    point = {"W": rng.normal(size=(F, K)), "T": rng.normal(size=shape_e)}
    lp = m.compile_fn(m.logp(vars=[obs], sum=False)[0])(point)
    node = log_potential(X @ point["W"], potential, eps)
    edge = (log_potential(point["T"], potential, eps)[None] if edge_kind == "shared"
            else log_potential(np.einsum("ef,fab->eab", Xe, point["T"]), potential, eps))
    np.testing.assert_allclose(lp, _brute_logp(b, node, edge, y), rtol=1e-11)


@pytest.mark.parametrize("potential", ["loglinear", "probit"])
def test_full_model_logp_verify_grad(potential, rng):
    b = GRAPHS[1]
    K, F = 2, 3
    X = rng.normal(size=(b.n_total_nodes, F))
    Xe = rng.normal(size=(b.n_edges, 2))
    y = rng.integers(0, K, size=b.n_total_nodes)
    padded = pmc.pad_labels(b, y, K)

    def f(W, T):
        node, edge, _ = crf_log_potentials(b, X, W, Xe, T, potential, 0.05 if potential ==
                                           "probit" else 0.0)
        rv = pmc.CRF.dist(graphs=b, node_features=X, node_weights=W, edge_features=Xe,
                          edge_weights=T, potential=potential, n_labels=K)
        return pm.logp(rv, padded).sum() + 0 * node.sum() + 0 * edge.sum()

    verify_grad(f, [rng.normal(size=(F, K)), rng.normal(size=(2, K, K))], rng=rng)


def test_random_exact_frequencies_match_probabilities():
    b = pmc.GraphBatch.from_edges([[(0, 1), (1, 2), (2, 0)]], [3])
    T = np.array([[0.5, -1.0], [0.3, 0.8]])
    rv = pmc.CRF.dist(graphs=b, edge_weights=T)
    draws = pm.draw(rv, draws=3000, random_seed=7)[:, 0, :]
    codes = draws @ np.array([4, 2, 1])
    freq = np.bincount(codes, minlength=8) / len(codes)
    configs = np.indices((2, 2, 2)).reshape(3, -1).T
    sc = np.array([T[c[0], c[1]] + T[c[1], c[2]] + T[c[2], c[0]] for c in configs])
    p = np.exp(sc - np.log(np.exp(sc).sum()))
    chi2 = len(codes) * ((freq - p) ** 2 / p).sum()
    assert chi2 < 24.3  # chi-square, 7 dof, p = 0.Parise & Welling 2006


def test_prior_and_posterior_predictive_and_loo(rng):
    b = pmc.GraphBatch.chains([4] * 20)
    X = rng.normal(size=(b.n_total_nodes, 2))
    y = rng.integers(0, 2, size=b.n_total_nodes)
    with pm.Model(coords={"graph": range(20), "position": range(4)}) as m:
        W = pm.Normal("W", 0, 1, shape=(2, 2))
        pmc.CRF("y", graphs=b, node_features=X, node_weights=W, observed=y,
                dims=("graph", "position"))
        prior = pm.sample_prior_predictive(draws=10, random_seed=1)
    draws = prior["prior_predictive"]["y"].values
    assert draws.shape == (1, 10, 20, 4) and set(np.unique(draws)) <= {0, 1}
    res = pmc.fit(m, method="map")
    with m:
        pp = pm.sample_posterior_predictive(res, random_seed=1, progressbar=False)
    assert pp["posterior_predictive"]["y"].shape == (1, 1, 20, 4)
    assert res["log_likelihood"]["y"].dims == ("chain", "draw", "graph")



def test_dims_of_another_length_are_refused_when_the_model_is_built():
    """PyMC keeps dim lengths symbolic, so a coord of the wrong length passed the static shape
    check; the model then sampled and failed in ArviZ ("conflicting sizes for dimension")."""
    b = pmc.GraphBatch.chains([1, 3])
    y = [np.array([0]), np.array([1, 0, 1])]
    with pm.Model(coords={"graph": range(2), "position": range(4)}):
        T = pm.Normal("T", 0, 1, shape=(2, 2))
        with pytest.raises(ValueError, match=r"has shape \(2, 3\) .*dims give \(2, 4\)"):
            pmc.CRF("y", graphs=b, edge_weights=T, observed=y, dims=("graph", "position"))
        with pytest.raises(ValueError, match=r"has shape \(2, 3\) .*dims give \(2, 4\)"):
            pmc.CRF("z", graphs=b, edge_weights=T, dims=("graph", "position"))
    with pm.Model(coords={"graph": range(2), "position": range(3)}):
        T = pm.Normal("T", 0, 1, shape=(2, 2))
        pmc.CRF("y", graphs=b, edge_weights=T, observed=y, dims=("graph", "position"))
        # labels in pm.Data give the variable their shape: flat ones are named as labels
        with pytest.raises(ValueError, match=r"CRF labels must be the \(2, 3\) .*pmc.pad_labels"
                                             r".*got shape \(4,\)"):
            pmc.CRF("z", graphs=b, edge_weights=T, observed=pm.Data("flat", np.zeros(4, int)))

def test_unpad_labels_checks_the_batch_layout():
    """Padded labels must end in the batch's (graphs, max nodes): another batch's matrix,
    larger or smaller, is refused by name rather than read in part."""
    b = pmc.GraphBatch.chains([3, 2])
    padded = np.array([[0, 1, 2], [1, 0, -1]])
    np.testing.assert_array_equal(pmc.unpad_labels(b, padded), [0, 1, 2, 1, 0])
    np.testing.assert_array_equal(pmc.unpad_labels(b, np.stack([padded, padded + 1]))[1],
                                  [1, 2, 3, 2, 1])
    for bad in (np.zeros((3, 3), int), np.zeros((4, 5), int), np.zeros((2, 2), int),
                np.zeros(5, int)):
        with pytest.raises(ValueError, match=r"must end in the batch's \(graphs, max nodes\) = "
                                             r"\(2, 3\)"):
            pmc.unpad_labels(b, bad)


@pytest.mark.parametrize("labels,msg", [
    (np.array([0, 1, 5, 0, 0, 0, 0, 0]), "outside 0..2"),
    (np.zeros(7, int), "one entry per node"),
    ([np.zeros(3, int), np.zeros(2, int), np.zeros(4, int)], "graph 1 has 1 nodes but 2 labels"),
])
def test_bad_labels(labels, msg):
    b = GRAPHS[0]
    with pm.Model(), pytest.raises(ValueError, match=msg):
        T = pm.Normal("T", 0, 1, shape=(3, 3))
        pmc.CRF("y", graphs=b, edge_weights=T, observed=labels)


def test_bad_features_and_weights(rng):
    b = GRAPHS[0]
    X = rng.normal(size=(b.n_total_nodes, 2))
    bad = X.copy()
    bad[3, 1] = np.nan
    with pm.Model():
        W = pm.Normal("W", 0, 1, shape=(2, 3))
        with pytest.raises(ValueError, match="NaN or inf"):
            pmc.CRF("a", graphs=b, node_features=bad, node_weights=W, observed=np.zeros(8, int))
        W3 = pm.Normal("W3", 0, 1, shape=(4, 3))
        with pytest.raises(ValueError, match=r"node_weights must have shape \(2, 3\)"):
            pmc.CRF("b", graphs=b, node_features=X, node_weights=W3, observed=np.zeros(8, int))
        with pytest.raises(ValueError, match="go together"):
            pmc.CRF("c", graphs=b, node_weights=W, observed=np.zeros(8, int))
        # edge features without edge weights to score them are refused (they would be ignored)
        with pytest.raises(ValueError, match="edge_features need edge_weights"):
            pmc.CRF("c2", graphs=b, node_features=X, node_weights=W,
                    edge_features=np.ones((b.n_edges, 1)), observed=np.zeros(8, int))
        with pytest.raises(ValueError, match="edge_features need edge_weights"):
            crf_log_potentials(b, X, np.zeros((2, 3)), np.ones((b.n_edges, 1)), None)
        # label noise is the robust probit's: a log-linear CRF ignored epsilon silently
        with pytest.raises(ValueError, match="epsilon \\(label noise\\) is a setting of the "
                                             "robust probit; potential='loglinear'"):
            pmc.CRF("d", graphs=b, node_features=X, node_weights=W, epsilon=0.2,
                    observed=np.zeros(8, int))
        # one label: the likelihood is 1 whatever the weights (every fitter returned the prior)
        W1 = pm.Normal("W1", 0, 1, shape=(2, 1))
        with pytest.raises(ValueError, match="a CRF needs at least 2 labels; .* give 1"):
            pmc.CRF("e", graphs=b, node_features=X, node_weights=W1, observed=np.zeros(8, int))


def test_junction_tree_refuses_graph_above_limit():
    b = pmc.GraphBatch.grid(5, 5)
    with pm.Model(), pytest.raises(ValueError, match="treewidth .* above max_treewidth=2"):
        T = pm.Normal("T", 0, 1, shape=(2, 2))
        pmc.CRF("y", graphs=b, edge_weights=T, inference="junction_tree", max_treewidth=2,
                observed=np.zeros(25, int))
