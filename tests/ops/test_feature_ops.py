"""The edge-feature log Z Ops (``FeatureLogPartition`` and its gradient) and the CRF models that
use them: log-linear chain CRFs with per-edge tables from dense edge features. Checked against
brute-force enumeration and against the same model on the table Ops."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.sparse
from helpers.models import node_edge_crf

import pymc_crf as pmc
import pymc_crf.distributions.crf as crf_module
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.chain import ChainEngine
from pymc_crf.ops import (
    FeatureLogPartition,
    FeatureLogPartitionGrad,
    FeatureLogPartitionWithGrad,
    LogPartition,
)

BF = BruteForce()
CH = ChainEngine()


def _problem(seed, lengths=(4, 1, 3, 5, 2), K=3, Fe=2, scale=1.0):
    rng = np.random.default_rng(seed)
    b = GraphBatch.chains(list(lengths))
    node = scale * rng.normal(size=(b.n_total_nodes, K))
    x = rng.normal(size=(b.n_edges, Fe))
    w = scale * rng.normal(size=(Fe, K * K))
    g = rng.normal(size=b.n_graphs)
    return b, node, x, w, g


def _tables(x, w, K):
    return (x @ w).reshape(-1, K, K)


@pytest.mark.parametrize("mode", ["NUMBA", "FAST_COMPILE"])
@pytest.mark.parametrize("scale", [1.0, 300.0])
def test_value_gradient_and_fusion_against_brute_force(mode, scale):
    """Compiled (numba kernels) and Python (``perform``) implementations: log Z, the fused
    value-and-gradient node, and the gradients in the node tables and the weights against
    enumeration; the unfused pair gives the same numbers."""
    b, node, x, w, g = _problem(0, scale=scale)
    K = node.shape[1]
    N, X, W = pt.dmatrix("N"), pt.dmatrix("X"), pt.dmatrix("W")
    lz = FeatureLogPartition(b, CH)(N, X, W)
    total = (lz * g).sum()
    outs = [lz, *pytensor.grad(total, [N, W])]
    f = pytensor.function([N, X, W], outs, mode=mode)
    ops = [type(n.op) for n in f.maker.fgraph.apply_nodes]
    if mode == "NUMBA":
        assert ops.count(FeatureLogPartitionWithGrad) == 1
        assert FeatureLogPartition not in ops and FeatureLogPartitionGrad not in ops
    got_lz, gn, gw = f(node, x, w)
    edge = _tables(x, w, K)
    np.testing.assert_allclose(got_lz, BF.log_partition(b, node, edge), rtol=1e-12)
    rn, re = BF.weighted_marginals(b, node, edge, g)
    np.testing.assert_allclose(gn, rn, atol=1e-10)
    np.testing.assert_allclose(gw, x.T @ re.reshape(b.n_edges, -1), atol=1e-10)
    plain = pytensor.function([N, X, W], outs, mode=pytensor.compile.get_mode(mode).excluding(
        "fuse_log_partition_with_grad"))
    for a, c in zip(plain(node, x, w), (got_lz, gn, gw), strict=True):
        np.testing.assert_allclose(a, c, rtol=1e-13, atol=1e-13)


def test_second_derivatives_and_feature_gradient_by_finite_differences():
    """The Hessian in the weights (through the table Ops) and the gradient in the edge
    features, against central differences of log Z."""
    b, node, x, w, g = _problem(1)
    N, X, W = pt.dmatrix("N"), pt.dmatrix("X"), pt.dmatrix("W")
    total = (FeatureLogPartition(b, CH)(N, X, W) * g).sum()
    gw = pytensor.grad(total, W)
    f = pytensor.function([N, X, W], [total, pytensor.grad(total, X),
                                      pytensor.gradient.jacobian(gw.ravel(), W)])
    val, gx, H = f(node, x, w)

    def value(xv, wv):
        return float(g @ BF.log_partition(b, node, _tables(xv, wv, node.shape[1])))

    h = 1e-5
    for i, j in [(0, 0), (3, 1), (b.n_edges - 1, 0)]:
        d = np.zeros_like(x)
        d[i, j] = h
        assert abs((value(x + d, w) - value(x - d, w)) / (2 * h) - gx[i, j]) < 1e-7
    H = H.reshape(w.size, w.size)
    grad_w = pytensor.function([N, X, W], gw)
    for k in [0, 5, w.size - 1]:
        d = np.zeros(w.size)
        d[k] = h
        fd = (grad_w(node, x, w + d.reshape(w.shape)) - grad_w(node, x, w - d.reshape(w.shape)))
        np.testing.assert_allclose(H[:, k], fd.ravel() / (2 * h), atol=1e-7)


def test_bad_inputs_are_named():
    b, node, x, w, _ = _problem(2)
    op = FeatureLogPartition(b, CH)
    with pytest.raises(ValueError, match="node log-potentials have 4 rows"):
        op(pt.dmatrix(shape=(4, 3)), x, w)
    with pytest.raises(ValueError, match="edge features have 3 rows"):
        op(node, pt.dmatrix(shape=(3, 2)), w)
    with pytest.raises(ValueError, match="ndim 2, 2 and 3"):
        op(node, x, pt.tensor3())
    f = pytensor.function([X := pt.dmatrix(), W := pt.dmatrix()], op(node, X, W))
    with pytest.raises(ValueError, match="one row per edge"):
        f(x[:-1], w)
    with pytest.raises(ValueError, match=r"edge weights must be \(Fe, K\^2\)"):
        f(x, w[:, :4])
    with pytest.raises(ValueError, match="contain NaN or inf"):
        f(x, np.where(w > 0, np.nan, w))
    with pytest.raises(ValueError, match="Xe @ We are not finite"):
        f(np.full_like(x, 1e200), np.full_like(w, 1e200))
    slow = pytensor.function([X, W], op(node, X, W), mode="FAST_COMPILE")  # perform()
    with pytest.raises(ValueError, match=r"edge weights must be \(Fe, K\^2\) = \(2, 9\)"):
        slow(x, w[:, :4])
    with pytest.raises(ValueError, match="edge features contain NaN"):
        slow(np.full_like(x, np.nan), w)


def _logp_dlogp(model):
    f = model.logp_dlogp_function(ravel_inputs=True)
    f.set_extra_values({})
    return f


def _table_model(monkeypatch, build):
    """The model ``build()`` makes, its log density on the table Ops."""
    with monkeypatch.context() as mp:
        mp.setattr(crf_module, "_feature_path", lambda op, params: False)
        model = build()
        f = _logp_dlogp(model)
        pointwise = _pointwise(model)
    return f, pointwise


def _pointwise(model):
    """The per-graph log-likelihood as a function of a point."""
    return model.compile_fn(model.logp(vars=model.observed_RVs, sum=False)[0])


def _ops(f):
    return [type(n.op) for n in f._pytensor_function.maker.fgraph.apply_nodes]


def test_crf_model_uses_the_feature_ops_with_the_table_models_numbers(monkeypatch):
    """A log-linear chain CRF with dense per-edge features: the compiled logp + dlogp holds one
    fused feature node and no table Op, and gives the table model's value, gradient and
    per-graph log-likelihood."""
    rng = np.random.default_rng(3)
    batch = GraphBatch.chains(rng.integers(1, 9, size=30))

    def build():
        return node_edge_crf(batch, 3, "loglinear", False, np.random.default_rng(1))

    model = build()
    f = _logp_dlogp(model)
    ops = _ops(f)
    assert FeatureLogPartitionWithGrad in ops and LogPartition not in ops
    f_tab, pointwise_tab = _table_model(monkeypatch, build)
    assert FeatureLogPartitionWithGrad not in _ops(f_tab)
    pointwise = _pointwise(model)
    names = [v.name for v in model.value_vars]
    for scale in (1.0, 40.0):
        point = {n: scale * rng.normal(size=np.shape(v))
                 for n, v in model.initial_point().items() if n in names}
        q = np.concatenate([point[n].ravel() for n in names])
        (a, ga), (c, gc) = f(q), f_tab(q)
        assert abs(a - c) <= 1e-10 * abs(c)
        np.testing.assert_allclose(ga, gc, rtol=1e-10, atol=1e-10)
        ll = pointwise(point)
        assert ll.shape == (batch.n_graphs,)
        np.testing.assert_allclose(ll, pointwise_tab(point), rtol=1e-10, atol=1e-10)


def test_other_models_keep_the_table_ops():
    """Probit potentials, sparse or constant edge features, labels given as data, missing labels
    and engines without a feature kernel take the table Ops."""
    rng = np.random.default_rng(5)
    batch = GraphBatch.chains([3, 4, 2])
    N, E = batch.n_total_nodes, batch.n_edges
    X, Xe = rng.normal(size=(N, 2)), rng.normal(size=(E, 2))
    y = rng.integers(0, 3, size=N)
    y_missing = y.copy()
    y_missing[1] = -1
    cases = {
        "probit": dict(potential="probit", epsilon=0.05),
        "sparse": dict(edge_features=scipy.sparse.csr_matrix(Xe)),
        "constant": dict(edge_features=np.ones((E, 2))),
        "junction_tree": dict(inference="junction_tree"),
        "missing": dict(observed=pmc.pad_labels(batch, y_missing, missing=True)),
    }
    for name, kw in cases.items():
        kw = {"edge_features": Xe, "observed": y, **kw}
        with pm.Model() as m:
            W = pm.Normal("W", 0, 1, shape=(2, 3))
            V = pm.Normal("V", 0, 1, shape=(2, 3, 3))
            pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=V, **kw)
        ops = _ops(_logp_dlogp(m))
        assert FeatureLogPartitionWithGrad not in ops and FeatureLogPartition not in ops, name
    with pm.Model() as m:
        labels = pm.Data("labels", pmc.pad_labels(batch, y))
        W = pm.Normal("W", 0, 1, shape=(2, 3))
        V = pm.Normal("V", 0, 1, shape=(2, 3, 3))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_features=Xe,
                edge_weights=V, observed=labels)
    ops = _ops(_logp_dlogp(m))
    assert FeatureLogPartition not in ops and FeatureLogPartitionWithGrad not in ops
