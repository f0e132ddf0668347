"""Gaussian posterior covariances from a Laplace precision, dense or at 10^5-10^6 weights.

The Laplace approximation of a random-field weight posterior is ``N(w_MAP, A^{-1})`` with the
precision ``A = H + P``: ``H`` the negative log-likelihood Hessian (``J^T C J`` for log-linear
potentials, Welling & Parise 2006 eq. (12)) and ``P = diag(1 / sigma^2)`` the prior precision.
Prediction needs draws, marginal variances and products with ``A^{-1}``; the evidence needs
``log det A``. Three representations give all four (:class:`GaussianPosterior`):

* ``"dense"`` (:class:`DenseGaussian`): ``A`` formed (:func:`~pymc_crf.fitters.bethe_laplace.
  hessian.exact_fisher_matrix`) and factorised by Cholesky. Exact; ``d^2`` memory, ``d^3 / 3``
  flops.
* ``"diagonal"`` (:class:`DiagonalGaussian`): ``A ~ diag(H) + P``, each weight independent.
  On chains ``diag(H)`` is exact (:func:`chain_curvature_diagonal`); the older per-position
  diagonal of :mod:`pymc_crf.fitters.diagonal_laplace` drops the covariances between positions.
* ``"lowrank"`` (:class:`LowRankGaussian`): the prior-preconditioned curvature
  ``M = S H S`` (``S = diag(sigma)``) by its top k eigenpairs ``M ~ U diag(lam) U^T``, found by
  randomised subspace iteration with Rayleigh-Ritz on blocks of Hessian-vector products
  (Halko, Martinsson & Tropp 2011, Algs. 4.4 and 5.3); the eigen-decomposed "low-rank" Laplace
  of Daxberger et al. 2021, here plus a diagonal: the part of ``diag(M)`` the k pairs leave out
  is kept on the diagonal, so ``A ~ S^{-1} (I + R + U diag(lam) U^T) S^{-1}`` with
  ``R = diag(max(diag(M) - diag(U diag(lam) U^T), 0))``. The matrix identities of a diagonal
  plus low rank (Woodbury) give every operation in ``O(d k)``; with ``k = d`` it is exact.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import scipy.linalg

from pymc_crf.fitters.bethe_laplace.hessian import (
    CurvatureOperator,
    curvature_diagonal,
    exact_fisher_matrix,
)
from pymc_crf.validation import generator, whole_number

__all__ = ["DenseGaussian", "DiagonalGaussian", "GaussianPosterior", "LowRankGaussian",
           "inverse_pd", "laplace_covariance", "randomized_eigh"]


def _not_pd(vals_min: float, hint: str) -> ValueError:
    return ValueError(f"the negative log-posterior Hessian at the MAP is not positive definite "
                      f"(smallest eigenvalue {vals_min:.3g}): the Laplace approximation does "
                      "not exist here (probit potentials far from the MAP, or a BP fixed point "
                      f"that is not a minimum of the Bethe free energy){hint}")


def cholesky_pd(A: np.ndarray, hint: str = "") -> np.ndarray:
    """Lower Cholesky factor of a symmetric matrix that should be positive definite; otherwise
    a ValueError naming its smallest eigenvalue (found only then, by ``eigh``) and ``hint``."""
    try:
        return scipy.linalg.cholesky(A, lower=True)
    except np.linalg.LinAlgError:
        raise _not_pd(float(np.linalg.eigvalsh(0.5 * (A + A.T)).min()), hint) from None


def inverse_pd(A: np.ndarray, hint: str = "") -> np.ndarray:
    """Inverse of a symmetric positive definite matrix by Cholesky (LAPACK ``potrf`` /
    ``potri``; about ``d^3`` flops against ``eigh``'s ~10x more), symmetrised; the error of
    :func:`cholesky_pd` otherwise."""
    L = cholesky_pd(A, hint)
    inv, info = scipy.linalg.lapack.dpotri(L, lower=1)
    if info != 0:
        raise _not_pd(float(np.linalg.eigvalsh(0.5 * (A + A.T)).min()), hint)
    inv = np.tril(inv) + np.tril(inv, -1).T
    return inv


class GaussianPosterior(ABC):
    """``N(mean, Sigma)`` over the flat weights: draws, marginal variances, ``Sigma v`` and
    ``log det Sigma`` without necessarily forming ``Sigma``."""

    mean: np.ndarray

    @property
    def size(self) -> int:
        return int(self.mean.size)

    @abstractmethod
    def diag(self) -> np.ndarray:
        """Marginal variances (d,)."""

    @abstractmethod
    def matvec(self, v: np.ndarray) -> np.ndarray:
        """``Sigma v`` for (d,) or (d, B)."""

    @abstractmethod
    def logdet(self) -> float:
        """``log det Sigma`` (``-log det A``: the evidence's ``-1/2 log det A`` is half of it)."""

    @abstractmethod
    def _whiten(self, z: np.ndarray) -> np.ndarray:
        """A square root of ``Sigma`` applied to the rows of ``z`` (n, d), in place where it
        can be: ``mean + _whiten(z)[r]`` is a draw for ``z[r] ~ N(0, I)``."""

    def sample(self, n: int, rng=None) -> np.ndarray:
        """``n`` draws (n, d) (about two (n, d) arrays of memory at the peak)."""
        n = whole_number(n, "n", minimum=0)
        x = self._whiten(generator(rng, "rng").standard_normal((n, self.size)))
        x += self.mean
        return x

    def covariance(self) -> np.ndarray:
        """The dense (d, d) covariance (for small d and tests)."""
        return self.matvec(np.eye(self.size))


class DenseGaussian(GaussianPosterior):
    """Exact ``N(mean, A^{-1})`` from the dense precision ``A`` by its Cholesky factor
    ``A = L L^T``: draws ``mean + L^{-T} z``, ``log det Sigma = -2 sum log diag L``."""

    def __init__(self, mean: np.ndarray, precision: np.ndarray, hint: str = ""):
        self.mean = np.asarray(mean, dtype=np.float64)
        self.precision = 0.5 * (precision + precision.T)
        self.L = cholesky_pd(self.precision, hint)
        self._diag = None

    def diag(self) -> np.ndarray:
        if self._diag is None:
            Linv = scipy.linalg.solve_triangular(self.L, np.eye(self.size), lower=True)
            self._diag = np.einsum("ij,ij->j", Linv, Linv)
        return self._diag

    def matvec(self, v):
        return scipy.linalg.cho_solve((self.L, True), v)

    def logdet(self) -> float:
        return float(-2.0 * np.sum(np.log(np.diag(self.L))))

    def _whiten(self, z):
        return scipy.linalg.solve_triangular(self.L, z.T, lower=True, trans="T").T


class DiagonalGaussian(GaussianPosterior):
    """``N(mean, diag(1 / precision_diag))``: every weight independent."""

    def __init__(self, mean: np.ndarray, precision_diag: np.ndarray):
        self.mean = np.asarray(mean, dtype=np.float64)
        self.precision_diag = np.asarray(precision_diag, dtype=np.float64)
        if not np.all(self.precision_diag > 0):
            raise ValueError("the diagonal precision must be positive")

    def diag(self):
        return 1.0 / self.precision_diag

    def matvec(self, v):
        v = np.asarray(v, dtype=np.float64)
        return v / (self.precision_diag if v.ndim == 1 else self.precision_diag[:, None])

    def logdet(self) -> float:
        return float(-np.sum(np.log(self.precision_diag)))

    def _whiten(self, z):
        z /= np.sqrt(self.precision_diag)
        return z


class LowRankGaussian(GaussianPosterior):
    """``N(mean, A^{-1})`` with ``A = S^{-1} (D + U diag(lam) U^T) S^{-1}``: ``S = diag(scale)``,
    ``D`` a positive diagonal, ``U`` (d, k) orthonormal columns, ``lam >= 0``.

    With ``Q = D^{-1/2} U diag(sqrt(lam))`` and its thin SVD ``Q = P diag(s) .``,
    ``D + U lam U^T = D^{1/2} (I + Q Q^T) D^{1/2}`` and ``(I + Q Q^T)^{-1/2} = I + P (diag((1 +
    s^2)^{-1/2}) - I) P^T``, which gives draws, ``Sigma v`` (Woodbury), the diagonal in
    ``O(d k)`` and ``log det A = -2 sum log scale + sum log D + sum log(1 + s^2)``.
    """

    def __init__(self, mean: np.ndarray, scale: np.ndarray, D: np.ndarray, U: np.ndarray,
                 lam: np.ndarray):
        self.mean = np.asarray(mean, dtype=np.float64)
        self.scale = np.asarray(scale, dtype=np.float64)
        self.D = np.asarray(D, dtype=np.float64)
        if not np.all(self.D > 0):
            raise ValueError("the diagonal part must be positive")
        lam = np.clip(np.asarray(lam, dtype=np.float64), 0.0, None)
        self.U, self.lam = np.asarray(U, dtype=np.float64), lam
        Q = (self.U * np.sqrt(lam)) / np.sqrt(self.D)[:, None]
        self.P, s, _ = np.linalg.svd(Q, full_matrices=False)
        self.s2 = s**2
        self.rank = int(lam.size)

    def _inner(self, v, power: float):
        """``(I + Q Q^T)^power v`` for power -1 or -1/2."""
        c = (1.0 + self.s2) ** power - 1.0
        Pv = self.P.T @ v
        return v + self.P @ (c[:, None] * Pv if v.ndim == 2 else c * Pv)

    def _outer(self, v):
        """``S D^{-1/2}`` applied to v (d,) or (d, B)."""
        f = self.scale / np.sqrt(self.D)
        return v * (f if v.ndim == 1 else f[:, None])

    def matvec(self, v):
        v = np.asarray(v, dtype=np.float64)
        return self._outer(self._inner(self._outer(v), -1.0))

    def diag(self):
        f2 = self.scale**2 / self.D
        c = 1.0 / (1.0 + self.s2) - 1.0
        return f2 * (1.0 + np.einsum("ik,k,ik->i", self.P, c, self.P))

    def logdet(self) -> float:
        return float(2.0 * np.sum(np.log(self.scale)) - np.sum(np.log(self.D))
                     - np.sum(np.log1p(self.s2)))

    def _whiten(self, z):
        c = (1.0 + self.s2) ** -0.5 - 1.0  # rows: z (I + P (c) P^T), then S D^{-1/2}
        z += ((z @ self.P) * c) @ self.P.T
        z *= self.scale / np.sqrt(self.D)
        return z


def randomized_eigh(matmat, d: int, k: int, *, oversample: int = 10, power_iterations: int = 2,
                    rng=None) -> tuple[np.ndarray, np.ndarray, int]:
    """Top ``k`` eigenpairs of a symmetric positive semidefinite (d, d) operator given by
    ``matmat`` (a (d, B) block to its product), by randomised subspace iteration and
    Rayleigh-Ritz (Halko, Martinsson & Tropp 2011, Alg. 4.4 with QR after every product, then
    Alg. 5.3).

    Returns eigenvalues (k,) in decreasing order, eigenvectors (d, k) and the number of
    operator products (blocks of ``k + oversample`` directions). With ``k + oversample >= d``
    the subspace is the whole space and the pairs are exact.
    """
    k = whole_number(k, "rank", minimum=1)
    k = min(k, d)
    b = min(d, k + int(oversample))
    rng = generator(rng, "rng")
    if b == d:
        Q = np.eye(d)
        products = 0
    else:
        Q, _ = np.linalg.qr(matmat(rng.standard_normal((d, b))))
        products = 1
        for _ in range(int(power_iterations)):
            Q, _ = np.linalg.qr(matmat(Q))
            products += 1
    Z = matmat(Q)
    products += 1
    T = Q.T @ Z
    vals, vecs = np.linalg.eigh(0.5 * (T + T.T))
    order = np.argsort(vals)[::-1][:k]
    return vals[order], Q @ vecs[:, order], products


def laplace_covariance(lik, prior, w: np.ndarray, method: str = "lowrank", *, rank: int = 20,
                       oversample: int = 10, power_iterations: int = 2, diagonal=None,
                       engine=None, rng=None, hint: str = "") -> GaussianPosterior:
    """The Laplace posterior ``N(w, A^{-1})``, ``A = J^T C J + P``, of a log-linear random
    field at its MAP ``w`` on an exact engine, in the representation ``method``.

    Parameters
    ----------
    lik
        ``CRFLogLikelihood`` (or ``MRFLogLikelihood`` for ``"dense"``).
    prior : GaussianLogPrior
        The independent Normal prior (its ``sd``).
    w : array (d,)
        The MAP weights.
    method : {"dense", "diagonal", "lowrank"}
        See the module docstring.
    rank, oversample, power_iterations
        ``"lowrank"``: eigenpairs kept, extra directions in the block, products before the
        Rayleigh-Ritz step (:func:`randomized_eigh`).
    diagonal : array (d,), optional
        ``diag(H)`` when the caller has it; by default :func:`chain_curvature_diagonal` on
        chains, else the diagonal of the dense ``H`` (small d only).
    engine : Engine, optional
        Exact engine (default: the likelihood's).
    rng
        Seed of the random starting block.
    """
    w = np.asarray(w, dtype=np.float64)
    op = CurvatureOperator(lik, w, engine)
    prec = 1.0 / prior.sd**2
    if method == "dense":
        A = exact_fisher_matrix(lik, w, op.engine) + np.diag(prec)
        return DenseGaussian(w, A, hint)
    if method not in ("diagonal", "lowrank"):
        raise ValueError(f"method must be 'dense', 'diagonal' or 'lowrank'; got {method!r}")
    h = curvature_diagonal(op) if diagonal is None else np.asarray(diagonal, dtype=np.float64)
    if method == "diagonal":
        return DiagonalGaussian(w, h + prec)
    s = prior.sd

    def mmat(V):
        return s[:, None] * op.matmat(s[:, None] * V)

    lam, U, _ = randomized_eigh(mmat, w.size, rank, oversample=oversample,
                                power_iterations=power_iterations, rng=rng)
    if lam.size == w.size:
        resid = np.zeros(w.size)  # the decomposition is complete: nothing is left over
    else:
        resid = np.clip(s**2 * h - np.einsum("ik,k,ik->i", U, lam, U), 0.0, None)
    return LowRankGaussian(w, s, 1.0 + resid, U, lam)
