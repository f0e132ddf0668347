"""``FeatureDot``: the dense features x weights product of PyTensor graphs, against ``pt.dot``."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.sparse
from pytensor.graph.traversal import ancestors

import pymc_crf as pmc
from pymc_crf.feature_products import FeatureDot, feature_dot, features_dot_pt
from pymc_crf.ops import FeatureLogPartition


# the large feature matrix is a constant of the compiled graph, which numba does not cache
@pytest.mark.filterwarnings("ignore:Cannot cache compiled function")
@pytest.mark.parametrize("mode", ["NUMBA", "FAST_COMPILE"])
def test_feature_dot_equals_dot_with_gradients(mode):
    """Values, first and second derivatives equal ``pt.dot``'s, in compiled numba code and in the
    Python implementation, for contiguous and transposed (non-contiguous) inputs and for an
    output large enough for the huge-page path (>= 4 MB)."""
    rng = np.random.default_rng(0)
    for R, F, C in [(7, 3, 4), (30_000, 3, 20)]:
        x = rng.normal(size=(R, F))
        w = pt.matrix("w", shape=(F, C))
        for ours, ref in [(feature_dot(x, w), pt.dot(x, w)),
                          (feature_dot(x, w.T.T), pt.dot(x, w.T.T))]:
            c = rng.normal(size=(R, C))
            f_ours = (ours * c).sum() + 0.5 * (ours**2).sum()
            f_ref = (ref * c).sum() + 0.5 * (ref**2).sum()
            g_ours, g_ref = pt.grad(f_ours, w), pt.grad(f_ref, w)
            # second derivatives: the gradient's directional derivative (a Hessian-vector product)
            v = rng.normal(size=(F, C))
            h_ours, h_ref = pt.grad((g_ours * v).sum(), w), pt.grad((g_ref * v).sum(), w)
            fn = pytensor.function([w], [ours, g_ours, h_ours], mode=mode)
            fr = pytensor.function([w], [ref, g_ref, h_ref], mode=mode)
            w0 = rng.normal(size=(F, C))
            for a, b in zip(fn(w0), fr(w0), strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
            assert any(isinstance(n.op, FeatureDot) for n in fn.maker.fgraph.apply_nodes)


def test_feature_dot_refuses_bad_inputs():
    with pytest.raises(TypeError, match="two float64 matrices"):
        feature_dot(np.ones(3), pt.matrix("w"))
    with pytest.raises(TypeError, match="two float64 matrices"):
        feature_dot(np.ones((3, 2), dtype="float32"), pt.matrix("w", dtype="float32"))
    with pytest.raises(ValueError, match="2 feature columns but 3 weight rows"):
        feature_dot(np.ones((3, 2)), pt.matrix("w", shape=(3, 4)))


@pytest.mark.parametrize("potential", ["probit", "loglinear"])
def test_dense_crf_graph_forms_its_products_with_feature_dot(potential):
    """A CRF with dense node and edge features forms its products with ``FeatureDot`` (sparse
    features keep ``structured_dot``): both with probit potentials; with log-linear ones on a
    chain only the node product, the edge tables being left to ``FeatureLogPartition``."""
    rng = np.random.default_rng(1)
    batch = pmc.GraphBatch.chains([4, 3])
    X = rng.normal(size=(7, 2))
    Xe = rng.normal(size=(5, 2))
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.0, shape=(2, 3))
        V = pm.Normal("V", 0.0, 1.0, shape=(2, 3, 3))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_features=Xe,
                edge_weights=V, potential=potential, observed=rng.integers(0, 3, size=7))
    ops = [v.owner.op for v in ancestors([m.logp()]) if v.owner is not None]
    assert sum(isinstance(op, FeatureDot) for op in ops) == (2 if potential == "probit" else 1)
    assert any(isinstance(op, FeatureLogPartition) for op in ops) == (potential == "loglinear")
    assert isinstance(features_dot_pt(X, W).owner.op, FeatureDot)
    sparse = features_dot_pt(scipy.sparse.csr_matrix(X), W)
    assert not any(isinstance(v.owner.op, FeatureDot)
                   for v in ancestors([sparse]) if v.owner is not None)


def test_features_dot_pt_casts_to_float64():
    """float32 weights (PyTensor's floatX=float32) and integer features give the float64 product,
    as ``pt.dot`` did."""
    x = np.arange(6).reshape(3, 2)
    w = pt.matrix("w", dtype="float32", shape=(2, 2))
    out = features_dot_pt(x, w)
    assert out.dtype == "float64"
    w0 = np.array([[0.5, -1.0], [2.0, 0.25]], dtype="float32")
    np.testing.assert_allclose(pytensor.function([w], out)(w0), x @ w0.astype(np.float64),
                               rtol=1e-15)
