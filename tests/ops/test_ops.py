import warnings

import networkx as nx
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.gradient import verify_grad

from pymc_crf import GraphBatch, log_partition
from pymc_crf.inference import BruteForce

BATCHES = {
    "chains": GraphBatch.chains([3, 1, 4]),
    "tree+loop": GraphBatch.from_edges([[(0, 1), (0, 2)], [(0, 1), (1, 2), (2, 0)]], [3, 3]),
}
MODES = {"numba": "NUMBA", "c": Mode(linker="cvm"), "python": Mode(linker="py")}


def _weighted_problem(bname, shared, rng, K=3):
    """Batch, tables (scale 3), symbolic inputs, their log Z and per-graph weights 1..G."""
    b = BATCHES[bname]
    node = rng.normal(size=(b.n_total_nodes, K)) * 3
    edge = rng.normal(size=(1 if shared else b.n_edges, K, K)) * 3
    N, E = pt.dmatrix(), pt.tensor3()
    return b, node, edge, N, E, log_partition(N, E, b), np.arange(1.0, b.n_graphs + 1)


@pytest.mark.parametrize("bname", list(BATCHES))
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("mode", list(MODES))
def test_log_partition_value_and_gradient_all_backends(bname, shared, mode, rng):
    b, node, edge, N, E, lz, weights = _weighted_problem(bname, shared, rng)
    gn, ge = pytensor.grad((lz * weights).sum(), [N, E])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no silent object-mode fallback warning
        f = pytensor.function([N, E], [lz, gn, ge], mode=MODES[mode])
    val, g1, g2 = f(node, edge)
    bf = BruteForce()
    np.testing.assert_allclose(val, bf.log_partition(b, node, edge), rtol=1e-12)
    exp_n, exp_e = bf.weighted_marginals(b, node, edge, weights)
    np.testing.assert_allclose(g1, exp_n, atol=1e-12)
    np.testing.assert_allclose(g2, exp_e, atol=1e-12)


@pytest.mark.parametrize("bname", list(BATCHES))
@pytest.mark.parametrize("shared", [False, True])
def test_verify_grad_first_and_second_order(bname, shared, rng):
    b = BATCHES[bname]
    K = 2
    node = rng.normal(size=(b.n_total_nodes, K))
    edge = rng.normal(size=(1 if shared else b.n_edges, K, K))
    w = np.arange(1.0, b.n_graphs + 1)
    verify_grad(lambda n, e: (log_partition(n, e, b) * w).sum(), [node, edge], rng=rng)
    # second order: gradient of a function of the marginals goes through LogPartitionHVP
    verify_grad(lambda n, e: sum((g**2).sum() for g in pytensor.grad(
        (log_partition(n, e, b) * w).sum(), [n, e])), [node, edge], rng=rng)


def test_hessian_equals_brute_force_covariance(rng):
    b = GraphBatch.from_edges([[(0, 1), (1, 2), (2, 0)]], [3])
    K = 2
    node = rng.normal(size=(3, K))
    edge = rng.normal(size=(3, K, K))
    x = pt.dvector()
    n_ = x[:6].reshape((3, K))
    e_ = x[6:].reshape((3, K, K))
    H = pytensor.function([x], pytensor.gradient.hessian(log_partition(n_, e_, b).sum(), x),
                          mode="FAST_COMPILE")(
        np.concatenate([node.ravel(), edge.ravel()]))
    np.testing.assert_allclose(H, BruteForce().feature_covariance(b, node, edge), atol=1e-10)


@pytest.mark.parametrize("bname", list(BATCHES))
@pytest.mark.parametrize("shared", [False, True])
def test_log_z_and_gradient_fused_into_one_engine_pass(bname, shared, rng):
    """A compiled value-and-gradient graph runs the engine once (``LogPartitionWithGrad``), with
    the numbers of the unfused pair (the rewrite excluded) and of brute force."""
    from pymc_crf.ops import LogPartition, LogPartitionGrad, LogPartitionWithGrad

    b, node, edge, N, E, lz, weights = _weighted_problem(bname, shared, rng)
    total = (lz * weights).sum()
    outs = [total, *pytensor.grad(total, [N, E])]
    fused = pytensor.function([N, E], outs)
    ops = [type(n.op) for n in fused.maker.fgraph.apply_nodes]
    assert ops.count(LogPartitionWithGrad) == 1
    assert LogPartition not in ops and LogPartitionGrad not in ops
    plain = pytensor.function(
        [N, E], outs, mode=pytensor.compile.get_default_mode().excluding(
            "fuse_log_partition_with_grad"))
    assert LogPartitionWithGrad not in [type(n.op) for n in plain.maker.fgraph.apply_nodes]
    for a, c in zip(fused(node, edge), plain(node, edge), strict=True):
        np.testing.assert_allclose(a, c, rtol=1e-13, atol=1e-13)
    bf = BruteForce()
    val, gn, ge = fused(node, edge)
    np.testing.assert_allclose(val, weights @ bf.log_partition(b, node, edge), rtol=1e-12)
    exp_n, exp_e = bf.weighted_marginals(b, node, edge, weights)
    assert ge.shape == edge.shape
    np.testing.assert_allclose(gn, exp_n, atol=1e-12)
    np.testing.assert_allclose(ge, exp_e, atol=1e-12)


def test_no_fusion_when_the_gradient_weights_depend_on_log_z(rng):
    """log sum_g exp(log Z_g) (a hidden CRF's class sum): the VJP weights are a softmax of the
    log Zs, so the two Ops stay apart (fusing them would make a cycle); the numbers are right."""
    from pymc_crf.ops import LogPartition, LogPartitionGrad, LogPartitionWithGrad

    b = BATCHES["chains"]
    node = rng.normal(size=(b.n_total_nodes, 3))
    edge = rng.normal(size=(b.n_edges, 3, 3))
    N, E = pt.dmatrix(), pt.tensor3()
    total = pt.logsumexp(log_partition(N, E, b))
    f = pytensor.function([N, E], [total, *pytensor.grad(total, [N, E])])
    ops = [type(n.op) for n in f.maker.fgraph.apply_nodes]
    assert LogPartition in ops and LogPartitionGrad in ops and LogPartitionWithGrad not in ops
    bf = BruteForce()
    lz = bf.log_partition(b, node, edge)
    val, gn, ge = f(node, edge)
    w = np.exp(lz - np.logaddexp.reduce(lz))
    exp_n, exp_e = bf.weighted_marginals(b, node, edge, w)
    np.testing.assert_allclose(val, np.logaddexp.reduce(lz), rtol=1e-12)
    np.testing.assert_allclose(gn, exp_n, atol=1e-12)
    np.testing.assert_allclose(ge, exp_e, atol=1e-12)


def test_static_shape_mismatches_are_refused_when_the_graph_is_built():
    b = GraphBatch.chains([3, 2])  # 5 nodes, 3 edges
    K = 3
    with pytest.raises(ValueError, match="node log-potentials have 6 rows; the batch has 5"):
        log_partition(np.zeros((6, K)), np.zeros((3, K, K)), b)
    with pytest.raises(ValueError, match="edge log-potentials have 2 tables; the batch has 3"):
        log_partition(np.zeros((5, K)), np.zeros((2, K, K)), b)
    with pytest.raises(ValueError, match="3 labels but the edge tables are 2 x 2"):
        log_partition(np.zeros((5, K)), np.zeros((3, 2, 2)), b)
    # symbolic inputs without static shapes are checked by the engine at evaluation
    n, e = pt.dmatrix("n"), pt.tensor3("e", dtype="float64")
    lz = log_partition(n, e, b)
    assert lz.eval({n: np.zeros((5, K)), e: np.zeros((1, K, K))}).shape == (2,)
    # constant tables are checked here (else constant folding logs rewrite tracebacks first),
    # an engine's size limit as soon as K is known, and a networkx graph is read as pmc.CRF does
    with pytest.raises(ValueError, match="log-potentials contain NaN"):
        log_partition(np.full((5, K), np.nan), np.zeros((3, K, K)), b)
    with pytest.raises(ValueError, match="brute_force: graph 0 has 2\\^30 labellings"):
        log_partition(pt.dmatrix("n", shape=(30, 2)), np.zeros((29, 2, 2)),
                      GraphBatch.chains([30]), inference="brute_force")
    lz = log_partition(np.zeros((3, 2)), np.zeros((2, 2, 2)), nx.path_graph(3))
    np.testing.assert_allclose(lz.eval(), [3 * np.log(2)])
    from pymc_crf.inference import JunctionTree

    with pytest.raises(TypeError, match="the engines take a GraphBatch; got Graph"):
        JunctionTree().log_partition(nx.path_graph(3), np.zeros((3, 2)), np.zeros((2, 2, 2)))


@pytest.mark.parametrize("bad", ["inf", "nan", "edge_rows", "node_rows", "edge_k"])
def test_compiled_chain_kernels_check_their_inputs(bad):
    """The numba-compiled chain path raises what the Python engines raise (no log Z from NaN,
    +inf or tables shaped for another batch, which would be read out of bounds)."""
    rng = np.random.default_rng(0)
    batch = GraphBatch.chains([3, 2])
    node, edge = pt.matrix("node"), pt.tensor3("edge")
    lz = log_partition(node, edge, batch).sum()
    f = pytensor.function([node, edge], [lz, *pytensor.grad(lz, [node, edge])], mode="NUMBA")
    n0, e0 = rng.normal(size=(5, 3)), rng.normal(size=(3, 3, 3))
    np.testing.assert_allclose(f(n0, e0)[0], BruteForce().log_partition(batch, n0, e0).sum())
    n, e = n0.copy(), e0.copy()
    if bad == "inf":
        n[2, 1] = np.inf
    elif bad == "nan":
        e[1, 0, 2] = np.nan
    elif bad == "edge_rows":
        e = e0[:2]
    elif bad == "node_rows":
        n = n0[:3]
    else:
        e = e0[:, :2, :2]
    message = {"inf": "NaN or \\+inf", "nan": "NaN or \\+inf", "node_rows": "one row per node"}
    with pytest.raises(ValueError, match=message.get(bad, "edge log-potentials must have shape")):
        f(n, e)
