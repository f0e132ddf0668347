"""Feature x weight products for dense arrays and ``scipy.sparse`` matrices alike.

Features are an (R, F) matrix (one row per node or edge), dense ``ndarray`` or sparse CSR (as
``GraphBatch.check_features`` returns them); weights are an (F, ...) array. The products here keep
sparse features sparse: ``X @ W`` and ``X.T @ G`` are sparse-dense products with cost O(nnz * width)
and never form the dense (R, F) matrix, so text CRFs with 10^5-10^6 indicator features fit in
memory. Dense features take dense BLAS products.

Dense features in PyTensor graphs take the ``FeatureDot`` Op: ``pt.dot`` in compiled code
allocates its (R, C) output with numba's allocator and faults its pages in one 4 KiB page at a
time, which for products of tens of MB costs several times the product itself; ``FeatureDot``
writes into an array on advised huge pages (:mod:`pymc_crf.allocation`; docs/benchmarks.md,
"Fresh large arrays").

This module imports nothing of the package but :mod:`pymc_crf.allocation`, so every layer may
use it.
"""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

import numba
import numpy as np
import pytensor.sparse as ps
import pytensor.tensor as pt
import scipy.sparse
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key

import pymc_crf.allocation as allocation
from pymc_crf.allocation import zeros_pages

__all__ = ["FeatureDot", "as_feature_matrix", "dense_features", "features_dot",
           "features_dot_pt", "features_tdot", "is_sparse", "row_quadratic_forms", "source_key",
           "weighted_gram"]


def is_sparse(x: Any) -> bool:
    """True for a ``scipy.sparse`` matrix/array or a PyTensor sparse variable."""
    return scipy.sparse.issparse(x) or isinstance(getattr(x, "type", None),
                                                   ps.SparseTensorType)


def as_feature_matrix(x: Any) -> Any:
    """``x`` as a float64 ndarray, or as float64 CSR when it is sparse (never densified)."""
    if scipy.sparse.issparse(x):
        return scipy.sparse.csr_matrix(x, dtype=np.float64)
    return np.asarray(x, dtype=np.float64)


def dense_features(x: Any) -> np.ndarray:
    """``x`` as a dense float64 array (for the few places whose own arrays are dense per feature,
    such as EP's factor rows)."""
    return x.toarray() if scipy.sparse.issparse(x) else np.asarray(x, dtype=np.float64)


def features_dot(x: Any, w: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``x @ w`` for (R, F) features and (F, ...) weights: a dense (R, ...) array.

    ``out``, a C-contiguous float64 array of R * prod(w.shape[1:]) entries, receives the product
    (and is returned, reshaped) instead of a new array. Callers that form the same product at
    every iteration pass one: two BLAS threads writing a fresh array of tens of MB fault its
    pages in as they go, many times slower than the same product into a reused array
    (docs/benchmarks.md, "Fresh large arrays").
    """
    w = np.asarray(w, dtype=np.float64)
    # the trailing size spelled out: -1 is ambiguous for zero rows (no features)
    w2 = w.reshape(w.shape[0], int(np.prod(w.shape[1:], dtype=np.int64)))
    shape = (x.shape[0], *w.shape[1:])
    if out is None:
        return np.asarray(x @ w2).reshape(shape)
    if (out.dtype != np.float64 or not out.flags.c_contiguous
            or out.size != x.shape[0] * w2.shape[1]):
        raise ValueError(f"out must be a C-contiguous float64 array of {x.shape[0] * w2.shape[1]} "
                         f"entries, got {out.dtype} {out.shape}")
    flat = out.reshape(x.shape[0], w2.shape[1])  # a view: out is C-contiguous
    if scipy.sparse.issparse(x):
        flat[...] = x @ w2  # scipy has no out=; its product is single-threaded
    else:
        np.dot(x, w2, out=flat)
    return flat.reshape(shape)


def features_tdot(x: Any, g: np.ndarray) -> np.ndarray:
    """``x.T @ g`` for (R, F) features and an (R, ...) cotangent: a dense (F, ...) array (the
    gradient of ``features_dot`` in the weights)."""
    g = np.asarray(g, dtype=np.float64)
    # reshape with the trailing size spelled out: -1 is ambiguous for zero rows (no edges)
    out = x.T @ g.reshape(g.shape[0], int(np.prod(g.shape[1:], dtype=np.int64)))
    return np.asarray(out).reshape((x.shape[1], *g.shape[1:]))


def weighted_gram(x: Any, c: np.ndarray) -> np.ndarray:
    """``x.T @ diag(c) @ x``, a dense (F, F) matrix, for (R, F) features and row weights (R,)."""
    c = np.asarray(c, dtype=np.float64)
    if scipy.sparse.issparse(x):
        return np.asarray((x.T @ x.multiply(c[:, None]).tocsr()).toarray())
    return x.T @ (x * c[:, None])


def row_quadratic_forms(x: Any, v: np.ndarray, block: int = 4096) -> np.ndarray:
    """``x_r^T V x_r`` for every row ``r`` of (R, F) features and an (F, F) matrix ``V``.

    Sparse features go in row blocks of ``block`` rows, so the dense (block, F) product ``x V``
    is the largest temporary.
    """
    if not scipy.sparse.issparse(x):
        return np.einsum("rf,fg,rg->r", x, v, x)
    out = np.empty(x.shape[0])
    for s in range(0, x.shape[0], block):
        xb = x[s:s + block]
        out[s:s + block] = np.asarray(xb.multiply(xb @ v).sum(axis=1)).ravel()
    return out


def features_dot_pt(x: Any, w):
    """PyTensor ``x @ w`` for (R, F) features (array, scipy.sparse or a constant of either) and
    an (F, ...) weight tensor; sparse features use ``pytensor.sparse.structured_dot``, whose
    gradient in ``w`` is the sparse ``x.T @ g`` product."""
    w = pt.as_tensor_variable(w)
    w2 = w if w.ndim == 2 else w.reshape((w.shape[0], -1))
    if is_sparse(x):
        out = ps.structured_dot(ps.as_sparse_variable(x), w2)
    else:  # the engines work in float64 (weights may be float32 under floatX=float32)
        out = feature_dot(pt.cast(pt.as_tensor_variable(x), "float64"), pt.cast(w2, "float64"))
    return out if w.ndim == 2 else out.reshape((out.shape[0], *[w.shape[i]
                                                                for i in range(1, w.ndim)]))


class FeatureDot(Op):
    """``x @ w`` for an (R, F) float64 matrix ``x`` (the features) and an (F, C) float64 matrix
    ``w``: ``pt.dot``'s numbers, in compiled numba code written into an array on advised huge
    pages (see the module docstring). Its gradient is made of ``pt.dot``, so second derivatives
    work as for ``pt.dot``."""

    __props__ = ()

    def make_node(self, x, w):
        x, w = pt.as_tensor_variable(x), pt.as_tensor_variable(w)
        if x.ndim != 2 or w.ndim != 2 or x.dtype != "float64" or w.dtype != "float64":
            raise TypeError(f"FeatureDot takes two float64 matrices, got {x.type} and {w.type}")
        f, f2 = x.type.shape[1], w.type.shape[0]
        if f is not None and f2 is not None and f != f2:
            raise ValueError(f"FeatureDot: {f} feature columns but {f2} weight rows")
        out = pt.tensor(dtype="float64", shape=(x.type.shape[0], w.type.shape[1]))
        return Apply(self, [x, w], [out])

    def perform(self, node, inputs, output_storage):
        x, w = inputs
        output_storage[0][0] = np.dot(x, w)

    def infer_shape(self, node, shapes):
        return [(shapes[0][0], shapes[1][1])]

    def pullback(self, inputs, outputs, output_grads):
        x, w = inputs
        [g] = output_grads
        return [pt.dot(g, w.T), pt.dot(x.T, g)]


feature_dot = FeatureDot()


@register_funcify_and_cache_key(FeatureDot)
def _numba_feature_dot(op, node, **kwargs):
    @numba.njit
    def impl(x, w):
        x, w = np.ascontiguousarray(x), np.ascontiguousarray(w)
        # zero-filled by this thread after the advice: BLAS then writes into pages already
        # faulted in (two BLAS threads faulting fresh pages in at once are slow)
        out = zeros_pages((x.shape[0], w.shape[1]))
        np.dot(x, w, out)
        return out

    return impl, f"pymc_crf.feature_dot.{_SOURCE_KEY}"


def source_key(*paths) -> str:
    """A short hash of the files ``paths``, for PyTensor numba cache keys: PyTensor tells cache
    entries apart by their key alone (not by the code), so a key that carries the hash of the
    source an implementation is made of is compiled again after any edit of it, instead of
    loading the previous release's machine code."""
    return hashlib.sha256(b"".join(pathlib.Path(f).read_bytes() for f in paths)).hexdigest()[:16]


# this module and the allocator its implementation calls
_SOURCE_KEY = source_key(__file__, allocation.__file__)
