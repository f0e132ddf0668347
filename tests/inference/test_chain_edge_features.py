"""Log Z and its gradient from edge features and weights (``log_z_and_feature_marginals``): the
chain engine's kernel, which never forms the (E, K, K) tables, against brute-force enumeration
and against the generic version (tables, marginals, then the feature product)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from helpers.models import node_edge_crf

from pymc_crf.fitters import extract_crf
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import Engine
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.chain import ChainEngine
from pymc_crf.model.objective import CRFLogLikelihood

BF = BruteForce()
CH = ChainEngine()


def _rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if b.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b))))


def _problem(rng, lengths, K, Fe, scale):
    batch = GraphBatch.chains(lengths)
    node = scale * rng.normal(size=(batch.n_total_nodes, K))
    Xe = rng.normal(size=(batch.n_edges, Fe))
    We = scale * rng.normal(size=(Fe, K, K))
    gw = rng.normal(size=batch.n_graphs)
    return batch, node, Xe, We, gw


def _generic(engine, batch, node, Xe, We, gw):
    return Engine.log_z_and_feature_marginals(engine, batch, node, Xe, We, gw)


@pytest.mark.parametrize("scale", [0.5, 30.0, 1e3, 1e4])
@pytest.mark.parametrize("seed", range(4))
def test_matches_brute_force(scale, seed):
    """Ragged small chains (lengths 1-6, so one-edge and single-node chains too), K 1-4, 1-3
    edge features; ranges up to 10^4 send chains to the log-space path."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 7, size=rng.integers(1, 12))
    K, Fe = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    if K ** lengths.max() > 5000:
        K = 2
    batch, node, Xe, We, gw = _problem(rng, lengths, K, Fe, scale)
    lz, gn, gW = CH.log_z_and_feature_marginals(batch, node, Xe, We, gw)
    rz, rn, rW = _generic(BF, batch, node, Xe, We, gw)
    np.testing.assert_allclose(lz, BF.log_partition(batch, node, (Xe @ We.reshape(Fe, -1))
                                                     .reshape(-1, K, K)), rtol=1e-12)
    assert _rel(lz, rz) < 1e-12
    # marginals at ranges of 10^4 carry rounding of 10^4 ulp in their log-space exponents
    tol = 1e-10 if scale <= 30 else 1e-8
    assert _rel(gn, rn) < tol and _rel(gW, rW) < tol * max(1.0, np.abs(Xe).sum())


@pytest.mark.parametrize("scale", [1.0, 400.0])
def test_blocked_unblocked_and_log_space_chains_match_the_table_path(scale):
    """A batch wider than one lane block, with chains longer than the block buffers (K = 10:
    over 81 positions) and, at scale 400, chains whose messages leave the scaled range: every
    route of the kernel against the chain engine's own table path."""
    rng = np.random.default_rng(5)
    lengths = np.concatenate([rng.integers(1, 60, size=150), [90, 200, 2]])
    batch, node, Xe, We, gw = _problem(rng, lengths, 10, 3, 1.0)
    We = scale * We
    got = CH.log_z_and_feature_marginals(batch, node, Xe, We, gw)
    ref = _generic(CH, batch, node, Xe, We, gw)
    for a, b in zip(got, ref, strict=True):
        assert _rel(a, b) < 1e-9
    # without graph weights: the gradient of sum(log Z)
    got1 = CH.log_z_and_feature_marginals(batch, node, Xe, We)
    ref1 = _generic(CH, batch, node, Xe, We, np.ones(batch.n_graphs))
    for a, b in zip(got1, ref1, strict=True):
        assert _rel(a, b) < 1e-9


def test_one_graph_and_edgeless_batches():
    rng = np.random.default_rng(2)
    for lengths in ([7], [1], [1, 1, 1]):
        batch, node, Xe, We, gw = _problem(rng, lengths, 3, 2, 2.0)
        got = CH.log_z_and_feature_marginals(batch, node, Xe, We, gw)
        ref = _generic(BF, batch, node, Xe, We, gw)
        for a, b in zip(got, ref, strict=True):
            assert np.shape(a) == np.shape(b) and _rel(a, b) < 1e-12


def test_sparse_edge_features_take_the_generic_version():
    rng = np.random.default_rng(3)
    batch, node, Xe, We, gw = _problem(rng, [5, 3, 6], 3, 4, 1.0)
    Xe[Xe < 0.3] = 0.0
    got = CH.log_z_and_feature_marginals(batch, node, scipy.sparse.csr_matrix(Xe), We, gw)
    ref = CH.log_z_and_feature_marginals(batch, node, Xe, We, gw)
    for a, b in zip(got, ref, strict=True):
        assert _rel(a, b) < 1e-12


def test_bad_input_is_named():
    rng = np.random.default_rng(4)
    batch, node, Xe, We, gw = _problem(rng, [4, 3], 3, 2, 1.0)
    with pytest.raises(ValueError, match=r"edge features must have shape \(5, Fe\)"):
        CH.log_z_and_feature_marginals(batch, node, Xe[:4], We)
    with pytest.raises(ValueError, match=r"edge weights must have shape \(2, 3, 3\)"):
        CH.log_z_and_feature_marginals(batch, node, Xe, We[:, :2])
    with pytest.raises(ValueError, match="edge weights contain NaN"):
        CH.log_z_and_feature_marginals(batch, node, Xe, np.where(We > 0, np.nan, We))
    with pytest.raises(ValueError, match="edge features contain NaN"):
        CH.log_z_and_feature_marginals(batch, node, np.where(Xe > 0, np.inf, Xe), We)
    with pytest.raises(ValueError, match=r"graph weights must have shape \(2,\)"):
        CH.log_z_and_feature_marginals(batch, node, Xe, We, gw[:1])
    with pytest.raises(ValueError, match="log-potentials contain NaN"):
        CH.log_z_and_feature_marginals(batch, np.full_like(node, np.nan), Xe, We)
    with pytest.raises(ValueError, match="not a canonical chain"):
        loop = GraphBatch.from_edges([np.array([[0, 1], [1, 2], [2, 0]])], [3])
        CH.log_z_and_feature_marginals(loop, np.zeros((3, 3)), np.ones((3, 2)), We)
    # finite features and weights whose products overflow: refused, not a NaN log Z
    big = np.full_like(We, 1e200)
    for lengths in ([4, 3], [6]):  # the lane kernel and the one-graph kernel
        b = GraphBatch.chains(lengths)
        with pytest.raises(ValueError, match="Xe @ We are not finite"):
            CH.log_z_and_feature_marginals(b, np.zeros((b.n_total_nodes, 3)),
                                           np.full((b.n_edges, 2), 1e200), big)


@pytest.mark.parametrize("potential", ["loglinear", "probit"])
def test_objective_takes_the_feature_path_and_matches_the_table_path(potential):
    """``CRFLogLikelihood`` of a chain CRF with per-edge tables from dense edge features: the
    feature path (log-linear only) gives the table path's value and gradient."""
    rng = np.random.default_rng(6)
    batch = GraphBatch.chains(rng.integers(1, 9, size=40))
    spec = extract_crf(node_edge_crf(batch, 3, potential, False, rng))
    lik = CRFLogLikelihood(spec)
    assert lik._feature_path == (potential == "loglinear")
    tables = CRFLogLikelihood(spec)
    tables._feature_path = False
    for scale in (1.0, 50.0):
        w = scale * rng.normal(size=spec.flat_size)
        (v, g), (vr, gr) = lik(w), tables(w)
        assert abs(v - vr) <= 1e-10 * abs(vr)
        assert _rel(g, gr) < 1e-10


@pytest.mark.parametrize("lengths", [[4, 5], [9], [120, 3]])
@pytest.mark.parametrize("big", [1e308, -1e308])
def test_overflowing_tables_are_refused_on_every_path(lengths, big):
    """Finite features and weights whose product overflows to +inf or -inf: refused by the lane
    kernel ([4, 5]), the one-graph kernel ([9]) and the long-chain kernel ([120, 3]) alike."""
    b = GraphBatch.chains(lengths)
    We = np.zeros((1, 2, 2))
    We[0, 0, 1] = big
    with pytest.raises(ValueError, match="Xe @ We are not finite"):
        CH.log_z_and_feature_marginals(b, np.zeros((b.n_total_nodes, 2)),
                                       np.full((b.n_edges, 1), 10.0), We)


@pytest.mark.parametrize("Fe", [4, 5, 9])
def test_many_edge_features_match_the_table_path(Fe):
    """The kernel sums four features per pass: whole passes and a remainder (Fe = 4, 5, 9) on a
    blocked ragged batch, against the chain engine's table path."""
    rng = np.random.default_rng(20 + Fe)
    batch, node, Xe, We, gw = _problem(rng, rng.integers(1, 30, size=70), 4, Fe, 1.0)
    got = CH.log_z_and_feature_marginals(batch, node, Xe, We, gw)
    ref = _generic(CH, batch, node, Xe, We, gw)
    for a, b in zip(got, ref, strict=True):
        assert _rel(a, b) < 1e-10
    np.testing.assert_allclose(CH.feature_log_partition(batch, node, Xe, We), ref[0],
                               rtol=1e-12)


def test_tables_near_overflow_are_tested_and_kept():
    """Features and weights whose products are finite but whose bound (sum_f |Xe| max |We|)
    exceeds the kernel's no-overflow bound: the entry-by-entry test runs, passes, and the
    result equals the table path (every chain then goes to log space)."""
    rng = np.random.default_rng(21)
    batch = GraphBatch.chains([5, 4, 6, 3])
    node = rng.normal(size=(batch.n_total_nodes, 2))
    Xe = np.full((batch.n_edges, 1), 1e299)
    We = rng.uniform(-2.0, 2.0, size=(1, 2, 2))
    got = CH.log_z_and_feature_marginals(batch, node, Xe, We)
    ref = _generic(CH, batch, node, Xe, We, np.ones(batch.n_graphs))
    assert np.isfinite(got[0]).all()
    for a, b in zip(got, ref, strict=True):
        assert np.allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())


def test_zero_edge_features():
    """Edge features with no columns (every table zero): the generic version (brute force,
    sparse features on the chain engine) and the chain kernel agree with zero tables."""
    rng = np.random.default_rng(8)
    b = GraphBatch.chains([3, 2, 4])
    node = rng.normal(size=(b.n_total_nodes, 2))
    ref = BF.log_partition(b, node, np.zeros((b.n_edges, 2, 2)))
    Xe, We = np.zeros((b.n_edges, 0)), np.zeros((0, 2, 2))
    for engine, x in [(BF, Xe), (CH, Xe), (CH, scipy.sparse.csr_matrix(Xe))]:
        lz, gn, gW = engine.log_z_and_feature_marginals(b, node, x, We)
        np.testing.assert_allclose(lz, ref, rtol=1e-12)
        assert gW.shape == (0, 2, 2)


def test_objective_pointwise_on_the_feature_path():
    rng = np.random.default_rng(9)
    batch = GraphBatch.chains(rng.integers(1, 9, size=30))
    spec = extract_crf(node_edge_crf(batch, 3, "loglinear", False, rng))
    lik, tables = CRFLogLikelihood(spec), CRFLogLikelihood(spec)
    tables._feature_path = False
    assert lik._feature_path
    w = 3.0 * rng.normal(size=spec.flat_size)
    np.testing.assert_allclose(lik.pointwise(w), tables.pointwise(w), rtol=1e-12, atol=1e-12)
    assert abs(lik.pointwise(w).sum() - lik(w)[0]) < 1e-9


@pytest.mark.parametrize("scale", [1.0, 400.0])
def test_feature_log_partition_is_the_first_output_without_the_gradient(scale):
    """``feature_log_partition`` (the forward pass alone) against brute force on small chains
    and against ``log_z_and_feature_marginals`` on blocked, long and log-space chains, dense
    and sparse."""
    rng = np.random.default_rng(10)
    b, node, Xe, We, _ = _problem(rng, [4, 1, 3, 5, 2], 3, 2, scale)
    ref = BF.log_partition(b, node, (Xe @ We.reshape(2, -1)).reshape(-1, 3, 3))
    for engine in (BF, CH):
        np.testing.assert_allclose(engine.feature_log_partition(b, node, Xe, We), ref,
                                   rtol=1e-12)
    lengths = np.concatenate([rng.integers(1, 60, size=150), [90, 200]])
    b, node, Xe, We, _ = _problem(rng, lengths, 10, 3, 1.0)
    We = scale * We
    lz = CH.log_z_and_feature_marginals(b, node, Xe, We)[0]
    assert _rel(CH.feature_log_partition(b, node, Xe, We), lz) < 1e-12
    assert _rel(CH.feature_log_partition(b, node, scipy.sparse.csr_matrix(Xe), We), lz) < 1e-9
