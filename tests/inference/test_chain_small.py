"""The chain engine's three tiers: numpy for the smallest batches, the per-graph kernel, the lanes.

The numpy pass (``chain.small``) compiles nothing; it must equal the compiled per-graph kernel
and brute-force enumeration, -inf entries and wide ranges included.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.tables import chain_tables
from hypothesis import given, settings
from hypothesis import strategies as st

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.chain import ChainEngine
from pymc_crf.inference.chain.dispatch import forward_backward_features, small_batch
from pymc_crf.inference.chain.features import _forward_backward_features_graphs
from pymc_crf.inference.chain.parts import _forward_backward_lanes
from pymc_crf.inference.chain.per_graph import _forward_backward_graphs
from pymc_crf.inference.chain.small import SMALL_LENGTH, forward_backward_small, is_small

BF = BruteForce()


@st.composite
def problems(draw):
    K = draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(1, 5), min_size=1, max_size=8))
    scale = draw(st.sampled_from([0.5, 3.0, 300.0, 1e4]))
    forbid = draw(st.sampled_from([0.0, 0.2]))
    shared = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    return chain_tables(rng, lengths, K, shared, scale, forbid)


def _rel(a, b):
    return np.abs(a - b).max() / max(1.0, np.abs(b).max()) if a.size else 0.0


@settings(max_examples=60, deadline=None)
@given(problems(), st.booleans())
def test_numpy_pass_equals_kernel_and_brute_force(problem, weighted):
    batch, node, edge = problem
    no, eo = batch.node_offsets, batch.edge_offsets
    gw = np.linspace(-1.0, 2.0, batch.n_graphs) if weighted else np.zeros(0)
    lz, nm, em = forward_backward_small(node, edge, no, eo, True, gw)
    klz, knm, kem = _forward_backward_graphs(node, edge, no, eo, True, gw)
    np.testing.assert_allclose(lz, klz, rtol=1e-11)
    assert nm.shape == knm.shape and em.shape == kem.shape
    assert _rel(nm, knm) < 1e-9 and _rel(em, kem) < 1e-9
    ref = BF.marginals(batch, node, edge)
    np.testing.assert_allclose(lz, ref.log_z, rtol=1e-11)
    if not weighted:
        assert _rel(nm, ref.node) < 1e-9 and _rel(em, ref.edge) < 1e-9
    lz_only, n0, e0 = forward_backward_small(node, edge, no, eo, False, np.zeros(0))
    np.testing.assert_array_equal(lz_only, lz)
    assert n0.shape == (0, node.shape[1]) and e0.shape == (0,) + edge.shape[1:]


def test_impossible_chain_has_log_z_minus_inf_and_zero_marginals():
    batch = GraphBatch.chains([3, 2])
    node = np.zeros((5, 2))
    edge = np.zeros((3, 2, 2))
    edge[0] = -np.inf  # chain 0 cannot pass its first edge
    lz, nm, em = forward_backward_small(node, edge, batch.node_offsets, batch.edge_offsets,
                                        True, np.zeros(0))
    klz, knm, kem = _forward_backward_graphs(node, edge, batch.node_offsets, batch.edge_offsets,
                                             True, np.zeros(0))
    assert lz[0] == -np.inf and klz[0] == -np.inf
    np.testing.assert_allclose(lz[1], np.log(4.0))
    assert np.all(nm[:3] == 0) and np.all(em[:2] == 0)
    np.testing.assert_allclose(nm[3:], knm[3:])


def test_edge_feature_pass_of_a_small_batch_equals_the_feature_kernel():
    rng = np.random.default_rng(5)
    batch = GraphBatch.chains([4, 1, 3])
    K, Fe = 3, 2
    node = rng.normal(size=(batch.n_total_nodes, K))
    Xe = rng.normal(size=(batch.n_edges, Fe))
    We = rng.normal(size=(Fe, K * K))
    gw = np.array([0.5, 1.0, 2.0])
    assert is_small(batch.node_offsets, K)
    lz, nm, gW = forward_backward_features(node, Xe, We, batch.node_offsets,
                                                 batch.edge_offsets, True, gw)
    klz, knm, kgW = _forward_backward_features_graphs(
        node, Xe, We, batch.node_offsets, batch.edge_offsets, True, gw)
    np.testing.assert_allclose(lz, klz, rtol=1e-12)
    np.testing.assert_allclose(nm, knm, atol=1e-12)
    np.testing.assert_allclose(gW, kgW, atol=1e-12)


def test_tiers_by_size():
    """The numpy pass takes the smallest batches with short chains; the per-graph kernel the
    batches below the lanes' threshold; the lanes the rest."""
    K = 2
    assert is_small(GraphBatch.chains([3] * 30).node_offsets, K)         # the demo's training set
    assert not is_small(GraphBatch.chains([SMALL_LENGTH + 1]).node_offsets, K)
    assert not is_small(GraphBatch.chains([3] * 1000).node_offsets, K)
    assert small_batch(3000, K) and not small_batch(100_000, K)
    assert not small_batch(10, None)  # unknown K: the kernels that take any size


@pytest.mark.parametrize("shared", [True, False])
def test_engine_results_agree_across_tiers(shared):
    """The engine's answer does not depend on which tier runs it (one batch, three paths)."""
    rng = np.random.default_rng(7)
    batch = GraphBatch.chains([3, 5, 2, 4])
    K = 3
    node = rng.normal(size=(batch.n_total_nodes, K))
    edge = rng.normal(size=(1 if shared else batch.n_edges, K, K))
    args = (node, edge, batch.node_offsets, batch.edge_offsets, True, np.zeros(0))
    m = ChainEngine().marginals(batch, node, edge)  # numpy tier
    for kernel in (_forward_backward_graphs, _forward_backward_lanes):
        lz, nm, em = kernel(*args)
        np.testing.assert_allclose(m.log_z, lz, rtol=1e-12)
        np.testing.assert_allclose(m.node, nm, atol=1e-12)
        np.testing.assert_allclose(m.edge, em, atol=1e-12)
