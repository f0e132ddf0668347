"""Class scores of new sequences under a fitted BP-HCRF: each sequence's own state indicators.

In the BP-HCRF (Luo, Sun & Zhao, eqs. (5)-(15)) every sequence n has its own indicators z_n, drawn
from the beta-process prior given the global atoms (V, T, d), and the class model is
``p(y | X, z, pi, theta)``. For a new sequence the predictive class probability is therefore

    p(c | X) = sum_z p(z | V, T, d) p(c | X, z, pi, theta)

and, exactly as for a training sequence in the fit's objective (the clamped term plus the prior
and entropy of q(z_n), :func:`.vi.local_z_objective`), each class c gets the score

    max_{q(z | c)} ell(c | X; E_q z) + E_q[log p(z)] + H[q(z | c)]

with the global factors (q(pi), theta, q(V), q(T), q(d)) held at the fit. q(z | c) is found by the
same per-sequence coordinate step as in training (:func:`.vi.z_step`), started from the prior usage.
The class probabilities are these scores normalised over c.

The score is the evidence lower bound of ``log p(c | X)`` with one substitution, the same as in
the fit (Luo, Sun & Zhao, eq. (30)): ``ell`` is ``log p(c | X, z)`` evaluated at the expected
potentials (``E_q z`` in eq. (14)) instead of its expectation ``E_q[log p(c | X, z)]``. The
potentials are linear in z and ``log Z`` is convex in them, so by Jensen's inequality ``ell`` is
at least that expectation: the score is *not* a lower bound on ``log p(c | X)``, and can exceed it
(by up to 0.72 nats over 200 random two-state models against enumeration of z, with ``exp`` of
the scores summing to 1.52 over the classes). Where q(z | c) is a point mass the two agree.

The prior-only rule (every new sequence gets ``E z = usage``) is the ``rule="prior"`` alternative
of the predictor.
"""

from __future__ import annotations

import numpy as np

from pymc_crf.fitters.beta_process.likelihood import HCRFData
from pymc_crf.fitters.beta_process.vi import z_step
from pymc_crf.graphs.batch import GraphBatch

__all__ = ["class_scores_local_z"]


def class_scores_local_z(batch: GraphBatch, X: np.ndarray, W: dict, prior_logit: np.ndarray,
                         usage: np.ndarray, n_classes: int, engine, *, max_iter: int = 20,
                         tol: float = 1e-4, max_halvings: int = 8
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Per-class variational scores of ``log p(c | X)`` of new sequences (see the module
    docstring: an approximation, not a bound).

    Parameters
    ----------
    batch : GraphBatch
        The new sequences (chains).
    X : (N, F) array
        Their sign-split node features (:func:`.fitter.sign_split`).
    W : dict
        Effective weights ``theta * E log pi`` with keys ``"x"``, ``"y"``, ``"e"``.
    prior_logit : (S,) array
        ``E log p(z_k = 1 | .) - E log p(z_k = 0 | .)`` under the fitted q(V), q(T), q(d).
    usage : (S,) array
        Prior usage ``E_q[p(z_k = 1)]``, the starting point of q(z | c).
    n_classes : int
    engine
        None for the data term's compiled pass over the pair chains, or a chain inference engine
        (:func:`.likelihood.data_term`).
    max_iter, tol
        Coordinate steps per class; stop when no sequence's objective rises by more than ``tol``.
    max_halvings
        Backtracking halvings of each step.

    Returns
    -------
    scores : (G, C) array
        The scores, up to one constant shared by all classes and sequences.
    rho : (C, G, S) array
        q(z_nk = 1 | c) at the optimum.
    """
    G, S = batch.n_graphs, usage.shape[0]
    scores = np.empty((G, n_classes))
    rhos = np.empty((n_classes, G, S))
    for c in range(n_classes):
        data = HCRFData(batch, X, np.full(G, c, np.int64), n_classes)
        rho = np.tile(np.clip(usage, 1e-6, 1 - 1e-6), (G, 1))
        local = None
        for _ in range(max_iter):
            rho, new_local = z_step(data, engine, W, rho, prior_logit, max_halvings)
            if local is not None and np.max(new_local - local) <= tol:
                local = new_local
                break
            local = new_local
        scores[:, c] = local
        rhos[c] = rho
    return scores, rhos
