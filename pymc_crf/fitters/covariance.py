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
  ``diag(H)`` is exact (:func:`~.bethe_laplace.hessian.curvature_diagonal`); the per-position
  diagonal of :mod:`pymc_crf.fitters.diagonal_laplace` drops the covariances between positions.
* ``"lowrank"`` (:class:`LowRankGaussian`): the prior-preconditioned curvature
  ``M = S H S`` (``S = diag(sigma)``) by its top k eigenpairs ``M ~ U diag(lam) U^T``, found by
  randomised subspace iteration with Rayleigh-Ritz on blocks of Hessian-vector products
  (Halko, Martinsson & Tropp 2011, Algs. 4.4 and 5.3); the eigen-decomposed "low-rank" Laplace
  of Daxberger et al. 2021, here plus a diagonal: the part of ``diag(M)`` the k pairs leave out
  is kept on the diagonal, so ``A ~ S^{-1} (I + R + U diag(lam) U^T) S^{-1}`` with
  ``R = diag(max(diag(M) - diag(U diag(lam) U^T), 0))``. The matrix identities of a diagonal
  plus low rank (Woodbury) give every operation in ``O(d k)``; with ``k = d`` it is exact.

:class:`ImplicitGaussian` keeps the exact ``A`` as an operator and never forms ``A^{-1}``:
``Sigma v`` is a preconditioned conjugate-gradient solve on Hessian-vector products, and draws
come by perturbation-optimisation (Papandreou & Yuille 2010; Orieux, Feron & Giovannelli 2012):
with ``b = J^T (t(y~) - E t) + P^{1/2} e`` for labellings ``y~`` drawn from the CRF at the mode
(one per graph, so ``Cov(J^T (t(y~) - E t)) = J^T C J = H``) and ``e ~ N(0, I)``,
``delta = A^{-1} b`` has mean 0 and covariance ``A^{-1} A A^{-1} = A^{-1}`` exactly. Its law is a
sum of independent per-graph terms (nearly Gaussian when many graphs share a weight); each draw
costs one CG solve, so a block of draws costs a few dozen blocked forward-backward products
whatever ``d`` is.
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
from pymc_crf.validation import generator, positive_number, whole_number

__all__ = ["DenseGaussian", "DiagonalGaussian", "GaussianPosterior", "ImplicitGaussian",
           "LanczosQuadrature", "LowRankGaussian", "cholesky_inverse", "conjugate_gradient",
           "inverse_pd", "lanczos_quadrature", "laplace_covariance", "randomized_eigh"]


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
    return cholesky_inverse(cholesky_pd(A, hint), A, hint)


def cholesky_inverse(L: np.ndarray, A: np.ndarray, hint: str = "") -> np.ndarray:
    """``A^{-1}`` from the lower Cholesky factor ``L`` of ``A`` (LAPACK ``potri``, ``2 d^3 / 3``
    flops), symmetrised; the error of :func:`cholesky_pd` if ``potri`` fails."""
    inv, info = scipy.linalg.lapack.dpotri(L, lower=1)
    if info != 0:
        raise _not_pd(float(np.linalg.eigvalsh(0.5 * (A + A.T)).min()), hint)
    _mirror_lower(inv)
    return inv


def _mirror_lower(a: np.ndarray, block: int = 512) -> None:
    """Copy the lower triangle of a square matrix onto its upper one, in place, by row blocks
    (one transposed copy of the matrix; ``np.tril`` forms masks and two more copies)."""
    d = a.shape[0]
    for i0 in range(0, d, block):
        i1 = min(d, i0 + block)
        diag = a[i0:i1, i0:i1]
        diag[...] = np.tril(diag) + np.tril(diag, -1).T
        a[i0:i1, i1:] = a[i1:, i0:i1].T


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

    @classmethod
    def from_cholesky(cls, mean: np.ndarray, precision: np.ndarray, L: np.ndarray
                      ) -> DenseGaussian:
        """The Gaussian of a symmetric ``precision`` already factorised as ``L L^T`` (lower
        ``L``), without a second factorisation; the arrays are kept, not copied."""
        g = cls.__new__(cls)
        g.mean = np.asarray(mean, dtype=np.float64)
        g.precision, g.L, g._diag = precision, L, None
        return g

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


def conjugate_gradient(matmat, B: np.ndarray, preconditioner: np.ndarray, *, tol: float = 1e-6,
                       maxiter: int = 2000) -> tuple[np.ndarray, int, np.ndarray]:
    """Solve ``A X = B`` for a symmetric positive definite operator ``matmat`` (a (d, n) block
    to its product) by preconditioned conjugate gradients, the n columns in lockstep (one block
    product per iteration), with the diagonal preconditioner ``M^{-1} = diag(preconditioner)``.

    Stops when every column's residual ``||B - A X|| / ||B||`` is below ``tol``. Returns
    ``(X, iterations, relative residuals)``.
    """
    B = np.asarray(B, dtype=np.float64)
    one = B.ndim == 1
    B = B[:, None] if one else B
    X = np.zeros_like(B)
    R = B.copy()
    bnorm = np.linalg.norm(B, axis=0)
    bnorm[bnorm == 0.0] = 1.0
    rel = np.linalg.norm(R, axis=0) / bnorm
    Z = preconditioner[:, None] * R
    P = Z.copy()
    rz = np.einsum("ij,ij->j", R, Z)
    it = 0
    while it < maxiter and rel.max() >= tol:
        AP = matmat(P)
        pap = np.einsum("ij,ij->j", P, AP)
        live = rel >= tol  # converged columns (a zero right-hand side too) stay where they are
        if np.any(pap[live] <= 0):
            raise _not_pd(float(pap[live].min()), " (a non-positive curvature met by conjugate "
                          "gradients)")
        alpha = np.where(live, rz / np.where(live, pap, 1.0), 0.0)
        X += alpha * P
        R -= alpha * AP
        rel = np.linalg.norm(R, axis=0) / bnorm
        Z = preconditioner[:, None] * R
        rz_new = np.einsum("ij,ij->j", R, Z)
        P = Z + np.where(live, rz_new / np.where(rz > 0, rz, 1.0), 0.0) * P
        rz = rz_new
        it += 1
    return (X[:, 0] if one else X), it, rel


class ImplicitGaussian:
    """The exact Laplace posterior ``N(mean, A^{-1})``, ``A = H + P``, of a log-linear CRF or
    MRF with ``A`` only applied, never formed or inverted (module docstring): ``Sigma v`` by
    conjugate gradients, draws by perturbation-optimisation. Memory ``O(d n)`` for n draws.

    Parameters
    ----------
    op : CurvatureOperator
        ``H`` at ``mean`` on an exact engine (``J^T C J``: log-linear potentials only).
    prior_sd : array (d,)
        The independent Normal prior's sds (``P = diag(prior_sd^-2)``).
    diagonal : array (d,), optional
        ``diag(H)`` (the preconditioner); computed (:func:`curvature_diagonal`) if not given.
    tol, maxiter
        Conjugate-gradient stopping rule (relative residual) and iteration cap.
    block : int
        Draws solved together (one block of Hessian-vector products per iteration).

    Attributes
    ----------
    iterations : list of int
        CG iterations of every solve so far.
    """

    def __init__(self, op: CurvatureOperator, prior_sd: np.ndarray,
                 diagonal: np.ndarray | None = None, *, tol: float = 1e-4, maxiter: int = 2000,
                 block: int = 16):
        self.op = op
        self.mean = op.maps.w
        self.sd = np.asarray(prior_sd, dtype=np.float64)
        if self.sd.shape != self.mean.shape or not np.all(self.sd > 0):
            raise ValueError(f"prior_sd must be {self.mean.size} positive numbers; got shape "
                             f"{self.sd.shape}")
        h = curvature_diagonal(op) if diagonal is None else np.asarray(diagonal, np.float64)
        # CG runs in the prior-whitened coordinates z = w / sd, where A becomes S H S + I
        # (eigenvalues >= 1), preconditioned by its diagonal
        self._precond = 1.0 / (self.sd**2 * h + 1.0)
        self.tol = positive_number(tol, "tol")
        self.maxiter = whole_number(maxiter, "maxiter", minimum=1)
        self.block = whole_number(block, "block", minimum=1)
        self.iterations: list[int] = []

    @property
    def size(self) -> int:
        return int(self.mean.size)

    def _whitened_matmat(self, Z: np.ndarray) -> np.ndarray:
        s = self.sd[:, None]
        return s * self.op.matmat(s * Z) + Z

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """``Sigma v = A^{-1} v`` for (d,) or (d, B), by conjugate gradients."""
        v = np.asarray(v, dtype=np.float64)
        s = self.sd if v.ndim == 1 else self.sd[:, None]
        Z, it, _ = conjugate_gradient(self._whitened_matmat, s * v, self._precond, tol=self.tol,
                                      maxiter=self.maxiter)
        self.iterations.append(it)
        return s * Z

    def perturbations(self, n: int, rng=None) -> np.ndarray:
        """``n`` independent vectors (d, n) with mean 0 and covariance ``A``: the centred
        sufficient statistics of labellings drawn at ``mean`` (covariance ``H``) plus
        ``N(0, P)`` noise."""
        op, rng = self.op, generator(rng, "rng")
        maps, b, K = op.maps, op.batch, op.K
        out = np.zeros((self.size, n))
        if op.chain:
            parts = list(op.chunk_marginals())
        else:
            edge = np.ascontiguousarray(np.broadcast_to(maps.edge, (b.n_edges, K, K)))
            m = op.engine.marginals(b, maps.node, edge)
            parts = [(b, slice(0, b.n_total_nodes), slice(0, b.n_edges), m.node, m.edge)]
        for sub, rows, erows, mu, xi in parts:
            E = sub.n_edges
            edge = maps.edge if maps.shared else maps.edge[erows]
            edge = np.ascontiguousarray(np.broadcast_to(edge, (E, K, K)))
            Y = op.engine.sample(sub, maps.node[rows], edge, n, rng).T  # (N_c, n)
            cols = np.arange(n)
            Un = np.repeat(-mu[:, :, None], n, axis=2)
            Un[np.arange(sub.n_total_nodes)[:, None], Y, cols] += 1.0
            Ue = np.repeat(-xi[..., None], n, axis=3)
            src, dst = sub.edges[:, 0], sub.edges[:, 1]
            Ue[np.arange(E)[:, None], Y[src], Y[dst], cols] += 1.0
            if maps.shared:
                Ue = Ue.sum(axis=0, keepdims=True)
            maps.pull(Un, Ue, rows, erows, out=out)
        out *= np.sqrt(op.scale)  # an MRF's H is n_samples times one sample's covariance
        out += rng.standard_normal(out.shape) / self.sd[:, None]
        return out

    def sample(self, n: int, rng=None, antithetic: bool = True) -> np.ndarray:
        """``n`` draws (n, d) with the mean and covariance of ``N(mean, A^{-1})``; with
        ``antithetic`` they come in pairs ``mean +- delta`` (half the solves, and the draws'
        mean is ``mean`` exactly)."""
        n = whole_number(n, "n", minimum=0)
        rng = generator(rng, "rng")
        m = (n + 1) // 2 if antithetic else n
        deltas = []
        for j0 in range(0, m, self.block):
            k = min(self.block, m - j0)
            deltas.append(self.matvec(self.perturbations(k, rng)).T)
        delta = np.concatenate(deltas) if deltas else np.zeros((0, self.size))
        if antithetic:
            delta = np.stack([delta, -delta], axis=1).reshape(-1, self.size)[:n]
        return self.mean + delta

    def variance_estimate(self, probes: int = 16, rng=0) -> np.ndarray:
        """Estimate of ``diag(Sigma)`` (d,) by Hutchinson's diagonal estimator (Bekas,
        Kokiopoulou & Saad 2007) on ``Sigma = S (I - A~^{-1} S H S) S``: with Rademacher ``z``,
        ``Sigma_ii = sd_i^2 (1 - E[z_i (A~^{-1} S H S z)_i])``. Its error is small where the
        data say little (``H`` small: the estimate is then ``sd_i^2`` nearly exactly), unlike
        the draws' second moments, whose relative error is ``sqrt(2 / probes)`` everywhere.
        Each estimate of ``(A~^{-1} S H S)_ii`` is clipped to [0, 1], where that diagonal
        lies (``H`` is positive semi-definite, so ``A~^{-1} S H S = I - A~^{-1}`` has
        eigenvalues in [0, 1)): ``Sigma_ii`` in ``(0, sd_i^2]``. Unclipped, the estimate of a
        weight whose prior sd is far below what the data could pin can fall outside it by
        its noise alone, and the learned scales' fixed-point steps read a group with no
        well-determined parameter as one with a negative number of them. One block of
        ``probes`` products and one conjugate-gradient solve."""
        probes = whole_number(probes, "probes", minimum=1)
        Z = generator(rng, "rng").choice([-1.0, 1.0], size=(self.size, probes))
        s = self.sd[:, None]
        SHSz = s * self.op.matmat(s * Z)
        X, it, _ = conjugate_gradient(self._whitened_matmat, SHSz, self._precond, tol=self.tol,
                                      maxiter=self.maxiter)
        self.iterations.append(it)
        return self.sd**2 * (1.0 - np.clip(np.mean(Z * X, axis=1), 0.0, 1.0))

    def logdet(self, probes: int = 16, steps: int = 60, rng=0) -> float:
        """``log det Sigma = -log det A`` by stochastic Lanczos quadrature
        (:func:`lanczos_quadrature`) of ``log det A~ = tr log A~`` for the whitened
        ``A~ = S H S + I`` (eigenvalues >= 1), ``steps`` Lanczos steps on ``probes`` Rademacher
        vectors; ``log det A = log det A~ - 2 sum log sd``. The default ``rng`` is fixed, so
        estimates at nearby points share their probes (common random numbers). With
        ``d <= probes`` the trace is exact. Standard error: :attr:`logdet_se` (0 then)."""
        quad = lanczos_quadrature(self._whitened_matmat, self.size, probes, steps, rng)
        est = quad.estimates(lambda t: np.log(np.clip(t, 1.0, None)))
        self.logdet_se = quad.standard_error(est)
        return float(-(est.mean() - 2.0 * np.sum(np.log(self.sd))))


class LanczosQuadrature:
    """The Gauss quadrature rules of stochastic Lanczos quadrature, one per probe: ``z^T f(M) z
    ~ sum_k weights[j, k] f(nodes[j, k])`` for probe ``j`` (weights include ``||z||^2 = d``),
    so ``tr f(M)`` is estimated for any ``f`` from one Lanczos run (Ubaru, Chen & Saad
    2017). ``exact``: the probes were the unit vectors (the trace is exact)."""

    def __init__(self, nodes: np.ndarray, weights: np.ndarray, exact: bool, steps: int):
        self.nodes, self.weights, self.exact, self.steps = nodes, weights, exact, steps

    @property
    def probes(self) -> int:
        return int(self.nodes.shape[0])

    def estimates(self, f) -> np.ndarray:
        """Per-probe estimates (probes,) of ``tr f(M)`` (``f`` elementwise on an array)."""
        return np.sum(self.weights * f(self.nodes), axis=1)

    def trace(self, f) -> float:
        """The estimate of ``tr f(M)``: the mean over the probes."""
        return float(self.estimates(f).mean())

    def standard_error(self, est: np.ndarray) -> float:
        """Standard error of the mean of per-probe estimates (0 for the exact trace)."""
        return 0.0 if self.exact else float(est.std(ddof=1) / np.sqrt(est.size))


def _gauss_rules(alphas: list, betas: list, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights (probes, m) of the Lanczos tridiagonals (Golub & Welsch 1969)."""
    m, probes = len(alphas), alphas[0].size
    nodes, weights = np.empty((probes, m)), np.empty((probes, m))
    for j in range(probes):
        T = np.diag([a[j] for a in alphas])
        off = [b[j] for b in betas[:m - 1]]
        T += np.diag(off, 1) + np.diag(off, -1)
        theta, U = np.linalg.eigh(T)
        nodes[j], weights[j] = theta, d * U[0] ** 2
    return nodes, weights


def lanczos_quadrature(matmat, d: int, probes: int = 16, steps: int = 60, rng=0, *,
                       check=None, atol: float = 0.0, every: int = 5) -> LanczosQuadrature:
    """Stochastic Lanczos quadrature of a symmetric positive semidefinite (d, d) operator
    ``matmat`` (a (d, B) block to its product): ``probes`` Rademacher vectors in lockstep (one
    block product per step), at most ``steps`` Lanczos steps without reorthogonalisation
    (Ubaru, Chen & Saad 2017). With ``check`` (a function of the eigenvalues) the run
    stops early once the estimate of ``tr check(M)`` moved by less than ``atol`` over the last
    ``every`` steps. With ``d <= probes`` the probes are the unit vectors (the exact trace; with
    d steps the exact quadrature)."""
    probes = whole_number(probes, "probes", minimum=2)
    steps = whole_number(steps, "steps", minimum=1)
    rng = generator(rng, "rng")
    exact_trace = d <= probes
    if exact_trace:
        V, probes = np.sqrt(d) * np.eye(d), d
    else:
        V = rng.choice([-1.0, 1.0], size=(d, probes))
    Q = V / np.sqrt(d)
    Q_prev = np.zeros_like(Q)
    alphas: list[np.ndarray] = []
    betas: list[np.ndarray] = []
    beta = np.zeros(probes)
    last = None
    for k in range(min(steps, d)):
        W = matmat(Q) - beta * Q_prev
        a = np.einsum("ij,ij->j", Q, W)
        W -= a * Q
        alphas.append(a)
        beta = np.linalg.norm(W, axis=0)
        if np.all(beta <= 1e-12):
            break
        betas.append(beta)
        Q_prev, Q = Q, W / np.where(beta > 0, beta, 1.0)
        if check is not None and (k + 1) % every == 0:
            nodes, weights = _gauss_rules(alphas, betas, d)
            value = float(np.mean(np.sum(weights * check(nodes), axis=1)))
            if last is not None and abs(value - last) < atol:
                break
            last = value
    nodes, weights = _gauss_rules(alphas, betas, d)
    return LanczosQuadrature(nodes, weights, exact_trace, len(alphas))


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
        ``diag(H)`` when the caller has it; by default :func:`curvature_diagonal` (in
        ``O(n K^3)`` on chains, else from d Hessian-vector products: small d only).
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
