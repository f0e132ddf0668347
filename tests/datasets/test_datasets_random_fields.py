"""The Boltzmann-machine data generators of Parise & Welling 2006 and Welling & Parise 2006."""

import numpy as np
import pymc as pm
import pytest

import pymc_crf as pmc
from pymc_crf.inference import BruteForce, JunctionTree


def test_random_structure_parameters_and_seed():
    a = pmc.datasets.parise_welling_random_structure(n_samples=50, seed=4)
    b = pmc.datasets.parise_welling_random_structure(n_samples=50, seed=4)
    c = pmc.datasets.parise_welling_random_structure(n_samples=50, seed=5)
    assert np.array_equal(a.samples, b.samples) and np.array_equal(a.edge_weights, b.edge_weights)
    assert not (np.array_equal(a.graphs.edges, c.graphs.edges)
                and np.array_equal(a.samples, c.samples))
    assert a.samples.shape == (50, 5) and a.parameterization == "boltzmann"
    d, eps = 0.5 / 4, 0.1 / 4
    edge_counts = []
    for seed in range(30):
        data = pmc.datasets.parise_welling_random_structure(n_samples=1, seed=seed)
        w, bias = data.edge_weights, data.node_weights
        assert data.graphs.n_graphs == 1 and 1 <= data.graphs.n_edges <= 10
        assert ((w >= -d) & (w <= -d + eps) | (w >= d) & (w <= d + eps)).all()
        assert ((bias >= -1) & (bias <= 1)).all()
        edge_counts.append(data.graphs.n_edges)
    # G(5, 1/2): 5 edges on average (sd of the mean over 30 graphs ~ 0.29)
    assert 4.0 < np.mean(edge_counts) < 6.0


@pytest.mark.parametrize("parameterization", ["boltzmann", "ising"])
def test_random_structure_samples_follow_the_model(parameterization):
    """Frequencies of 20000 samples against enumeration: total variation below 0.03 (32 states,
    expected TV ~ 0.014 at this N)."""
    data = pmc.datasets.parise_welling_random_structure(
        n_samples=20000, d=1.0 / 4, parameterization=parameterization, seed=1)
    node, edge = data.log_potentials()
    configs = np.indices((2,) * 5).reshape(5, -1).T
    u, v = data.graphs.edges.T
    e = np.arange(data.graphs.n_edges)
    sc = node[np.arange(5), configs].sum(1) + edge[e, configs[:, u], configs[:, v]].sum(1)
    p = np.exp(sc - BruteForce().log_partition(data.graphs, node, edge)[0])
    freq = np.bincount(data.samples @ (2 ** np.arange(4, -1, -1)), minlength=32) / 20000
    assert 0.5 * np.abs(freq - p).sum() < 0.03
    # the tables are the documented ones: 0/1 units or +-1 spins
    s = np.array([0.0, 1.0]) if parameterization == "boltzmann" else np.array([-1.0, 1.0])
    np.testing.assert_allclose(node, data.node_weights[:, None] * s)
    np.testing.assert_allclose(edge, data.edge_weights[:, None, None] * np.outer(s, s))


def test_grid_parameters_samples_and_model():
    data = pmc.datasets.welling_parise_grid(n_samples=4000, seed=2)
    assert data.samples.shape == (4000, 25) and data.graphs.n_edges == 40
    assert data.parameterization == "ising"
    again = pmc.datasets.welling_parise_grid(n_samples=4000, seed=2)
    assert np.array_equal(data.samples, again.samples)
    # weights and biases N(0, 0.25): 65 draws, sample sd within 0.5 +- 0.15
    allw = np.concatenate([data.node_weights, data.edge_weights])
    assert abs(allw.mean()) < 0.2 and 0.35 < allw.std() < 0.65
    # node marginals of the samples against the junction tree (4000 draws: sd <= 0.008)
    node, edge = data.log_potentials()
    m = JunctionTree().marginals(data.graphs, node, edge)
    np.testing.assert_allclose(data.samples.mean(0), m.node[:, 1], atol=0.035)
    with pm.Model(coords=data.coords) as model:
        b = pm.Normal("b", 0.0, 0.5, dims="node")
        w = pm.Normal("w", 0.0, 0.5, dims="edge")
        pmc.MRF("x", graphs=data.graphs, node_weights=b, edge_weights=w,
                parameterization=data.parameterization, observed=data.samples,
                dims=data.dims["samples"])
    assert model["x"].owner.op.engine.name == "junction_tree"


@pytest.mark.parametrize("make, kwargs, message", [
    ("parise_welling_random_structure", {"parameterization": "potts"}, "'boltzmann' or 'ising'"),
    ("parise_welling_random_structure", {"edge_prob": 0.0}, "edge_prob"),
    ("welling_parise_grid", {"sd": 0.0}, "sd must be a number > 0"),
    # counts are whole numbers: 2.5 samples are refused, not drawn as 2
    ("parise_welling_random_structure", {"n_samples": 2.5},
     "n_samples must be an integer >= 1; got 2.5"),
    ("welling_parise_grid", {"n_samples": 3.9}, "n_samples must be an integer >= 1; got 3.9"),
    ("welling_parise_grid", {"rows": 2.5}, "rows must be an integer >= 1; got 2.5"),
    ("parise_welling_random_structure", {"n_nodes": 1}, "n_nodes must be an integer >= 2; got 1"),
    ("parise_welling_random_structure", {"n_nodes": 21},
     r"n_nodes=21: the samples are exact by enumerating all 2\^n_nodes labellings, .* up to "
     "n_nodes=20"),
])
def test_bad_generator_arguments(make, kwargs, message):
    with pytest.raises(ValueError, match=message):
        getattr(pmc.datasets, make)(**kwargs)
