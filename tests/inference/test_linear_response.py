"""Linear-response covariance: exact on trees, symmetric PSD and = d(beliefs)/d(theta) on loops."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.bethe import bethe_covariance_products
from pymc_crf.inference.bp import BeliefPropagation
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.linear_response import (
    linear_response_matrix,
    linear_response_vector_product,
)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10**6), K=st.integers(2, 3), shared=st.booleans())
def test_dense_matrix_exact_on_trees(seed, K, shared):
    rng = np.random.default_rng(seed)
    b = GraphBatch.from_networkx([nx.random_labeled_tree(int(rng.integers(2, 7)), seed=seed),
                                  nx.path_graph(4)])
    node = rng.normal(0, 1.5, (b.n_total_nodes, K))
    edge = rng.normal(0, 1.5, (1 if shared else b.n_edges, K, K))
    for g in range(2):
        got = linear_response_matrix(b, node, edge, graph=g, symmetrise=False)
        exact = BruteForce().feature_covariance(b, node, edge, graph=g)
        np.testing.assert_allclose(got, exact, atol=1e-8)


def test_vector_product_exact_on_trees_whole_batch():
    rng = np.random.default_rng(0)
    b = GraphBatch.from_networkx([nx.random_labeled_tree(6, seed=1), nx.star_graph(4),
                                  nx.path_graph(3), nx.empty_graph(1)])
    K = 3
    node = rng.normal(size=(b.n_total_nodes, K))
    edge = rng.normal(size=(b.n_edges, K, K))
    vn, ve = rng.normal(size=node.shape), rng.normal(size=edge.shape)
    got = linear_response_vector_product(b, node, edge, vn, ve)
    exact = BruteForce().covariance_vector_product(b, node, edge, vn, ve)
    np.testing.assert_allclose(got[0], exact[0], atol=1e-8)
    np.testing.assert_allclose(got[1], exact[1], atol=1e-8)
    # The engine's own method (the Engine interface the Hessian Op calls) is exact here too,
    # also with a shared edge table, where the product is summed over edges.
    eng = BeliefPropagation(tol=1e-12)
    for tab, v_tab in ((edge, ve), (edge[:1], ve[:1])):
        cn, ce = eng.covariance_vector_product(b, node, tab, vn, v_tab)
        en, ee = BruteForce().covariance_vector_product(b, node, tab, vn, v_tab)
        np.testing.assert_allclose(cn, en, atol=1e-8)
        np.testing.assert_allclose(ce, ee, atol=1e-8)
    np.testing.assert_allclose(eng.feature_covariance(b, node, edge, graph=1),
                               BruteForce().feature_covariance(b, node, edge, graph=1), atol=1e-8)


def _loopy(seed, K, coupling):
    rng = np.random.default_rng(seed)
    b = GraphBatch.from_networkx([nx.grid_2d_graph(3, 3), nx.complete_graph(4)])
    node = rng.normal(0, 1, (b.n_total_nodes, K))
    edge = rng.normal(0, coupling, (b.n_edges, K, K))
    return b, node, edge


@pytest.mark.parametrize("K", [2, 3])
def test_loopy_symmetric_psd_and_close_to_exact(K):
    b, node, edge = _loopy(7, K, 0.3)
    for g in range(2):
        raw = linear_response_matrix(b, node, edge, graph=g, symmetrise=False)
        assert np.abs(raw - raw.T).max() < 1e-8  # Hessian of the Bethe free energy
        assert np.linalg.eigvalsh(0.5 * (raw + raw.T)).min() > -1e-9
        exact = BruteForce().feature_covariance(b, node, edge, graph=g)
        err = np.abs(raw - exact).max()
        assert 1e-7 < err < 2e-2  # an approximation on loops, but a close one


def test_loopy_equals_finite_difference_of_bp_beliefs():
    b, node, edge = _loopy(8, 3, 0.4)
    rng = np.random.default_rng(1)
    vn, ve = rng.normal(size=node.shape), rng.normal(size=edge.shape)
    bp = BeliefPropagation(tol=1e-13, max_iter=5000)
    dn, de = linear_response_vector_product(b, node, edge, vn, ve, bp=bp)
    h = 1e-5
    up = bp.marginals(b, node + h * vn, edge + h * ve)
    lo = bp.marginals(b, node - h * vn, edge - h * ve)
    np.testing.assert_allclose(dn, (up.node - lo.node) / (2 * h), atol=1e-7)
    np.testing.assert_allclose(de, (up.edge - lo.edge) / (2 * h), atol=1e-7)


@pytest.mark.parametrize("K, shared", [(2, False), (3, True)])
def test_many_directions_by_one_sparse_lu_equal_finite_differences(K, shared):
    """bethe_covariance_products (one sparse LU for all directions) on a batch of loopy grids
    with strong couplings: each direction's belief derivatives equal central differences of the
    BP beliefs, and the per-direction GMRES product."""
    b = GraphBatch.grid(4, 5, n_graphs=3)
    rng = np.random.default_rng(K)
    node = rng.normal(size=(b.n_total_nodes, K))
    edge = rng.normal(0, 0.8, (1 if shared else b.n_edges, K, K))
    bp = BeliefPropagation(tol=1e-13, max_iter=20000)
    dirs = [(rng.normal(size=node.shape), rng.normal(size=edge.shape)) for _ in range(3)]
    out = bethe_covariance_products(b, node, edge, dirs, bp)
    h = 1e-5
    for (vn, ve), (dn, de) in zip(dirs, out, strict=True):
        up = bp.marginals(b, node + h * vn, edge + h * ve)
        lo = bp.marginals(b, node - h * vn, edge - h * ve)
        fd_edge = (up.edge - lo.edge) / (2 * h)
        np.testing.assert_allclose(dn, (up.node - lo.node) / (2 * h), atol=1e-6)
        np.testing.assert_allclose(de, fd_edge.sum(axis=0, keepdims=True) if shared else fd_edge,
                                   atol=1e-6)
        gn, ge = linear_response_vector_product(b, node, edge, vn, ve, bp=bp)
        np.testing.assert_allclose(dn, gn, atol=1e-10)
        np.testing.assert_allclose(de, ge, atol=1e-10)


def test_bad_direction():
    b, node, edge = _loopy(0, 2, 0.3)
    with pytest.raises(ValueError, match="direction"):
        linear_response_vector_product(b, node, edge, np.zeros((3, 2)), np.zeros_like(edge))
    with pytest.raises(ValueError, match="NaN"):
        linear_response_vector_product(b, node, edge, np.full(node.shape, np.nan),
                                       np.zeros_like(edge))
    with pytest.raises(ValueError, match="out of range"):
        linear_response_matrix(b, node, edge, graph=5)
