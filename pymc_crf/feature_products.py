"""Feature x weight products for dense arrays and ``scipy.sparse`` matrices alike.

Features are an (R, F) matrix (one row per node or edge), dense ``ndarray`` or sparse CSR (as
``GraphBatch.check_features`` returns them); weights are an (F, ...) array. The products here keep
sparse features sparse: ``X @ W`` and ``X.T @ G`` are sparse-dense products with cost O(nnz * width)
and never form the dense (R, F) matrix, so text CRFs with 10^5-10^6 indicator features fit in
memory. Dense features take the same BLAS products as before.

This module imports nothing of the package, so every layer may use it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytensor.sparse as ps
import pytensor.tensor as pt
import scipy.sparse

__all__ = ["as_feature_matrix", "dense_features", "features_dot", "features_dot_pt",
           "features_tdot", "is_sparse", "row_quadratic_forms", "weighted_gram"]


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


def features_dot(x: Any, w: np.ndarray) -> np.ndarray:
    """``x @ w`` for (R, F) features and (F, ...) weights: a dense (R, ...) array."""
    w = np.asarray(w, dtype=np.float64)
    out = x @ w.reshape(w.shape[0], -1)
    return np.asarray(out).reshape((x.shape[0], *w.shape[1:]))


def features_tdot(x: Any, g: np.ndarray) -> np.ndarray:
    """``x.T @ g`` for (R, F) features and an (R, ...) cotangent: a dense (F, ...) array (the
    gradient of ``features_dot`` in the weights)."""
    g = np.asarray(g, dtype=np.float64)
    out = x.T @ g.reshape(g.shape[0], -1)
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
    else:
        out = pt.dot(pt.as_tensor_variable(x), w2)
    return out if w.ndim == 2 else out.reshape((out.shape[0], *[w.shape[i]
                                                                for i in range(1, w.ndim)]))
