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
  batch did not converge;
* the bound check (:meth:`LoopyEngine.check_bound`): the score of any single labelling is a lower
  bound on log Z (one term of the sum), so the labelling decoded from the beliefs and improved
  by iterated conditional modes (:func:`labelling_bound`) is scored, recorded in the report
  (``bound``, ``bound_ok``), and an estimate below it draws one
  :class:`~pymc_crf.inference.base.ApproximateInferenceWarning`.

This lives beside ``base.py`` rather than in it because sampling delegates to
:class:`~pymc_crf.inference.junction_tree.JunctionTree` and
:class:`~pymc_crf.inference.gibbs.Gibbs`, themselves engines built on ``base.py``.
"""

from __future__ import annotations

from abc import abstractmethod
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from pymc_crf.docstrings import fill_doc
from pymc_crf.graphs.adjacency import colour_classes, message_layout
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import (
    ENGINE_DOCS,
    ApproximateInferenceWarning,
    Engine,
    LoopyResult,
    MapResult,
    Marginals,
    check_iteration_settings,
    check_potentials,
    convergence_report,
    labelling_score,
    warn_at_caller,
    warn_unconverged,
)
from pymc_crf.inference.conditionals import slot_entry
from pymc_crf.inference.gibbs import independent_draws
from pymc_crf.inference.junction_tree import JunctionTree
from pymc_crf.kernel_cache import njit
from pymc_crf.validation import flag, generator, positive_number, whole_number

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["LoopyEngine", "bound_slack", "icm", "labelling_bound"]

#: sweeps of iterated conditional modes in :func:`labelling_bound` (each sweep raises the score or
#: stops the graph; on the graphs measured it stopped within a handful)
ICM_SWEEPS = 50
#: random ICM starts of the bound check on graphs whose engine did not converge
RANDOM_STARTS = 8


@njit(cache=True, inline="always")
def _local_field(node, edge, shared, labels, edge_of, flip, src, in_ptr, in_idx, i, skip, out):
    """out[k]: node i's score terms with label k given its neighbours' labels, leaving out the
    slot ``skip`` (-1: none)."""
    K = node.shape[1]
    for k in range(K):
        w = node[i, k]
        for p in range(in_ptr[i], in_ptr[i + 1]):
            d = in_idx[p]
            if d != skip:
                w += slot_entry(edge, shared, edge_of, flip, d, k, labels[src[d]])
        out[k] = w


@njit(cache=True)
def _icm(node, edge, shared, labels, order, ptr, edges, edge_graph, edge_of, flip, src, in_ptr,
         in_idx, node_graph, active, max_sweeps):
    """Iterated conditional modes in place on the graphs marked ``active`` (cleared as they
    stop), with pair moves: a sweep gives each node its best
    label given its neighbours' (one colour class at a time), then each edge its best pair of
    labels given the other neighbours' (escaping the single-flip optima where two neighbours
    would have to change together); a move is taken only when strictly better, so the score
    never decreases and ties keep the labels. Stops per graph after a sweep without a move, or
    after ``max_sweeps``."""
    K = node.shape[1]
    fu = np.empty(K)
    fv = np.empty(K)
    n_graphs = active.shape[0]
    changed = np.zeros(n_graphs, np.bool_)
    for _ in range(max_sweeps):
        changed[:] = False
        for c in range(ptr.shape[0] - 1):
            for j in range(ptr[c], ptr[c + 1]):
                i = order[j]
                g = node_graph[i]
                if not active[g]:
                    continue
                _local_field(node, edge, shared, labels, edge_of, flip, src, in_ptr, in_idx, i,
                             -1, fu)
                best = labels[i]
                for k in range(K):
                    if fu[k] > fu[best]:
                        best = k
                if best != labels[i]:
                    labels[i] = best
                    changed[g] = True
        for e in range(edges.shape[0]):
            g = edge_graph[e]
            if not active[g]:
                continue
            u, v = edges[e, 0], edges[e, 1]
            _local_field(node, edge, shared, labels, edge_of, flip, src, in_ptr, in_idx, u,
                         2 * e + 1, fu)
            _local_field(node, edge, shared, labels, edge_of, flip, src, in_ptr, in_idx, v,
                         2 * e, fv)
            tab = 0 if shared else e
            ba, bb = labels[u], labels[v]
            cur = fu[ba] + fv[bb] + edge[tab, ba, bb]
            top = cur
            for a in range(K):
                for b in range(K):
                    w = fu[a] + fv[b] + edge[tab, a, b]
                    if w > top:
                        top, ba, bb = w, a, b
            if top > cur:
                labels[u], labels[v] = ba, bb
                changed[g] = True
        any_active = False
        for g in range(n_graphs):
            if not changed[g]:
                active[g] = False
            if active[g]:
                any_active = True
        if not any_active:
            break


def icm(batch: GraphBatch, node: np.ndarray, edge: np.ndarray, labels: np.ndarray,
        max_sweeps: int = ICM_SWEEPS, graphs: np.ndarray | None = None) -> np.ndarray:
    """Iterated conditional modes with pair moves from ``labels`` (N,): a labelling whose score
    is at least that of the start (checked tables, as
    :func:`~pymc_crf.inference.base.check_potentials` returns them); only the graphs marked in
    ``graphs`` (bool (G,); default all) move."""
    out = np.array(labels, dtype=np.int64)
    active = (np.ones(batch.n_graphs, np.bool_) if graphs is None
              else np.array(graphs, dtype=np.bool_))
    if batch.n_edges == 0:
        return np.where(active[batch.node_graph], np.argmax(node, axis=1), out)
    st = message_layout(batch)
    order, ptr = colour_classes(batch)
    _icm(node, edge, edge.shape[0] == 1, out, order, ptr, batch.edges, batch.edge_graph, st.edge,
         st.flip, st.src, st.in_ptr, st.in_idx, batch.node_graph, active, max_sweeps)
    return out


def labelling_bound(batch: GraphBatch, node: np.ndarray, edge: np.ndarray,
                    log_beliefs: np.ndarray, unsettled: np.ndarray | None = None,
                    seed: int = 0) -> MapResult:
    """A good single labelling and its score, a lower bound on log Z per graph.

    The best per graph of several starts improved by iterated conditional modes with pair moves
    (:func:`icm`): the argmax of the node beliefs and the argmax of the node potentials, and on
    the graphs marked ``unsettled`` (bool (G,): those whose engine did not converge, whose
    beliefs are a poor guide) also ``RANDOM_STARTS`` uniformly random labellings (seeded). The
    score of any labelling is one term of the sum ``Z``, so ``log Z >= score`` for every
    labelling. Costs a few sweeps without exponentials per start.
    """
    labels = icm(batch, node, edge, np.argmax(log_beliefs, axis=1))
    score = labelling_score(batch, node, edge, labels)
    starts = [(np.argmax(node, axis=1), None)]
    if unsettled is not None and unsettled.any():
        rng = np.random.default_rng(seed)
        K = node.shape[1]
        starts += [(rng.integers(0, K, batch.n_total_nodes), unsettled)
                   for _ in range(RANDOM_STARTS)]
    for start, graphs in starts:
        other = icm(batch, node, edge, start, graphs=graphs)
        other_score = labelling_score(batch, node, edge, other)
        better = other_score > score
        if graphs is not None:
            better &= graphs
        labels = np.where(better[batch.node_graph], other, labels)
        score = np.where(better, other_score, score)
    return MapResult(labels, score)


def bound_slack(bound: np.ndarray) -> np.ndarray:
    """Rounding allowance of the bound check: an estimate is below the bound when it is below
    ``bound - 1e-9 * max(1, |bound|)`` (exact engines meet it with equality when one labelling
    carries all the mass)."""
    with np.errstate(invalid="ignore"):
        return 1e-9 * np.maximum(1.0, np.abs(np.where(np.isfinite(bound), bound, 0.0)))


# the engine parameters and the options of the bound check's warning, worded once (``fill_doc``)
_loopy_doc = fill_doc({**ENGINE_DOCS, "warning_options": """
        method : str, optional
            The algorithm's name in the warning (default: the class's ``method``).
        note : str, default ""
            Added to the warning."""})


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
    @_loopy_doc
    def run(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike) -> LoopyResult:
        """Iterate to convergence (or ``max_iter``); beliefs, log Z estimate and report.

        %(tables_parameters)s

        Returns
        -------
        LoopyResult
            The normalised log beliefs, the log Z estimate per graph and the per-graph report.
        """

    def stopping(self) -> str:
        """The stopping settings, as named in the non-convergence warning."""
        return f"max_iter={self.max_iter} (tol={self.tol:g}, damping={self.damping})"

    def report(self, iterations: np.ndarray, max_change: np.ndarray, converged: np.ndarray,
               method: str | None = None) -> dict:
        """The per-graph convergence report of a run; warns (if ``warn``) when some graphs did
        not converge. ``method`` overrides the class's name for the algorithm.

        Parameters
        ----------
        iterations : ndarray (G,)
            Sweeps run per graph.
        max_change : ndarray (G,)
            Largest change of each graph's last sweep.
        converged : ndarray (G,) bool
            Whether each graph converged.
        method : str, optional
            The algorithm's name in the warning (default: the class's ``method``).

        Returns
        -------
        dict
            The report (:func:`~pymc_crf.inference.base.convergence_report`): ``iterations``,
            ``max_change``, ``converged``.
        """
        rep = convergence_report(iterations, max_change, converged)
        if self.warn and not converged.all():
            warn_unconverged(rep, method or self.method, self.stopping(), self.hint,
                             stacklevel=4)
        return rep

    @_loopy_doc
    def check_bound(self, batch: GraphBatch, node: np.ndarray, edge: np.ndarray,
                    result: LoopyResult, method: str | None = None, note: str = "") -> LoopyResult:
        """``result`` with the bound check in its report: ``bound`` (G,) the score of a good
        labelling (:func:`labelling_bound`, a lower bound on log Z) and ``bound_ok`` (G,) whether
        ``log_z`` is not below it; one :class:`ApproximateInferenceWarning` (if ``warn``) naming
        the graphs where it is. ``note`` is added to the warning (what the engine already
        tried).

        Parameters
        ----------
        %(checked_tables)s
        result : LoopyResult
            The run to check (its beliefs and its report's ``converged`` are read).
        %(warning_options)s

        Returns
        -------
        LoopyResult
            ``result`` with ``bound`` and ``bound_ok`` added to its report.
        """
        bound = labelling_bound(batch, node, edge, result.log_node,
                                unsettled=~result.report["converged"]).score
        return self.with_bound(result, bound, method, note)

    @_loopy_doc
    def with_bound(self, result: LoopyResult, bound: np.ndarray, method: str | None = None,
                   note: str = "") -> LoopyResult:
        """``result`` with ``bound`` / ``bound_ok`` in its report (see :meth:`check_bound`).

        Parameters
        ----------
        result : LoopyResult
            The run.
        bound : ndarray (G,)
            A lower bound on each graph's log Z.
        %(warning_options)s

        Returns
        -------
        LoopyResult
            ``result`` with ``bound`` and ``bound_ok`` (``log_z`` not below ``bound``, within a
            rounding slack) added to its report.
        """
        log_z = result.log_z
        with np.errstate(invalid="ignore"):
            ok = ~(log_z < bound - bound_slack(bound))
        report = dict(result.report, bound=bound, bound_ok=ok)
        if self.warn and not ok.all():
            gap = float(np.max((bound - log_z)[~ok]))
            warn_at_caller(
                f"{method or self.method}: on {int((~ok).sum())} of {ok.size} graphs the log Z "
                f"estimate ({self.approximation}) is below the score of a single labelling, a "
                f"lower bound on log Z (largest shortfall {gap:.4g}){note}. The estimate, its "
                "beliefs and anything built on them (likelihood, gradient) are far off there "
                "(report['bound_ok'] is False); use an exact engine if the graphs allow it.",
                ApproximateInferenceWarning)
        return result._replace(report=report)

    # -------------------------------------------------------------- Engine interface
    def log_partition(self, batch: GraphBatch, node_logpot: ArrayLike,
                      edge_logpot: ArrayLike) -> np.ndarray:
        """The engine's estimate of log Z per graph (see ``approximation``).

        See :meth:`Engine.log_partition` for the parameters.
        """
        return self.run(batch, node_logpot, edge_logpot).log_z

    def marginals(self, batch: GraphBatch, node_logpot: ArrayLike,
                  edge_logpot: ArrayLike) -> Marginals:
        """Estimated log Z, node and pair beliefs, and the per-graph convergence report.

        See :meth:`Engine.marginals` for the parameters.
        """
        return self.run(batch, node_logpot, edge_logpot).marginals(np.shape(edge_logpot)[0] == 1)

    @_loopy_doc
    def decoding_run(self, batch: GraphBatch, node: np.ndarray, edge: np.ndarray) -> LoopyResult:
        """The run whose node beliefs ``map_assignment`` decodes (by default the plain run).

        Parameters
        ----------
        %(checked_tables)s

        Returns
        -------
        LoopyResult
            The run.
        """
        return self.run(batch, node, edge)

    def map_assignment(self, batch: GraphBatch, node_logpot: ArrayLike,
                       edge_logpot: ArrayLike) -> MapResult:
        """Argmax of the node beliefs of :meth:`decoding_run`, improved by iterated conditional
        modes with pair moves (:func:`icm`, which never lowers the score), with the exact
        unnormalised log score of the labelling. For BP's max-product beliefs the argmax is the
        MAP on trees without ties, which local moves leave as it is; on loopy graphs it is a
        heuristic, and where max-product BP does not converge (common on image grids with strong
        couplings) local search raises its score. For sum-product or mean-field beliefs (TreeEP,
        mean field) the argmax is the per-node most probable label, which need not be the MAP
        even on a chain, and local search moves it towards a mode.

        Under hard constraints (-inf potentials) the beliefs' argmax can be a labelling of
        probability zero: on such graphs the labelling is replaced by the best of iterated
        conditional modes from the beliefs, the node potentials and random starts
        (:func:`labelling_bound`), and an :class:`ApproximateInferenceWarning` names the graphs
        where no start reaches a labelling of positive probability.

        See :meth:`Engine.map_assignment` for the parameters.
        """
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        log_node = self.decoding_run(batch, node, edge).log_node
        labels = icm(batch, node, edge, np.argmax(log_node, axis=1))
        res = MapResult(labels, labelling_score(batch, node, edge, labels))
        zero = res.score == -np.inf
        if not zero.any():
            return res
        other = labelling_bound(batch, node, edge, log_node, unsettled=zero)
        better = zero & (other.score > res.score)
        labels = np.where(better[batch.node_graph], other.labels, res.labels)
        score = np.where(better, other.score, res.score)
        still = np.flatnonzero(score == -np.inf)
        if self.warn and still.size:
            warn_at_caller(
                f"{type(self).__name__}: MAP decoding of graphs {still.tolist()} found only "
                "labellings of probability zero (score -inf: hard constraints the beliefs' "
                "argmax and local search do not meet); the model may have no allowed labelling "
                "there, or the approximate beliefs miss it: use an exact engine (junction tree) "
                "if the graphs allow it", ApproximateInferenceWarning)
        return MapResult(labels, score)

    def sample(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike,
               n_samples: int, rng: np.random.Generator | int | None = None) -> np.ndarray:
        """``n_samples`` labellings (n_samples, N) from the model itself, never from the beliefs.

        Exact draws of the junction tree for the graphs where it is cheap (treewidth within its
        default limit, clique tables of the distinct graph shapes together within
        ``sample_settings["exact_table_entries"]``, 2^20 by default, smallest first), and draws
        of independent Gibbs chains for the others
        (:func:`~pymc_crf.inference.gibbs.independent_draws` with the other ``sample_settings``:
        16 chains, 200 sweeps of burn-in, a draw every 10 sweeps by default), approximate as far
        as the chains have not mixed. Change the settings by assigning to the attribute.

        See :meth:`Engine.sample` for the parameters.
        """
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
