"""Potentials: what turns a linear score into a log-potential, in numpy, PyTensor and numba.

Scores are linear in the weights: node scores ``x_i @ W_node`` (F, K) give a (N, K) table and edge
scores ``x_e @ W_edge`` (Fe, K, K) give a (E, K, K) table (or one (K, K) table shared by every
edge). A :class:`Potential` turns a score ``a`` into a log-potential ``log g(a)``:

* ``"loglinear"``: ``a`` itself (Qi, Szummer & Minka 2005, eq. (3), the usual CRF);
* ``"probit"``: the robust probit of Qi, Szummer & Minka 2005, eq. (4),
  ``log(eps + (1 - 2 eps) Phi(a))``, bounded in ``[log eps, log(1 - eps)]``, computed as
  ``logaddexp(log eps, log1p(-2 eps) + log Phi(a))`` with a ``log Phi`` that is accurate in both
  tails, so no log of 0 and no overflow for any finite ``a``.

Each kind is defined once here with everything the rest of the package needs: its numpy and
PyTensor log-potential, its derivatives in the score (for weight-space gradients and curvature),
the log of its expectation under a Gaussian score (EP's model averaging, Qi, Szummer & Minka 2005,
eqs. (59)-(60)) and the tilted moments of that expectation (EP's moment matching,
:func:`gaussian_moments`). The table builders (:func:`log_potential_tables`,
:func:`log_potential_tables_pt`, :func:`hcrf_pair_tables`) are the only code that maps weights to the
engines' log-potential tables.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
import pytensor.tensor as pt
from scipy.special import log_ndtr as _log_ndtr_np

from pymc_crf.feature_products import features_dot, features_dot_pt
from pymc_crf.kernel_cache import njit

__all__ = ["POTENTIALS", "LogLinear", "Potential", "Probit", "check_potential", "constant_row",
           "gaussian_moments", "get_potential", "hcrf_pair_tables", "linear_scores", "log_ndtr",
           "log_ndtr_pt", "log_potential", "log_potential_pt", "log_potential_tables",
           "log_potential_tables_pt", "register_potential"]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT1_2 = 1.0 / math.sqrt(2.0)
# kind ids inside numba kernels (numba reads module constants, not class attributes)
_PROBIT_CODE, _LOGLINEAR_CODE = 0, 1


# ---------------------------------------------------------------------------- log Phi
@njit(cache=True)
def log_ndtr(z):
    """``log Phi(z)`` of a scalar in numba, accurate in both tails.

    ``log1p(-erfc(z / sqrt2) / 2)`` above -1 (no cancellation near Phi = 1, as ``log_ndtr_pt``),
    ``log(erfc(-z / sqrt2) / 2)`` down to -30 (erfc is relatively accurate there and far from
    underflow), and the asymptotic
    Mills-ratio series ``Phi(z) = N(z) / (-z) (1 - 1/z^2 + 3/z^4 - 15/z^6 + 105/z^8)`` below
    (relative error < 1e-12 there).
    """
    if z > -1.0:
        return math.log1p(-0.5 * math.erfc(z * _SQRT1_2))
    if z > -30.0:
        return math.log(0.5 * math.erfc(-z * _SQRT1_2))
    z2 = z * z
    series = 1.0 - 1.0 / z2 + 3.0 / (z2 * z2) - 15.0 / (z2 * z2 * z2) + 105.0 / (z2 * z2 * z2 * z2)
    return -0.5 * z2 - _LOG_SQRT_2PI - math.log(-z) + math.log(series)


def log_ndtr_pt(a):
    """``log Phi(a)`` in PyTensor, accurate in both tails.

    For ``a < -1``: ``log(erfcx(-a/sqrt2) / 2) - a^2 / 2`` (no underflow of Phi); otherwise
    ``log1p(-erfc(a/sqrt2) / 2)`` (no cancellation near Phi = 1).
    """
    a = pt.as_tensor_variable(a)
    s = np.float64(_SQRT1_2)
    # Keep both branches finite so the gradient of the unused one is not NaN.
    a_neg = pt.minimum(a, -1.0)
    a_pos = pt.maximum(a, -1.0)
    # log(erfcx) - log 2 rather than log(erfcx / 2): PyTensor's log-of-product rewrite checks
    # every ancestor of a Log(Mul) node, and fails (logging a traceback) on sparse features.
    neg = pt.log(pt.erfcx(-a_neg * s)) - (np.log(2.0) + a_neg**2 / 2.0)
    pos = pt.log1p(-pt.erfc(a_pos * s) / 2.0)
    return pt.switch(a < -1.0, neg, pos)


# ---------------------------------------------------------------------------- the kinds
class Potential(ABC):
    """One kind of potential ``g``: score ``a`` -> log-potential ``log g(a)``.

    Subclasses set ``name`` and ``code`` (the kind's id inside numba kernels, read only by
    :func:`gaussian_moments`) and implement the methods below; ``identity`` is True when the
    log-potential is the score itself (then ``dlog`` returns None and gradients skip the product);
    ``label_noise`` is True when the kind reads ``epsilon`` (others refuse a non-zero one).
    """

    name: ClassVar[str]
    code: ClassVar[int]
    identity: ClassVar[bool] = False
    label_noise: ClassVar[bool] = False

    @abstractmethod
    def log(self, score: np.ndarray, epsilon: float = 0.0) -> np.ndarray:
        """Numpy log-potential of a score array (any shape)."""

    @abstractmethod
    def log_pt(self, score, epsilon: float = 0.0):
        """PyTensor log-potential of a score tensor (autodiff gives the chain rule)."""

    @abstractmethod
    def dlog(self, score: np.ndarray, epsilon: float = 0.0) -> np.ndarray | None:
        """``d log g / d a`` (None when it is 1)."""

    @abstractmethod
    def d2log(self, score: np.ndarray, epsilon: float = 0.0) -> np.ndarray | None:
        """``d^2 log g / d a^2`` (None when it is 0)."""

    @abstractmethod
    def log_expected(self, mean: np.ndarray, var: np.ndarray, epsilon: float = 0.0) -> np.ndarray:
        """``log E[g(y)]`` for ``y ~ N(mean, var)``, elementwise."""

    def __repr__(self) -> str:
        return f"<potential {self.name!r}>"


class LogLinear(Potential):
    """``g(a) = exp(a)`` (Qi, Szummer & Minka 2005, eq. (3))."""

    name, code, identity = "loglinear", _LOGLINEAR_CODE, True

    def log(self, score, epsilon=0.0):
        return np.asarray(score, dtype=np.float64)

    def log_pt(self, score, epsilon=0.0):
        return score

    def dlog(self, score, epsilon=0.0):
        return None

    def d2log(self, score, epsilon=0.0):
        return None

    def log_expected(self, mean, var, epsilon=0.0):
        return np.asarray(mean) + 0.5 * np.asarray(var)  # lognormal mean


# Probit.d2log: below a = -_CF_FROM the continued fraction with _CF_TERMS terms is exact to
# rounding (at x = 5 its error is below 1e-16 relative; it falls as x grows).
_CF_FROM = 5.0
_CF_TERMS = 60


class Probit(Potential):
    """``g(a) = eps + (1 - 2 eps) Phi(a)``, the robust probit (Qi, Szummer & Minka 2005, eq. (4))."""

    name, code = "probit", _PROBIT_CODE
    label_noise = True

    def log(self, score, epsilon=0.0):
        lp = _log_ndtr_np(np.asarray(score, dtype=np.float64))
        if epsilon == 0.0:
            return lp
        return np.logaddexp(np.log(epsilon), np.log1p(-2.0 * epsilon) + lp)

    def log_pt(self, score, epsilon=0.0):
        lp = log_ndtr_pt(score)
        if epsilon == 0.0:
            return lp
        return pt.logaddexp(np.log(epsilon), np.log1p(-2.0 * epsilon) + lp)

    def dlog(self, score, epsilon=0.0):
        # (1 - 2 eps) N(a) / g(a), formed in log space so it stays finite for any a
        score = np.asarray(score, dtype=np.float64)
        log_pdf = -0.5 * score**2 - _LOG_SQRT_2PI
        return np.exp(np.log1p(-2.0 * epsilon) + log_pdf - self.log(score, epsilon))

    def d2log(self, score, epsilon=0.0):
        # f = log g, f' = (1-2eps) N(a) / g; N'(a) = -a N(a) gives f'' = -f' (a + f'). With
        # h = N(a) / Phi(a) and 1 - f'/h = eps / g, a + f' = (a + h) - (eps / g) h. For a << 0,
        # h ~ -a and a + h cancels: there it is the continued fraction of the Mills ratio,
        # a + h = 1 / (x + 2 / (x + 3 / (x + ...))) with x = -a (Abramowitz & Stegun 1964,
        # 26.2.14), which has no cancellation.
        # h itself is x + that fraction there: exp(log N - log Phi) would carry the rounding of
        # two logs of size a^2 / 2 (5e-9 relative at a = -1e4).
        a = np.asarray(score, dtype=np.float64)
        shape, a = a.shape, a.reshape(-1)
        far = a < -_CF_FROM
        with np.errstate(over="ignore"):
            h = np.exp(-0.5 * a**2 - _LOG_SQRT_2PI - _log_ndtr_np(a))
        r = a + h
        if far.any():  # the fraction only where it is needed
            x = -a[far]
            tail = np.zeros_like(x)
            for k in range(_CF_TERMS, 1, -1):
                tail = k / (x + tail)
            r[far] = 1.0 / (x + tail)
            h[far] = x + r[far]
        if epsilon == 0.0:
            return (-h * r).reshape(shape)
        eps_over_g = np.exp(np.log(epsilon) - self.log(a, epsilon))
        return (-(1.0 - eps_over_g) * h * (r - eps_over_g * h)).reshape(shape)

    def log_expected(self, mean, var, epsilon=0.0):
        # E[Phi(y)] = Phi(mean / sqrt(1 + var))  (Qi, Szummer & Minka 2005, eqs. (59)-(60))
        return self.log(np.asarray(mean) / np.sqrt(1.0 + np.asarray(var)), epsilon)


_REGISTRY: dict[str, Potential] = {}


def register_potential(cls: type[Potential]) -> type[Potential]:
    """Class decorator adding a :class:`Potential` kind under its ``name``."""
    _REGISTRY[cls.name] = cls()
    return cls


for _cls in (LogLinear, Probit):
    register_potential(_cls)

#: names of the registered kinds
POTENTIALS = tuple(_REGISTRY)


def get_potential(potential: str | Potential) -> Potential:
    """The :class:`Potential` of a name (or the object itself); a clear error for unknown names."""
    if isinstance(potential, Potential):
        return potential
    try:
        return _REGISTRY[potential]
    except (KeyError, TypeError):
        raise ValueError(f"potential must be one of {tuple(_REGISTRY)}, got {potential!r}") from None


def check_potential(potential: str, epsilon: float) -> Potential:
    """Validate a potential name and its label-noise level; returns the :class:`Potential`."""
    pot = get_potential(potential)
    if not (0.0 <= float(epsilon) < 0.5):
        raise ValueError(f"epsilon must lie in [0, 0.5), got {epsilon}")
    if float(epsilon) != 0.0 and not pot.label_noise:
        raise ValueError(f"epsilon (label noise) is a setting of the robust probit; "
                         f"potential={pot.name!r} has no label noise and would ignore "
                         f"epsilon={epsilon}: use potential='probit' or leave epsilon at 0")
    return pot


def log_potential(score: np.ndarray, potential: str = "loglinear", epsilon: float = 0.0):
    """Numpy log-potential of a score array (any shape)."""
    return check_potential(potential, epsilon).log(score, epsilon)


def log_potential_pt(score, potential: str = "loglinear", epsilon: float = 0.0):
    """PyTensor log-potential of a score tensor (autodiff gives the chain rule)."""
    return check_potential(potential, epsilon).log_pt(score, epsilon)


@njit(cache=True)
def gaussian_moments(code, mu, s2, eps):
    """``(log Z, alpha, gamma)`` of ``Z = E[g(y)]``, ``y ~ N(mu, s2)``, for the kind ``code``.

    ``alpha = d log Z / d mu`` and ``gamma = d^2 log Z / d mu^2``:

    * robust probit: ``Z = eps + (1 - 2 eps) Phi(z)``, ``z = mu / sqrt(1 + s2)`` (Qi, Szummer &
      Minka 2005, eqs. (41), (45)); ``alpha = (1 - 2 eps) N(z) / (Z sqrt(1 + s2))`` (their
      eq. (42)'s ``rho``, which as printed reads ``(1 - 2 eps N(z))``),
      ``gamma = -alpha (alpha + mu / (1 + s2))`` (their eq. (48));
    * log-linear: ``Z = exp(mu + s2 / 2)`` (lognormal mean), ``alpha = 1``, ``gamma = 0``.
    """
    if code == _LOGLINEAR_CODE:
        return mu + 0.5 * s2, 1.0, 0.0
    sd = math.sqrt(1.0 + s2)
    z = mu / sd
    lphi = log_ndtr(z)
    lpdf = -0.5 * z * z - _LOG_SQRT_2PI
    if eps > 0.0:
        a = math.log(eps)
        b = math.log1p(-2.0 * eps) + lphi
        hi = max(a, b)
        logz = hi + math.log(math.exp(a - hi) + math.exp(b - hi))
        alpha = math.exp(math.log1p(-2.0 * eps) + lpdf - logz) / sd
    else:
        logz = lphi
        alpha = math.exp(lpdf - lphi) / sd
    gamma = -alpha * (alpha + mu / (1.0 + s2))
    return logz, alpha, gamma


# ---------------------------------------------------------------------------- table builders
def linear_scores(node_features, node_weights, edge_features, edge_weights, out=None):
    """Numpy scores ``a = x w``: node (N, K) or None, and edge (1, K, K) for a shared table
    (``edge_features`` None) or (E, K, K) from edge features (Fe, K, K) weights, or None.

    ``out``, an optional pair of arrays (node, edge; either None), receives the feature
    products (see :func:`~pymc_crf.feature_products.features_dot`)."""
    out_node, out_edge = (None, None) if out is None else out
    a_node = (None if node_weights is None
              else features_dot(node_features, node_weights, out=out_node))
    if edge_weights is None:
        a_edge = None
    elif edge_features is None:
        a_edge = np.asarray(edge_weights, dtype=np.float64)[None]
    else:
        a_edge = features_dot(edge_features, edge_weights, out=out_edge)
    return a_node, a_edge


def constant_row(features) -> np.ndarray | None:
    """The common row of a dense (E, F) feature matrix (array or PyTensor constant) whose rows
    are all equal (E >= 1), else None. Constant edge features give every edge the same table,
    so the engines can take one shared (1, K, K) table (one exp of K^2 entries, the lockstep
    kernel's shared path) instead of E equal ones."""
    if isinstance(features, pt.TensorConstant):
        features = features.data
    if not isinstance(features, np.ndarray) or features.ndim != 2 or features.shape[0] == 0:
        return None
    first = features[0]
    return first.copy() if bool(np.all(features == first)) else None


def log_potential_tables(potential: str | Potential, epsilon: float, n_nodes: int, K: int,
                         node_features=None, node_weights=None, edge_features=None,
                         edge_weights=None, out=None) -> tuple[np.ndarray, np.ndarray, Any, Any]:
    """Numpy engine tables of one weight set: ``(node, edge, a_node, a_edge)``.

    ``node`` (N, K) (zeros without node weights), ``edge`` (E, K, K), or (1, K, K) for a shared
    table (``edge_features`` None) or zeros without edge weights; ``a_node`` / ``a_edge`` are the
    scores (None where there are no weights), for derivatives through :meth:`Potential.dlog`.
    ``out`` (node, edge) receives the feature products, as in :func:`linear_scores`; for
    log-linear potentials the tables are then those arrays.
    """
    pot = get_potential(potential)
    a_node, a_edge = linear_scores(node_features, node_weights, edge_features, edge_weights,
                                   out=out)
    node = np.zeros((n_nodes, K)) if a_node is None else pot.log(a_node, epsilon)
    edge = np.zeros((1, K, K)) if a_edge is None else pot.log(a_edge, epsilon)
    return node, edge, a_node, a_edge


def log_potential_tables_pt(potential: str | Potential, epsilon: float, n_nodes: int, K: int,
                            node_features=None, node_weights=None, edge_features=None,
                            edge_weights=None):
    """PyTensor engine tables ``(node, edge)`` with the layout of :func:`log_potential_tables`
    (weights are tensors, features constant arrays, dense or sparse), except that dense edge
    features whose rows are all equal (:func:`constant_row`) give one shared (1, K, K) table,
    the same numbers."""
    pot = get_potential(potential)
    if node_weights is None:
        node = pt.zeros((n_nodes, K))
    else:
        node = pot.log_pt(features_dot_pt(node_features, node_weights), epsilon)
    if edge_weights is None:
        edge = pt.zeros((1, K, K))
    elif edge_features is None:
        edge = pot.log_pt(pt.as_tensor_variable(edge_weights), epsilon)[None, :, :]
    else:
        n_edges, n_feat = edge_features.shape
        row = constant_row(edge_features)
        if row is not None:  # every edge has the same table: one shared table
            edge_features, n_edges = row[None, :], 1
        score = features_dot_pt(edge_features,
                                pt.as_tensor_variable(edge_weights).reshape((n_feat, K * K)))
        edge = pot.log_pt(score.reshape((n_edges, K, K)), epsilon)
    return node, edge


def hcrf_pair_tables(node_features, theta_x, theta_y, theta_e, n_edges: int, *, backend=np,
                     node_scale=None, graph_edge_scale=None, edges_per_graph=None):
    """Log-potential tables of the (class, graph) pairs of a hidden CRF (Luo, Sun & Zhao, eqs. (1)-(3)).

    Pair ``c * G + g`` is the CRF over the hidden states of graph ``g`` under class ``c``: node
    ``(C * N, S)`` tables ``x_t @ theta_x + theta_y[:, c]`` and edge ``(C * E, S, S)`` tables
    ``theta_e[:, :, c]``. ``backend`` is ``numpy`` or ``pytensor.tensor`` (same expression in both).
    ``node_scale`` (N, S) multiplies the node tables of every class and ``graph_edge_scale``
    (G, S, S) the edge tables of graph ``g``, which has ``edges_per_graph[g]`` edges, in every class
    (the expected potentials of the beta-process HCRF, Luo, Sun & Zhao, eq. (14); numpy only). Each
    pair's scaled table is formed once and copied to the pair's edges (a tenth of the time of the
    product formed edge by edge on the Japanese vowels).
    """
    xp = backend
    S = theta_y.shape[0]
    C = theta_y.shape[1]
    node = xp.dot(node_features, theta_x)[None, :, :] + theta_y.T[:, None, :]     # (C, N, S)
    if node_scale is not None:
        node = node_scale[None] * node
    per_class = xp.moveaxis(theta_e, 2, 0)[:, None]                               # (C, 1, S, S)
    if graph_edge_scale is not None:
        per_pair = (per_class * graph_edge_scale[None]).reshape((-1, S, S))       # (C * G, S, S)
        edge = np.repeat(per_pair, np.tile(edges_per_graph, C), axis=0)
    else:
        edge = xp.broadcast_to(per_class, (C, n_edges, S, S))
    if n_edges == 0:  # single-node graphs only: one unused shared table
        edge = xp.zeros((1, S, S))
    return node.reshape((-1, S)), edge.reshape((-1, S, S))
