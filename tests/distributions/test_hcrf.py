"""HCRF distribution: logp against brute-force enumeration, gradients, sampling, NUTS, bad input."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from helpers.brute_force import hcrf_class_log_probs
from scipy import sparse

from pymc_crf.datasets.hmm import HMM_TRANSITIONS, hmm_classes
from pymc_crf.distributions.hcrf import HCRF, class_log_probs, from_sequences, hcrf_logp
from pymc_crf.graphs.batch import GraphBatch, GraphStructureError

# The Python linker calls the Op's perform (the engine's cached numba kernels) and skips compiling
# the whole graph with numba, which dominates the run time of these small tests.
FAST = "FAST_COMPILE"


def random_problem(rng, lengths, F=2, S=3, C=3, scale=1.0, loopy=False):
    if loopy:
        batch = GraphBatch.from_edges([[(0, 1), (1, 2), (2, 0)], [(0, 1)]], [3, 2])
    else:
        batch = GraphBatch.chains(lengths)
    X = rng.normal(size=(batch.n_total_nodes, F))
    tx = rng.normal(scale=scale, size=(F, S))
    ty = rng.normal(scale=scale, size=(S, C))
    te = rng.normal(scale=scale, size=(S, S, C))
    return batch, X, tx, ty, te


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_logp_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    batch, X, tx, ty, te = random_problem(rng, [1, 3, 4], scale=1.5)
    ref = hcrf_class_log_probs(batch, X, tx, ty, te)
    y = rng.integers(0, 3, size=batch.n_graphs)
    vy = pt.lvector("y")
    f = pytensor.function([vy], hcrf_logp(vy, tx, ty, te, batch=batch, node_features=X,
                                          n_classes=3), mode=FAST)
    np.testing.assert_allclose(f(y), ref[np.arange(batch.n_graphs), y], rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(class_log_probs(batch, X, tx, ty, te), ref, atol=1e-10)


def test_logp_loopy_graphs_match_brute_force():
    rng = np.random.default_rng(5)
    batch, X, tx, ty, te = random_problem(rng, None, S=2, C=2, loopy=True)
    ref = hcrf_class_log_probs(batch, X, tx, ty, te)
    np.testing.assert_allclose(class_log_probs(batch, X, tx, ty, te), ref, atol=1e-10)


def test_model_logp_per_graph_and_total():
    rng = np.random.default_rng(3)
    batch, X, tx, ty, te = random_problem(rng, [2, 3], S=2, C=3)
    y = np.array([2, 0])
    with pm.Model() as model:
        HCRF("y", graphs=batch, node_features=X, theta_x=tx, theta_y=ty, theta_e=te, observed=y)
    ref = hcrf_class_log_probs(batch, X, tx, ty, te)[np.arange(2), y]
    per_graph = model.compile_logp(sum=False, mode=FAST)({})[0]
    np.testing.assert_allclose(per_graph, ref, atol=1e-10)


def test_gradients_verify_grad():
    rng = np.random.default_rng(4)
    batch, X, tx, ty, te = random_problem(rng, [2, 3, 1], S=3, C=2)
    y = np.array([1, 0, 1])

    def f(a, b, c):
        return hcrf_logp(y, a, b, c, batch=batch, node_features=X, n_classes=2).sum()

    pytensor.gradient.verify_grad(f, [tx, ty, te], rng=np.random.default_rng(0), eps=1e-6)


def test_random_matches_class_probabilities():
    rng = np.random.default_rng(6)
    batch, X, tx, ty, te = random_problem(rng, [3, 2], S=2, C=3, scale=1.0)
    p = np.exp(hcrf_class_log_probs(batch, X, tx, ty, te))
    rv = HCRF.dist(graphs=batch, node_features=X, theta_x=tx, theta_y=ty, theta_e=te)
    draws = pm.draw(rv, draws=4000, random_seed=1)
    assert draws.shape == (4000, 2)
    for g in range(2):
        freq = np.bincount(draws[:, g], minlength=3) / 4000
        # 4000 draws: sd of a frequency <= 0.008
        np.testing.assert_allclose(freq, p[g], atol=0.035)


def test_bad_input_errors():
    rng = np.random.default_rng(0)
    batch, X, tx, ty, te = random_problem(rng, [2, 3], S=2, C=3)
    kw = dict(graphs=batch, node_features=X, theta_x=tx, theta_y=ty, theta_e=te)
    with pm.Model(), pytest.raises(ValueError, match="outside the classes 0..2"):
        HCRF("y", observed=np.array([0, 3]), **kw)
    with pm.Model(), pytest.raises(ValueError, match="one class per graph"):
        HCRF("y", observed=np.array([0, 1, 2]), **kw)
    with pm.Model(), pytest.raises(ValueError, match="theta_e must have shape"):
        HCRF("y", observed=np.array([0, 1]), **(kw | {"theta_e": np.zeros((2, 2, 2))}))
    with pm.Model(), pytest.raises(ValueError, match="theta_x must have shape"):
        HCRF("y", observed=np.array([0, 1]), **(kw | {"theta_x": np.zeros((3, 2))}))
    with pm.Model(), pytest.raises(ValueError, match="node features must have shape"):
        HCRF("y", observed=np.array([0, 1]), **(kw | {"node_features": X[:-1]}))
    # theta_y with a wrong number of states is named, against the 2 states theta_x and theta_e
    # agree on (the number of states was read from theta_y alone, and theta_x was blamed)
    with pm.Model(), pytest.raises(ValueError, match=r"theta_y must have shape \(2, 3\) "
                                                     r"\(features=2, n_states=2, .*got \(3, 3\)"):
        HCRF("y", observed=np.array([0, 1]), **(kw | {"theta_y": np.zeros((3, 3))}))
    with pm.Model(), pytest.raises(TypeError, match="HCRF: node_features must be a dense array; "
                                                    "got a scipy.sparse matrix"):
        HCRF("y", observed=np.array([0, 1]), **(kw | {"node_features": sparse.csr_array(X)}))
    with pm.Model(), pytest.raises(ValueError, match="unknown inference 'nosuch'"):
        HCRF("y", observed=np.array([0, 1]), inference="nosuch", **kw)  # at build, as CRF's
    with pytest.raises(ValueError, match="sequence 1 has length 0"):
        from_sequences([np.zeros((3, 2)), np.zeros((0, 2))])
    with pytest.raises(GraphStructureError, match=">= 1"):
        GraphBatch.chains([3, 0])


def test_weights_with_dims_are_checked_against_n_states_and_n_classes():
    """Weights with dims have no static shape: sizes that disagree with n_states / n_classes are
    named where the logp runs, by the fitters and by the draws (a wrong n_states gave a correct
    logp but a whole bp_hcrf_vi fit with the wrong number of states, then an xarray error)."""
    import pymc_crf as pmc

    rng = np.random.default_rng(0)
    batch, X, *_ = random_problem(rng, [2, 3], S=3, C=3)
    def build(n_states):
        """Weights with 3 states by their dims; the HCRF told ``n_states``."""
        coords = {"f": range(2), "s": range(3), "s2": range(3), "c": range(3)}
        with pm.Model(coords=coords) as model:
            tx = pm.Normal("tx", 0, 1, dims=("f", "s"))
            ty = pm.Normal("ty", 0, 1, dims=("s", "c"))
            te = pm.Normal("te", 0, 1, dims=("s", "s2", "c"))
            HCRF("y", graphs=batch, node_features=X, theta_x=tx, theta_y=ty, theta_e=te,
                 n_states=n_states, n_classes=3, observed=np.array([0, 1]))
        return model

    model = build(2)
    msg = r"HCRF: theta_x must have shape \(2, 2\) \(features=2, n_states=2, n_classes=3\)"
    # the compiled logp checks all three weights, in whatever order it runs them
    with pytest.raises(ValueError, match=r"HCRF: theta_[xye] must have shape .*\(features=2, "
                                             r"n_states=2, n_classes=3\)"):
        model.compile_logp(mode=FAST)(model.initial_point())
    with pytest.raises(ValueError, match=msg + r"; got \(2, 3\)"):
        pmc.fit(model, method="bp_hcrf_vi", progressbar=False)
    with pytest.raises(ValueError, match=msg + r"; got \(2, 3\)"):
        # shared variables: no static shape, so the draw itself checks
        pm.draw(HCRF.dist(graphs=batch, node_features=X,
                          theta_x=pytensor.shared(np.zeros((2, 3))),
                          theta_y=pytensor.shared(np.zeros((3, 3))),
                          theta_e=pytensor.shared(np.zeros((3, 3, 3))), n_states=2,
                          n_classes=3), mode=FAST)
    # the right sizes pass
    good = build(3)
    assert np.isfinite(good.compile_logp(mode=FAST)(good.initial_point()))



def test_a_graph_dim_of_another_length_is_refused_when_the_model_is_built():
    """A dim's length is symbolic in PyMC: a "graph" coord of the wrong length built a model
    that sampled and then failed in ArviZ ("conflicting sizes for dimension 'graph'")."""
    rng = np.random.default_rng(0)
    batch, X, tx, ty, te = random_problem(rng, [2, 3], S=2, C=3)
    kw = dict(graphs=batch, node_features=X, theta_x=tx, theta_y=ty, theta_e=te)
    with pm.Model(coords={"graph": range(3)}):
        with pytest.raises(ValueError, match=r"has shape \(2,\) .*dims give \(3,\)"):
            HCRF("y", **kw, observed=np.array([0, 1]), dims="graph")
    with pm.Model(coords={"graph": range(2)}):
        HCRF("y", **kw, observed=np.array([0, 1]), dims="graph")

@pytest.mark.parametrize("bad", [-1, 3])
def test_data_labels_out_of_range_raise(bad):
    """Class labels in pm.Data can change after the model is built: the compiled logp and the
    fitters name a label outside 0..C-1 (no wrap-around of -1, no read past log Z)."""
    from pymc.logprob.utils import ParameterValueError

    import pymc_crf as pmc

    rng = np.random.default_rng(0)
    batch, X, *_ = random_problem(rng, [2, 3], S=2, C=3)
    with pm.Model() as model:
        y = pm.Data("y", np.array([0, 2]))
        tx = pm.Normal("theta_x", 0.0, 1.0, shape=(2, 2))
        ty = pm.Normal("theta_y", 0.0, 1.0, shape=(2, 3))
        te = pm.Normal("theta_e", 0.0, 1.0, shape=(2, 2, 3))
        HCRF("c", graphs=batch, node_features=X, theta_x=tx, theta_y=ty, theta_e=te, observed=y)
    pm.set_data({"y": np.array([0, bad])}, model=model)
    with pytest.raises(ParameterValueError, match="HCRF class labels must lie in 0..2"):
        model.compile_logp()(model.initial_point())
    for method in ("map", "bp_hcrf_vi"):
        with pytest.raises(ValueError, match=f"HCRF label {bad} of graph 1 is outside"):
            pmc.fit(model, method=method, progressbar=False)


def test_from_sequences_round_trip():
    seqs = [np.arange(6.0).reshape(3, 2), np.ones((1, 2))]
    batch, X = from_sequences(seqs)
    assert batch.is_chain and list(batch.n_nodes) == [3, 1]
    np.testing.assert_array_equal(X[3], [1.0, 1.0])


def test_hmm_classes_dataset():
    train, test = hmm_classes(n_train_per_class=3, n_test_per_class=4, T=20, seed=1)
    assert train.graphs.n_graphs == 9 and test.graphs.n_graphs == 12
    assert train.node_features.shape == (180, 2) and train.n_classes == 3
    np.testing.assert_array_equal(np.bincount(train.labels), [3, 3, 3])
    for A in HMM_TRANSITIONS:
        np.testing.assert_allclose(A.sum(axis=1), 1.0)
    np.testing.assert_allclose(HMM_TRANSITIONS[1][1], np.array([1, 1, 7, 4]) / 13)
    # each class only visits its own four states; h1, h2 are shared
    allowed = [{0, 1, 2, 3}, {0, 1, 4, 5}, {0, 1, 6, 7}]
    node_class = train.labels[train.graphs.node_graph]
    for c in range(3):
        assert set(np.unique(train.hidden_states[node_class == c])) <= allowed[c]
    again, _ = hmm_classes(n_train_per_class=3, n_test_per_class=4, T=20, seed=1)
    np.testing.assert_array_equal(again.raw, train.raw)
    with pytest.raises(ValueError, match="T must be an integer >= 1"):
        hmm_classes(T=0)
    with pytest.raises(ValueError, match="features must be"):
        hmm_classes(features="cubic")


@pytest.mark.heavy_smoke  # compiles both NUTS backends: CI runs it after the default suite
def test_nuts_small_hcrf_few_divergences():
    train, _ = hmm_classes(n_train_per_class=2, n_test_per_class=1, T=6, seed=2)
    with pm.Model():
        tx = pm.Normal("tx", 0, 1, shape=(2, 2))
        ty = pm.Normal("ty", 0, 1, shape=(2, 3))
        te = pm.Normal("te", 0, 1, shape=(2, 2, 3))
        HCRF("y", graphs=train.graphs, node_features=train.node_features, theta_x=tx,
             theta_y=ty, theta_e=te, observed=train.labels)
        idata = pm.sample(100, tune=100, chains=2, cores=1, progressbar=False, random_seed=3,
                          nuts_sampler="pymc", compute_convergence_checks=False,
                          compile_kwargs={"mode": FAST})
        pm.compute_log_likelihood(idata, progressbar=False)
        ppc = pm.sample_posterior_predictive(idata, progressbar=False, random_seed=4)
    assert int(idata.sample_stats["diverging"].sum()) <= 5
    assert idata.log_likelihood["y"].shape == (2, 100, 6)
    assert ppc.posterior_predictive["y"].shape == (2, 100, 6)
    assert np.isfinite(idata.log_likelihood["y"].values).all()
