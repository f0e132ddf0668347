"""Linear-response covariance of the sufficient statistics from a BP fixed point.

The public entry points with a default BP engine; the computation (the Hessian of minus the Bethe
free energy, Parise & Welling 2006 eq. (9); Welling & Parise 2006 eqs. (8)-(10)) is in
:mod:`pymc_crf.inference.bethe`, which the BP engine's own ``covariance_vector_product`` uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import LoopyResult
from pymc_crf.inference.bethe import bethe_covariance_matrix, bethe_covariance_vector_product
from pymc_crf.inference.bp import BeliefPropagation

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["linear_response_matrix", "linear_response_vector_product"]


def _default_bp() -> BeliefPropagation:
    # A tight tolerance: the response solves the linearised fixed-point equations, so it is only
    # as accurate as the fixed point.
    return BeliefPropagation(tol=1e-12)


def linear_response_vector_product(batch: GraphBatch, node_logpot: ArrayLike,
                                   edge_logpot: ArrayLike, v_node: ArrayLike, v_edge: ArrayLike,
                                   bp: BeliefPropagation | None = None,
                                   state: LoopyResult | None = None, rtol: float = 1e-12,
                                   maxiter: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Linear-response covariance of the sufficient statistics applied to ``(v_node, v_edge)``.

    Parameters
    ----------
    batch, node_logpot, edge_logpot
        The model, as for any engine (``edge_logpot`` may be a shared ``(1, K, K)`` table).
    v_node, v_edge
        Direction, shaped like ``node_logpot`` and ``edge_logpot``.
    bp
        The BP engine whose fixed point is used (default ``BeliefPropagation(tol=1e-12)``).
    state
        A BP fixed point already computed for these potentials (skips the BP run).
    rtol, maxiter
        GMRES settings for the linearised message equations.

    Returns
    -------
    (d_node, d_edge)
        Derivatives of the node beliefs (N, K) and edge beliefs (E, K, K) along the direction;
        with a shared table, ``d_edge`` is summed over edges, shape (1, K, K).
    """
    return bethe_covariance_vector_product(batch, node_logpot, edge_logpot, v_node, v_edge,
                                           bp if bp is not None else _default_bp(), state=state,
                                           rtol=rtol, maxiter=maxiter)


def linear_response_matrix(batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike,
                           graph: int = 0, bp: BeliefPropagation | None = None,
                           symmetrise: bool = True) -> np.ndarray:
    """Dense linear-response covariance of one graph's sufficient statistics.

    Meant for small graphs (see :func:`pymc_crf.inference.bethe.bethe_covariance_matrix`).

    Parameters
    ----------
    batch, node_logpot, edge_logpot
        The model, as for any engine (``edge_logpot`` may be a shared ``(1, K, K)`` table).
    graph : int, default 0
        The graph of the batch (in ``0 .. n_graphs - 1``) whose statistics are covered.
    bp : BeliefPropagation, optional
        The BP engine whose fixed point is used (default ``BeliefPropagation(tol=1e-12)``).
    symmetrise : bool, default True
        Return ``(C + C^T) / 2`` of the solved covariance ``C``.

    Returns
    -------
    ndarray (D, D)
        The covariance, in the order of :meth:`Engine.feature_covariance`: node indicators
        (node-major) then edge indicators (edge-major, or the ``K*K`` summed statistics for a
        shared table).
    """
    return bethe_covariance_matrix(batch, node_logpot, edge_logpot,
                                   bp if bp is not None else _default_bp(), graph=graph,
                                   symmetrise=symmetrise)
