"""``inference="bethe"`` through the LogPartition Op and the CRF distribution."""

import warnings

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.gradient import verify_grad

import pymc_crf as pmc
from pymc_crf.inference import BruteForce


def test_bethe_is_exact_on_trees(rng):
    b = pmc.GraphBatch.from_edges([[(0, 1), (0, 2), (2, 3)], [(0, 1)]], [4, 2])
    node = rng.normal(size=(b.n_total_nodes, 3))
    edge = rng.normal(size=(b.n_edges, 3, 3))
    N, E = pt.dmatrix(), pt.tensor3()
    with warnings.catch_warnings():  # exact on a forest, so not warned as approximate
        warnings.simplefilter("error", pmc.ApproximateInferenceWarning)
        lz = pmc.log_partition(N, E, b, inference="bethe")
    f = pytensor.function([N, E], [lz, pytensor.grad(lz.sum(), N)], mode="FAST_COMPILE")
    val, g = f(node, edge)
    bf = BruteForce().marginals(b, node, edge)
    np.testing.assert_allclose(val, bf.log_z, rtol=1e-8)
    np.testing.assert_allclose(g, bf.node, atol=1e-8)


def test_bethe_gradient_on_loopy_graph_matches_finite_differences(rng):
    b = pmc.GraphBatch.grid(3, 3)
    node = rng.normal(size=(9, 2)) * 0.5
    edge = rng.normal(size=(b.n_edges, 2, 2)) * 0.3
    with pytest.warns(pmc.ApproximateInferenceWarning):
        verify_grad(lambda n, e: pmc.log_partition(n, e, b, inference="bethe").sum(),
                    [node, edge], rng=rng, abs_tol=1e-5, rel_tol=1e-5)


@pytest.mark.slow  # compiles the BP Op's logp and gradient (~14 s with empty caches)
def test_auto_falls_back_to_bp_and_results_say_approximate(rng):
    b = pmc.GraphBatch.grid(12, 12)
    y = rng.integers(0, 2, size=144)
    with pm.Model() as m, pytest.warns(pmc.ApproximateInferenceWarning, match="treewidth"):
        T = pm.Normal("T", 0, 1, shape=(2, 2))
        pmc.CRF("y", graphs=b, edge_weights=T, observed=y, max_treewidth=8)
    res = pmc.fit(m, method="map")
    assert res.attrs["log_z"] == "approximate (bp)"
    assert np.isfinite(res["log_likelihood"]["y"].values).all()
