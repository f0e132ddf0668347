"""The shared base of the iterative approximate engines (BP, TreeEP, mean field).

Each engine implements one method, ``run(batch, node_logpot, edge_logpot) ->``
:class:`~pymc_crf.inference.base.LoopyResult`; this class derives the whole
:class:`~pymc_crf.inference.base.Engine` interface from it the same way for all of them:

* ``log_partition`` / ``marginals``: the run's estimate of log Z and its beliefs;
* ``map_assignment``: the argmax of the beliefs of :meth:`LoopyEngine.decoding_run` (BP runs
  max-product there), scored exactly;
* ``sample``: exact-model samples from independent Gibbs chains, never from the approximation
  (a belief product is not a joint distribution on loopy graphs);
* constructor settings ``tol``, ``max_iter``, ``damping`` validated in one place, and one
  :class:`~pymc_crf.inference.base.ConvergenceWarning` naming the method when some graphs of a
  batch did not converge.

This lives beside ``base.py`` rather than in it because sampling delegates to
:class:`~pymc_crf.inference.gibbs.Gibbs`, itself an engine built on ``base.py``.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import (
    Engine,
    LoopyResult,
    MapResult,
    Marginals,
    check_iteration_settings,
    check_potentials,
    convergence_report,
    decode,
    warn_unconverged,
)
from pymc_crf.inference.gibbs import Gibbs
from pymc_crf.validation import whole_number

__all__ = ["LoopyEngine"]


class LoopyEngine(Engine):
    """Base class of the iterative approximate engines (see the module docstring).

    Parameters
    ----------
    tol : float
        A graph has converged when its largest change in a sweep is below ``tol``.
    max_iter : int
        Cap on sweeps.
    damping : float
        Weight of the old value in each update, in [0, 1).
    warn : bool
        Emit a :class:`~pymc_crf.inference.base.ConvergenceWarning` when some graphs did not
        converge.
    """

    exact = False
    method = "iterative inference"  # named in the non-convergence warning
    hint = "try more damping, more iterations or another engine"

    def __init__(self, tol: float, max_iter: int, damping: float, warn: bool = True):
        self.tol, self.max_iter, self.damping = check_iteration_settings(tol, max_iter, damping)
        self.warn = bool(warn)

    @abstractmethod
    def run(self, batch: GraphBatch, node_logpot, edge_logpot) -> LoopyResult:
        """Iterate to convergence (or ``max_iter``); beliefs, log Z estimate and report."""

    def stopping(self) -> str:
        """The stopping settings, as named in the non-convergence warning."""
        return f"max_iter={self.max_iter} (tol={self.tol:g}, damping={self.damping})"

    def report(self, iterations: np.ndarray, max_change: np.ndarray, converged: np.ndarray,
               method: str | None = None) -> dict:
        """The per-graph convergence report of a run; warns (if ``warn``) when some graphs did
        not converge. ``method`` overrides the class's name for the algorithm."""
        rep = convergence_report(iterations, max_change, converged)
        if self.warn and not converged.all():
            warn_unconverged(rep, method or self.method, self.stopping(), self.hint,
                             stacklevel=4)
        return rep

    # -------------------------------------------------------------- Engine interface
    def log_partition(self, batch: GraphBatch, node_logpot, edge_logpot) -> np.ndarray:
        """The engine's estimate of log Z per graph (see ``approximation``)."""
        return self.run(batch, node_logpot, edge_logpot).log_z

    def marginals(self, batch: GraphBatch, node_logpot, edge_logpot) -> Marginals:
        """Estimated log Z, node and pair beliefs, and the per-graph convergence report."""
        return self.run(batch, node_logpot, edge_logpot).marginals(np.shape(edge_logpot)[0] == 1)

    def decoding_run(self, batch: GraphBatch, node: np.ndarray, edge: np.ndarray) -> LoopyResult:
        """The run whose node beliefs ``map_assignment`` decodes (by default the plain run)."""
        return self.run(batch, node, edge)

    def map_assignment(self, batch: GraphBatch, node_logpot, edge_logpot) -> MapResult:
        """Argmax of the node beliefs of :meth:`decoding_run` (exact on trees without ties; a
        heuristic on loopy graphs), with the exact unnormalised log score of that labelling."""
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        return decode(batch, node, edge, self.decoding_run(batch, node, edge).log_node)

    def sample(self, batch: GraphBatch, node_logpot, edge_logpot, n_samples: int,
               rng: np.random.Generator | int | None = None) -> np.ndarray:
        """``n_samples`` independent labellings (n_samples, N) from the model itself (not from
        the beliefs): one Gibbs chain per labelling (the :class:`Gibbs` defaults: uniform start,
        200 sweeps of burn-in), all run together on copies of the batch. Consecutive sweeps of
        one chain would be correlated draws; on a strongly coupled grid every one would have the
        sign of the first."""
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        n = whole_number(n_samples, "n_samples", minimum=0)
        if n <= 1:
            return Gibbs().sample(batch, node, edge, 1, rng)[:n]
        copies = batch.cached(("loopy", "copies", n),
                              lambda: batch.subset(np.tile(np.arange(batch.n_graphs), n)))
        edges = edge if edge.shape[0] == 1 else np.tile(edge, (n, 1, 1))
        draw = Gibbs().sample(copies, np.tile(node, (n, 1)), edges, 1, rng)
        return draw.reshape(n, batch.n_total_nodes)
