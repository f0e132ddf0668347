"""The shared base of the iterative approximate engines (BP, TreeEP, mean field).

Each engine implements one method, ``run(batch, node_logpot, edge_logpot) ->``
:class:`~pymc_crf.inference.base.LoopyResult`; this class derives the whole
:class:`~pymc_crf.inference.base.Engine` interface from it the same way for all of them:

* ``log_partition`` / ``marginals``: the run's estimate of log Z and its beliefs;
* ``map_assignment``: the argmax of the beliefs of :meth:`LoopyEngine.decoding_run` (BP runs
  max-product there), scored exactly;
* ``sample``: samples of the model itself, never of the approximation (a belief product is not
  a joint distribution on loopy graphs): exact junction-tree draws where the treewidth allows,
  else independent Gibbs chains;
* constructor settings ``tol``, ``max_iter``, ``damping`` validated in one place, and one
  :class:`~pymc_crf.inference.base.ConvergenceWarning` naming the method when some graphs of a
  batch did not converge.

This lives beside ``base.py`` rather than in it because sampling delegates to
:class:`~pymc_crf.inference.junction_tree.JunctionTree` and
:class:`~pymc_crf.inference.gibbs.Gibbs`, themselves engines built on ``base.py``.
"""

from __future__ import annotations

from abc import abstractmethod
from functools import partial

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
from pymc_crf.inference.gibbs import independent_draws
from pymc_crf.inference.junction_tree import JunctionTree
from pymc_crf.validation import flag, generator, positive_number, whole_number

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
        self.warn = flag(warn, "warn")
        # sample(): the junction tree's budget (clique-table entries of all distinct graph
        # shapes), and the Gibbs settings where it is exceeded
        self.sample_settings = {"exact_table_entries": 2 ** 20, "chains": 16, "burn_in": 200,
                                "thin": 10}

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
        """Argmax of the node beliefs of :meth:`decoding_run`, with the exact unnormalised log
        score of that labelling. For BP's max-product beliefs it is the MAP on trees without ties
        (a heuristic on loopy graphs); for sum-product or mean-field beliefs (TreeEP, mean field)
        it is the per-node most probable label, which need not be the MAP even on a chain."""
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        return decode(batch, node, edge, self.decoding_run(batch, node, edge).log_node)

    def sample(self, batch: GraphBatch, node_logpot, edge_logpot, n_samples: int,
               rng: np.random.Generator | int | None = None) -> np.ndarray:
        """``n_samples`` labellings (n_samples, N) from the model itself, never from the beliefs.

        Exact draws of the junction tree for the graphs where it is cheap (treewidth within its
        default limit, clique tables of the distinct graph shapes together within
        ``sample_settings["exact_table_entries"]``, 2^20 by default, smallest first), and draws
        of independent Gibbs chains for the others
        (:func:`~pymc_crf.inference.gibbs.independent_draws` with the other ``sample_settings``:
        16 chains, 200 sweeps of burn-in, a draw every 10 sweeps by default), approximate as far
        as the chains have not mixed. Change the settings by assigning to the attribute."""
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        n = whole_number(n_samples, "n_samples", minimum=0)
        gibbs = dict(self.sample_settings)
        # a float for the cache key (a 0-d array is unhashable); NaN would admit every graph
        budget = positive_number(gibbs.pop("exact_table_entries"),
                                 'sample_settings["exact_table_entries"]', allow_inf=True)
        exact = JunctionTree()
        mask = batch.cached(("loopy_sample", "exact_graphs", node.shape[1], budget),
                            lambda: exact.fitting_graphs(batch, node.shape[1], budget))
        if mask.all():
            return exact.sample(batch, node, edge, n, rng)
        if not mask.any():
            return independent_draws(batch, node, edge, n, rng, **gibbs)
        # one graph too wide for the junction tree leaves the others exact: the batch is split
        rng = generator(rng, "rng")  # one stream for both parts (a seed would restart in each)
        out = np.empty((n, batch.n_total_nodes), np.int64)
        for part, draw in ((mask, exact.sample), (~mask, partial(independent_draws, **gibbs))):
            graphs = np.flatnonzero(part)
            sub, nodes, edges = batch.cached(
                ("loopy_sample", "part", graphs.tobytes()),
                lambda graphs=graphs: (batch.subset(graphs), batch.node_index(graphs),
                                       batch.edge_index(graphs)))
            out[:, nodes] = draw(sub, node[nodes], edge if edge.shape[0] == 1 else edge[edges],
                                 n, rng)
        return out
