"""ChainEngine against brute-force enumeration on random chains (hypothesis property tests)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.tables import chain_tables
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.chain import ChainEngine
from pymc_crf.inference.chain.parts import _forward_backward_lanes
from pymc_crf.inference.chain.scaling import _exp_nonpos

BF = BruteForce()
CH = ChainEngine()
SETTINGS = settings(max_examples=25, deadline=None)


@st.composite
def chain_problems(draw, max_scale=20.0, max_len=6):
    """A batch of 1-3 chains (lengths 1..max_len), K in 2..4, shared or per-edge tables."""
    K = draw(st.integers(2, 4))
    lengths = draw(st.lists(st.integers(1, max_len), min_size=1, max_size=3))
    scale = draw(st.floats(0.1, max_scale))
    shared = draw(st.booleans())
    seed = draw(st.integers(0, 2**31 - 1))
    return chain_tables(np.random.default_rng(seed), lengths, K, shared, scale)


def _rel(a, b):
    if np.size(b) == 0:
        return 0.0 if np.size(a) == 0 else np.inf
    return np.max(np.abs(np.asarray(a) - np.asarray(b)) / np.maximum(1.0, np.abs(np.asarray(b))))


@SETTINGS
@given(chain_problems())
def test_log_partition_and_marginals_match_brute_force(problem):
    batch, node, edge = problem
    ref = BF.marginals(batch, node, edge)
    lz = CH.log_partition(batch, node, edge)
    m = CH.marginals(batch, node, edge)
    np.testing.assert_allclose(lz, ref.log_z, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(m.log_z, ref.log_z, rtol=1e-9, atol=1e-12)
    assert _rel(m.node, ref.node) < 1e-9
    assert m.edge.shape == ref.edge.shape
    assert _rel(m.edge, ref.edge) < 1e-9


@SETTINGS
@given(chain_problems(), st.integers(0, 2**31 - 1))
def test_weighted_marginals(problem, seed):
    batch, node, edge = problem
    w = np.random.default_rng(seed).normal(size=batch.n_graphs)
    ref = BF.weighted_marginals(batch, node, edge, w)  # generic version: per-edge weights, then sum
    gn, ge = CH.weighted_marginals(batch, node, edge, w)
    assert _rel(gn, ref[0]) < 1e-9 and _rel(ge, ref[1]) < 1e-9
    lz, gn, ge = CH.log_z_and_weighted_marginals(batch, node, edge, w)
    assert _rel(lz, BF.log_partition(batch, node, edge)) < 1e-9
    assert _rel(gn, ref[0]) < 1e-9 and _rel(ge, ref[1]) < 1e-9


# The closures over ``_forward_backward_from_numba`` (n_labels unknown) link the whole lane-block
# family: about 80 s of CPU to compile cold, so that form is in the slow run; the default run
# checks the graph-by-graph closures the compiled Ops of small batches use, and test_threads
# checks ``_forward_backward_from_numba`` itself on a large batch against the engine (its
# closures there are in the slow run too).
@pytest.mark.parametrize("n_labels", [3, pytest.param(None, marks=pytest.mark.slow)])
def test_numba_kernels(n_labels):
    """The njit closures used by the PyTensor Ops (compiled once: a fixed batch, several tables)."""
    batch = GraphBatch.chains([4, 1, 3, 5])
    log_z, vjp = CH.numba_kernels(batch, n_labels)
    rng = np.random.default_rng(7)
    for scale, shared in [(1.0, True), (20.0, False), (20.0, True), (500.0, False)]:
        node = scale * rng.normal(size=(batch.n_total_nodes, 3))
        edge = scale * rng.normal(size=(1 if shared else batch.n_edges, 3, 3))
        w = rng.normal(size=batch.n_graphs)
        ref = BF.weighted_marginals(batch, node, edge, w)
        np.testing.assert_allclose(log_z(node, edge), BF.log_partition(batch, node, edge),
                                   rtol=1e-9)
        lz, kn, ke = vjp(node, edge, w)
        np.testing.assert_allclose(lz, BF.log_partition(batch, node, edge), rtol=1e-9)
        assert _rel(kn, ref[0]) < 1e-9 and _rel(ke, ref[1]) < 1e-9


@SETTINGS
@given(chain_problems())
def test_map_assignment_matches_brute_force(problem):
    batch, node, edge = problem
    ref = BF.map_assignment(batch, node, edge)
    got = CH.map_assignment(batch, node, edge)
    np.testing.assert_allclose(got.score, ref.score, rtol=1e-12, atol=1e-9)
    # The labels may differ on exact ties; their score must be the best one.
    t = got.labels
    score = np.zeros(batch.n_graphs)
    np.add.at(score, batch.node_graph, node[np.arange(batch.n_total_nodes), t])
    rows = np.zeros(batch.n_edges, np.int64) if edge.shape[0] == 1 else np.arange(batch.n_edges)
    u, v = batch.edges[:, 0], batch.edges[:, 1]
    np.add.at(score, batch.edge_graph, edge[rows, t[u], t[v]])
    np.testing.assert_allclose(score, ref.score, rtol=1e-12, atol=1e-9)


@settings(max_examples=15, deadline=None)
@given(chain_problems(max_scale=3.0, max_len=4), st.integers(0, 2**31 - 1))
def test_covariance_dense_and_products(problem, seed):
    batch, node, edge = problem
    g = int(np.random.default_rng(seed).integers(batch.n_graphs))
    ref = BF.feature_covariance(batch, node, edge, graph=g)
    got = CH.feature_covariance(batch, node, edge, graph=g)
    np.testing.assert_allclose(got, ref, rtol=1e-8, atol=1e-10)
    rng = np.random.default_rng(seed + 1)
    vn, ve = rng.normal(size=node.shape), rng.normal(size=edge.shape)
    rn, re = BF.covariance_vector_product(batch, node, edge, vn, ve)
    cn, ce = CH.covariance_vector_product(batch, node, edge, vn, ve)
    np.testing.assert_allclose(cn, rn, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ce, re, rtol=1e-8, atol=1e-10)


@settings(max_examples=8, deadline=None)
@given(chain_problems(max_scale=2.0, max_len=4), st.integers(0, 2**31 - 1))
def test_ffbs_frequencies_chi_square(problem, seed):
    batch, node, edge = problem
    g = 0
    sub = batch.subset([g])
    nn = node[batch.node_index([g])]
    ee = edge if edge.shape[0] == 1 else edge[batch.edge_index([g])]
    K, n = node.shape[1], int(sub.n_total_nodes)
    S = 20000
    draws = CH.sample(sub, nn, ee, S, rng=seed)
    codes = draws @ (K ** np.arange(n)[::-1])
    counts = np.bincount(codes, minlength=K**n)
    # Exact probabilities in the same code order (brute force enumerates with np.indices).
    configs = np.indices((K,) * n).reshape(n, -1).T
    lp = nn[np.arange(n), configs].sum(1)
    if n > 1:
        rows = np.zeros(n - 1, np.int64) if ee.shape[0] == 1 else np.arange(n - 1)
        lp = lp + ee[rows, configs[:, :-1], configs[:, 1:]].sum(1)
    p = np.exp(lp - lp.max())
    p /= p.sum()
    expected = S * p
    keep = expected > 5  # pool the rare cells so the chi-square approximation holds
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
        assert counts[~keep].sum() == 0
    if obs.size > 1:
        assert chisquare(obs, exp).pvalue > 1e-4


def test_underflow_falls_back_to_log_space():
    """Scale 500: the scaled recursion underflows; the log-space fallback must still be exact."""
    rng = np.random.default_rng(3)
    batch = GraphBatch.chains([5, 3, 4])
    for shared in (True, False):
        node = 500 * rng.normal(size=(batch.n_total_nodes, 3))
        edge = 500 * rng.normal(size=(1 if shared else batch.n_edges, 3, 3))
        # Force a node row whose useful labels are ~1e-300 below its best one (scale underflow).
        node[1] = [0.0, -800.0, -800.0]
        edge_pen = edge.copy()
        edge_pen[0, :, 0] = 1000.0
        for e in (edge, edge_pen):
            ref = BF.marginals(batch, node, e)
            m = CH.marginals(batch, node, e)
            np.testing.assert_allclose(m.log_z, ref.log_z, rtol=1e-9)
            assert _rel(m.node, ref.node) < 1e-9 and _rel(m.edge, ref.edge) < 1e-9


def test_forbidden_transitions():
    """-inf log-potentials (forbidden transitions / labels) are exact, incl. an impossible chain."""
    rng = np.random.default_rng(4)
    batch = GraphBatch.chains([4, 3])
    K = 3
    node = rng.normal(size=(batch.n_total_nodes, K))
    edge = rng.normal(size=(1, K, K))
    edge[0, 0, 1] = edge[0, 2, 0] = -np.inf  # a sparse transition structure
    node[2, 1] = -np.inf
    for e in (edge, np.repeat(edge, batch.n_edges, 0)):
        ref = BF.marginals(batch, node, e)
        m = CH.marginals(batch, node, e)
        np.testing.assert_allclose(m.log_z, ref.log_z, rtol=1e-9)
        assert _rel(m.node, ref.node) < 1e-9 and _rel(m.edge, ref.edge) < 1e-9
        assert np.all(m.edge[..., 0, 1] == 0)
        mp = CH.map_assignment(batch, node, e)
        np.testing.assert_allclose(mp.score, BF.map_assignment(batch, node, e).score)
    # No allowed path at all in graph 1: log Z = -inf there, graph 0 unaffected.
    imp = np.full((1, K, K), -np.inf)
    e_full = np.repeat(edge, batch.n_edges, 0)
    e_full[3:] = imp
    lz = CH.log_partition(batch, node, e_full)
    assert lz[1] == -np.inf
    np.testing.assert_allclose(lz[0], BF.log_partition(batch, node, e_full)[0], rtol=1e-9)


def test_exp_kernel_accuracy():
    x = np.concatenate([[-np.inf, 0.0, -1e-300, -707.9, -709.0],
                        -np.abs(np.random.default_rng(0).normal(scale=50, size=10000))])
    out = np.empty_like(x)
    _exp_nonpos(x, out, np.empty_like(x), x.size)
    ref = np.exp(x)
    big = ref > 1e-300
    assert np.max(np.abs(out[big] - ref[big]) / ref[big]) < 1e-15
    assert out[0] == 0.0 and out[4] == 0.0


def test_long_chain_log_z_without_overflow():
    """A chain of 5000 positions: the scale product is flushed into the log, no overflow."""
    rng = np.random.default_rng(5)
    batch = GraphBatch.chains([5000])
    node = 3 * rng.normal(size=(5000, 4))
    edge = rng.normal(size=(1, 4, 4))
    lz = _forward_backward_lanes(node, edge, batch.node_offsets, batch.edge_offsets, False,
                                 np.zeros(0))[0]
    # Log-space reference through the fallback kernel of the same module.
    la = node[0].copy()
    for t in range(1, 5000):
        m = la[:, None] + edge[0]
        mx = m.max(0)
        la = node[t] + mx + np.log(np.exp(m - mx).sum(0))
    ref = la.max() + np.log(np.exp(la - la.max()).sum())
    np.testing.assert_allclose(lz[0], ref, rtol=1e-11)


def test_rejects_bad_input():
    batch = GraphBatch.chains([3])
    with pytest.raises(ValueError, match="NaN"):
        CH.log_partition(batch, np.full((3, 2), np.nan), np.zeros((1, 2, 2)))
    with pytest.raises(ValueError, match="shape"):
        CH.marginals(batch, np.zeros((4, 2)), np.zeros((1, 2, 2)))
    loop = GraphBatch.from_edges([np.array([[0, 1], [1, 2], [0, 2]])], [3])
    with pytest.raises(ValueError, match="not a canonical"):
        CH.log_partition(loop, np.zeros((3, 2)), np.zeros((3, 2, 2)))


def test_model_with_chain_engine_names_the_graph_that_is_not_a_canonical_chain():
    """A path numbered out of order is a tree to the chain engine: the model refuses it at
    construction, naming the graph and the fix."""
    import pymc as pm

    import pymc_crf as pmc

    graphs = GraphBatch.from_edges([np.array([[0, 1], [1, 2]]), np.array([[1, 0], [0, 2]])],
                                   [3, 3])
    with pm.Model(), pytest.raises(ValueError, match=r"graph 1 \(tree\) is not a canonical chain"
                                                     r".*GraphBatch.chains"):
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("y", graphs=graphs, edge_weights=w, inference="chain", observed=np.zeros(6, int))


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("K", [2, 5, 10])
def test_lane_blocked_kernel_matches_per_graph_kernel(K, shared):
    """Up to 64 chains run in lockstep (sorted by length, padded lanes, per-lane log-space
    fallback, over-long chains sent to the per-graph kernel), with a shared table or per-edge
    tables: it must give the per-graph kernel's numbers on a large ragged batch with every
    special case mixed in."""
    from pymc_crf.inference.chain.per_graph import _forward_backward_graphs

    rng = np.random.default_rng(K)
    lengths = list(rng.integers(1, 40, size=150)) + [700, 1, 1]  # 700 * K * 64 > block buffers
    batch = GraphBatch.chains(lengths)
    node = 2.0 * rng.normal(size=(batch.n_total_nodes, K))
    no = batch.node_offsets
    node[no[3]:no[4]] *= 400.0  # scales underflow: log-space fallback inside a block
    node[no[5]:no[6], 0] = -np.inf  # forbidden labels
    edge = rng.normal(size=(1 if shared else batch.n_edges, K, K))
    edge[:, 0, 1] = -np.inf
    gw = rng.normal(size=batch.n_graphs)
    for weights in (np.zeros(0), gw):
        lz, nm, em = _forward_backward_lanes(node, edge, batch.node_offsets, batch.edge_offsets,
                                             True, weights)
        ref_lz, ref_nm, ref_em = _forward_backward_graphs(node, edge, batch.node_offsets,
                                                          batch.edge_offsets, True, weights)
        assert np.isfinite(ref_lz).all()
        assert _rel(lz, ref_lz) < 1e-12
        assert _rel(nm, ref_nm) < 1e-12
        assert _rel(em, ref_em) < 1e-11
    # log Z alone (no backward pass); a graph with no valid labelling gets -inf, the rest are
    # unchanged
    node[no[7], :] = -np.inf
    lz_only = _forward_backward_lanes(node, edge, batch.node_offsets, batch.edge_offsets, False,
                                      np.zeros(0))[0]
    assert np.isneginf(lz_only[7])
    keep = np.arange(batch.n_graphs) != 7
    assert _rel(lz_only[keep], ref_lz[keep]) < 1e-12


def test_wide_potential_ranges_go_to_log_space():
    """Log-potentials spanning hundreds: a product alpha psi phi can underflow to 0 while the scale
    stays normal, and a later step can make that dropped path the dominant one (a scaled recursion
    without the range rule is off by about 96 in log Z here). Such chains must be computed in log
    space, in the per-chain and in the lockstep kernel."""
    node = np.array([[-835.0, -217.0], [-1117.0, -600.0], [-156.0, 83.0]])
    edge = np.array([[[225.0, 36.0], [-123.0, -350.0]]])
    for n_graphs in (1, 2, 9):  # per-chain kernel; lockstep lanes
        batch = GraphBatch.chains([3] * n_graphs)
        nd = np.tile(node, (n_graphs, 1))
        got = CH.marginals(batch, nd, edge)
        ref = BF.marginals(batch, nd, edge)
        assert _rel(got.log_z, ref.log_z) < 1e-12
        assert np.abs(got.node - ref.node).max() < 1e-12
        assert np.abs(got.edge - ref.edge).max() < 1e-9
    # robust probit with epsilon = 0 and large scores: log-potentials down to about -4000
    rng = np.random.default_rng(0)
    from scipy.special import log_ndtr

    batch = GraphBatch.chains([5] * 12)
    nd = log_ndtr(30.0 * rng.normal(size=(batch.n_total_nodes, 2)))
    ed = log_ndtr(30.0 * rng.normal(size=(1, 2, 2)))
    got, ref = CH.marginals(batch, nd, ed), BF.marginals(batch, nd, ed)
    assert _rel(got.log_z, ref.log_z) < 1e-12
    assert np.abs(got.node - ref.node).max() < 1e-10


def test_state_suppressed_through_forbidden_transitions_goes_to_log_space():
    """State 0 is reachable only from itself and disfavoured for 150 steps (its alpha shrinks to
    exp(-750) and would underflow to 0), then favoured for 150: its path is the best one. Every
    range is small, so only the small-alpha guard catches it (the scaled recursion gave -900)."""
    from pymc_crf.inference.junction_tree import JunctionTree

    node = np.vstack([np.tile([-5.0, 0.0], (150, 1)), np.tile([0.0, -6.0], (150, 1))])
    edge = np.array([[[0.0, 0.0], [-np.inf, 0.0]]])
    for n_graphs in (1, 3):  # per-chain kernel; lockstep lanes
        batch = GraphBatch.chains([300] * n_graphs)
        nd = np.tile(node, (n_graphs, 1))
        got = CH.marginals(batch, nd, edge)
        ref = JunctionTree().marginals(batch, nd, edge)  # log-space calibration
        assert _rel(got.log_z, ref.log_z) < 1e-12
        assert np.abs(got.node - ref.node).max() < 1e-10
        assert np.abs(got.edge - ref.edge).max() < 1e-8 * n_graphs * 300


@st.composite
def wide_range_problems(draw):
    """Batches of 1-12 chains (several lanes of the lockstep kernel) whose log-potentials span
    up to 1e4, with up to 30% forbidden (-inf) entries; label 0 and the transition 0 -> 0 stay
    allowed, so every chain has a valid labelling."""
    K = draw(st.integers(2, 4))
    lengths = draw(st.lists(st.integers(1, 5), min_size=1, max_size=12))
    scale = draw(st.sampled_from([1.0, 30.0, 300.0, 3000.0, 1e4]))
    forbid = draw(st.floats(0.0, 0.3))
    shared = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    return chain_tables(rng, lengths, K, shared, scale, forbid)


@settings(max_examples=40, deadline=None)
@given(wide_range_problems())
def test_wide_ranges_and_forbidden_entries_match_brute_force(problem):
    """log Z, marginals, weighted marginals and MAP scores stay exact for ranges up to 1e4."""
    batch, node, edge = problem
    ref = BF.marginals(batch, node, edge)
    m = CH.marginals(batch, node, edge)
    np.testing.assert_allclose(m.log_z, ref.log_z, rtol=1e-11)
    np.testing.assert_allclose(CH.log_partition(batch, node, edge), ref.log_z, rtol=1e-11)
    assert np.abs(m.node - ref.node).max() < 1e-9
    assert _rel(m.edge, ref.edge) < 1e-9
    w = np.linspace(-1.0, 2.0, batch.n_graphs)
    gn, ge = CH.weighted_marginals(batch, node, edge, w)
    rn, re = BF.weighted_marginals(batch, node, edge, w)
    assert _rel(gn, rn) < 1e-9 and _rel(ge, re) < 1e-9
    np.testing.assert_allclose(CH.map_assignment(batch, node, edge).score,
                               BF.map_assignment(batch, node, edge).score, rtol=1e-12)


def test_per_edge_tables_in_graph_buffers_match_log_space():
    """Per-edge tables are exponentiated graph by graph: a ragged batch of per-edge tables (with
    one over-wide chain sent to log space) equals the log-space kernel graph by graph."""
    from pymc_crf.inference.chain.log_space import _fb_log_one

    rng = np.random.default_rng(11)
    batch = GraphBatch.chains(list(rng.integers(1, 30, size=40)))
    K = 5
    node = rng.normal(size=(batch.n_total_nodes, K))
    edge = 2.0 * rng.normal(size=(batch.n_edges, K, K))
    edge[batch.edge_offsets[2]:batch.edge_offsets[3]] *= 300.0
    m = CH.marginals(batch, node, edge)
    ref_nm, ref_em, lz1 = np.zeros_like(node), np.zeros_like(edge), np.empty(1)
    for g in range(batch.n_graphs):
        lo, elo = batch.node_offsets[g], batch.edge_offsets[g]
        n = batch.node_offsets[g + 1] - lo
        _fb_log_one(node, edge, False, lo, elo, n, lz1, ref_nm, ref_em, True, 1.0)
        np.testing.assert_allclose(m.log_z[g], lz1[0], rtol=1e-12)
    assert _rel(m.node, ref_nm) < 1e-11 and _rel(m.edge, ref_em) < 1e-11


def test_ranges_of_several_hundred_stay_on_the_scaled_path():
    """Node-row plus table ranges of 300-600 pass the exactness test (no log-space fallback),
    and the scaled result equals the log-space recursion; ranges of several thousand are sent
    to log space."""
    from pymc_crf.inference.chain.log_space import _fb_log_one
    from pymc_crf.inference.chain.per_graph import _forward_one
    from pymc_crf.inference.chain.scaling import _edge_tables

    rng = np.random.default_rng(7)
    K, n = 6, 12
    for scale, accepted in ((60.0, True), (2000.0, False)):
        for shared in (True, False):
            node = scale * rng.normal(size=(n, K))
            edge = scale * rng.normal(size=(1 if shared else n - 1, K, K))
            psi, shift, erange = _edge_tables(edge) if not shared else _edge_tables(edge[:1])
            lz = _forward_one(node, edge, 0, n, 0, psi, shift, erange, shared, np.empty(n * K),
                              np.empty(n * K), np.empty(n), np.empty(n * K), np.empty(n * K))
            ref = np.empty(1)
            _fb_log_one(node, edge, shared, 0, 0, n, ref, np.zeros((n, K)),
                        np.zeros(edge.shape), False, 1.0)
            assert np.isnan(lz) != accepted
            if accepted:
                assert abs(lz - ref[0]) < 1e-12 * abs(ref[0])


def test_pinned_tier_runs_every_batch_in_the_named_kernels():
    """``pinned_tier`` makes a batch run in the named tier (the tier is taken; numbers equal to
    the default tier's to rounding); ``"small"`` falls back for batches it cannot take; a bad
    name is refused. (Bit-for-bit equality of a part run in its corpus's tier:
    test_distributed.)"""
    from pymc_crf.inference.chain import dispatch

    rng = np.random.default_rng(0)
    batch = GraphBatch.chains([3, 5, 2])
    node = rng.normal(size=(batch.n_total_nodes, 3))
    edge = rng.normal(size=(1, 3, 3))
    eng = ChainEngine()
    ref = eng.marginals(batch, node, edge)
    assert dispatch.batch_tier(10, 5, 3) == "small"
    for tier in dispatch.TIERS:
        with dispatch.pinned_tier(tier):
            assert dispatch._tier(batch.node_offsets, 3) == tier
            if tier == "lanes":  # its kernels are compiled and run by the lane-tier tests
                continue
            got = eng.marginals(batch, node, edge)
        np.testing.assert_allclose(got.node, ref.node, rtol=0, atol=1e-13)
    long = GraphBatch.chains([100])
    with dispatch.pinned_tier("small"):
        assert dispatch._tier(long.node_offsets, 3) == "graphs"
    with pytest.raises(ValueError, match="tier must be one of"):
        with dispatch.pinned_tier("gpu"):
            pass
