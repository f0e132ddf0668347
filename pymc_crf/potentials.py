"""Linear scores to log-potential tables, in numpy and in PyTensor.

Scores are linear in the weights: node scores ``x_i @ W_node`` (F, K) give a (N, K) table and edge
scores ``x_e @ W_edge`` (Fe, K, K) give a (E, K, K) table. A potential turns a score ``a`` into a
log-potential:

* ``"loglinear"``: ``a`` itself (000 eq. (3), the usual CRF);
* ``"probit"``: the robust probit of 000 eq. (4),
  ``log(eps + (1 - 2 eps) Phi(a))``, bounded in ``[log eps, log(1 - eps)]``, computed as
  ``logaddexp(log eps, log1p(-2 eps) + log Phi(a))`` with a ``log Phi`` that is accurate for large
  negative ``a`` (asymptotic erfcx form), so no log of 0 and no overflow for any finite ``a``.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from scipy.special import log_ndtr

__all__ = ["POTENTIALS", "check_potential", "linear_scores", "log_ndtr_pt", "log_potential",
           "log_potential_pt"]

POTENTIALS = ("loglinear", "probit")


def check_potential(potential: str, epsilon: float) -> None:
    if potential not in POTENTIALS:
        raise ValueError(f"potential must be one of {POTENTIALS}, got {potential!r}")
    if not (0.0 <= float(epsilon) < 0.5):
        raise ValueError(f"epsilon must lie in [0, 0.5), got {epsilon}")


def log_potential(score: np.ndarray, potential: str = "loglinear", epsilon: float = 0.0):
    """Numpy log-potential of a score array (any shape)."""
    check_potential(potential, epsilon)
    score = np.asarray(score, dtype=np.float64)
    if potential == "loglinear":
        return score
    if epsilon == 0.0:
        return log_ndtr(score)
    return np.logaddexp(np.log(epsilon), np.log1p(-2.0 * epsilon) + log_ndtr(score))


def linear_scores(node_features, node_weights, edge_features, edge_weights):
    """Numpy scores ``a = x w``: node (N, K) or None, and edge (1, K, K) for a shared table
    (``edge_features`` None) or (E, K, K) from edge features (Fe, K, K) weights, or None."""
    a_node = None if node_weights is None else np.asarray(node_features) @ np.asarray(node_weights)
    if edge_weights is None:
        a_edge = None
    elif edge_features is None:
        a_edge = np.asarray(edge_weights, dtype=np.float64)[None]
    else:
        a_edge = np.tensordot(np.asarray(edge_features), np.asarray(edge_weights), axes=(1, 0))
    return a_node, a_edge


def log_ndtr_pt(a):
    """``log Phi(a)`` in PyTensor, accurate in both tails.

    For ``a < -1``: ``log(erfcx(-a/sqrt2) / 2) - a^2 / 2`` (no underflow of Phi); otherwise
    ``log1p(-erfc(a/sqrt2) / 2)`` (no cancellation near Phi = 1).
    """
    a = pt.as_tensor_variable(a)
    s = np.float64(1.0 / np.sqrt(2.0))
    # Keep both branches finite so the gradient of the unused one is not NaN.
    a_neg = pt.minimum(a, -1.0)
    a_pos = pt.maximum(a, -1.0)
    neg = pt.log(pt.erfcx(-a_neg * s) / 2.0) - a_neg**2 / 2.0
    pos = pt.log1p(-pt.erfc(a_pos * s) / 2.0)
    return pt.switch(a < -1.0, neg, pos)


def log_potential_pt(score, potential: str = "loglinear", epsilon: float = 0.0):
    """PyTensor log-potential of a score tensor (autodiff gives the chain rule)."""
    check_potential(potential, epsilon)
    if potential == "loglinear":
        return score
    lp = log_ndtr_pt(score)
    if epsilon == 0.0:
        return lp
    return pt.logaddexp(np.log(epsilon), np.log1p(-2.0 * epsilon) + lp)
