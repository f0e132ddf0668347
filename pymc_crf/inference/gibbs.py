"""Single-site Gibbs sampling over a whole graph batch (systematic scan by colour classes).

Each graph is greedily coloured (once per distinct structure) so that no two neighbours share a
colour; a sweep updates colour class 0 of every graph of the batch, then class 1, ... . Nodes of one
class are conditionally independent given the others, so a class is one exact block update and the
sweep is a valid systematic-scan Gibbs sampler. Uniform draws come from a numpy ``Generator``, so
the same seed gives the same chain.

``marginals`` returns Monte Carlo estimates: Rao-Blackwellised node marginals (the average of the
full conditionals, lower variance than label counts) and edge marginals from pair counts. Gibbs
gives no estimate of log Z (``log_z`` is NaN).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from pymc_crf.docstrings import fill_doc
from pymc_crf.graphs.adjacency import colour_classes, message_layout
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import (
    ENGINE_DOCS,
    ConvergenceWarning,
    Engine,
    MapResult,
    Marginals,
    check_potentials,
    labelling_score,
    warn_at_caller,
)
from pymc_crf.inference.conditionals import exp_normalise, keep_least_forbidden, slot_entry
from pymc_crf.kernel_cache import njit
from pymc_crf.validation import generator, whole_number

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["Gibbs", "GibbsChain", "colour_order", "independent_draws"]

# The colour classes are graph structure (also used by mean field); this name stays importable.
colour_order = colour_classes


# the engine parameters and the random source of the Gibbs runs, worded once (``fill_doc``)
_GIBBS_DOCS = {
    **ENGINE_DOCS,
    "gibbs_rng": """
        rng : Generator, int or None, optional
            The random source; None: the engine's ``seed``.""",
    # marginals and map_assignment
    "gibbs_parameters": "Parameters\n----------\n%(tables)s\n%(gibbs_rng)s",
}
_gibbs_doc = fill_doc(_GIBBS_DOCS)


class GibbsChain(NamedTuple):
    """A Gibbs run: kept labellings ``samples`` (n_samples, N) and the Rao-Blackwellised node
    marginals ``node`` (N, K) (the average of the full conditionals over the kept sweeps)."""

    samples: np.ndarray
    node: np.ndarray


@njit(cache=True)
def _sweeps(node, edge, shared, x, order, src, edge_of, flip, in_ptr, in_idx, u, keep, samples,
            rb, start):
    """Run ``u.shape[0]`` sweeps in place on ``x``; after sweep ``s`` with ``keep[s] >= 0`` store
    the state in ``samples[keep[s]]`` and add the conditionals of that sweep to ``rb``."""
    K = node.shape[1]
    p = np.empty(K)
    nf = np.empty(K)
    for s in range(u.shape[0]):
        rec = keep[start + s] >= 0
        for j in range(order.shape[0]):
            i = order[j]
            for k in range(K):
                lk = node[i, k]
                nf[k] = np.inf if lk == -np.inf else 0.0  # number of forbidden entries
                for q in range(in_ptr[i], in_ptr[i + 1]):
                    d = in_idx[q]
                    e = slot_entry(edge, shared, edge_of, flip, d, k, x[src[d]])
                    if e == -np.inf:
                        nf[k] += 1.0
                    else:
                        lk += e
                p[k] = lk
            keep_least_forbidden(p, nf)
            tot = exp_normalise(p)
            target = u[s, i] * tot
            acc = 0.0
            choice = K - 1
            for k in range(K):
                acc += p[k]
                if target < acc and p[k] > 0.0:
                    choice = k
                    break
            if p[choice] == 0.0:  # rounding pushed past the last positive entry
                for k in range(K - 1, -1, -1):
                    if p[k] > 0.0:
                        choice = k
                        break
            x[i] = choice
            if rec:
                for k in range(K):
                    rb[i, k] += p[k] / tot
        if rec:
            for i in range(x.shape[0]):
                samples[keep[start + s], i] = x[i]


class Gibbs(Engine):
    """Single-site Gibbs sampler (systematic scan by colour classes), vectorised over the batch.

    Parameters
    ----------
    burn_in : int
        Sweeps discarded before the first kept sample.
    thin : int
        Keep every ``thin``-th sweep.
    n_samples : int
        Number of kept sweeps used by :meth:`marginals` and :meth:`map_assignment`.
    seed : int or Generator or None
        Default random source when a method gets no ``rng``.

    Notes
    -----
    With -inf log-potentials (hard constraints) a single-site sampler can be reducible: two
    allowed labellings that differ in several nodes, with every path of one-node changes between
    them passing through forbidden labellings, are never both visited. The chain then samples
    only the allowed labellings it can reach from its start, and its marginals describe those.
    Exact engines (chain, junction tree) sample such models correctly.
    """

    name = "gibbs"
    exact = False
    has_log_z = False

    def __init__(self, burn_in: int = 200, thin: int = 1, n_samples: int = 2000,
                 seed: np.random.Generator | int | None = None):
        self.burn_in = whole_number(burn_in, "burn_in", minimum=0)
        self.thin = whole_number(thin, "thin")
        self.n_samples = whole_number(n_samples, "n_samples")
        generator(seed, "seed")  # refuse a bad seed here, not at the first run
        self.seed = seed

    @_gibbs_doc
    def run(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike, n_samples: int,
            rng: np.random.Generator | int | None = None,
            init: np.ndarray | None = None) -> GibbsChain:
        """Run the chain; returns the kept samples and the Rao-Blackwellised node marginals.

        Gibbs is a sampler, not a fixed-point iteration: its run is a :class:`GibbsChain`, not
        the :class:`~pymc_crf.inference.base.LoopyResult` of BP, TreeEP and mean field.

        ``init`` (N,) starts the chain from a given labelling (e.g. the data, for contrastive
        divergence); by default the start is drawn uniformly.

        Parameters
        ----------
        %(tables)s
        n_samples : int
            Sweeps kept (after ``burn_in`` sweeps, every ``thin``-th).
        %(gibbs_rng)s
        init : ndarray (N,), optional
            The starting labelling.

        Returns
        -------
        GibbsChain
            ``samples`` (n_samples, N) int64 and the Rao-Blackwellised node marginals (N, K).

        Raises
        ------
        ValueError
            When a node has log-potential -inf for every label, or the tables or ``init`` do not
            fit the batch.
        """
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        n_samples = whole_number(n_samples, "n_samples")
        rng = generator(self.seed, "seed") if rng is None else generator(rng, "rng")
        N, K = node.shape
        if np.isneginf(node).all(axis=1).any():
            i = int(np.flatnonzero(np.isneginf(node).all(axis=1))[0])
            raise ValueError(f"node {i} has log-potential -inf for every label")
        x = rng.integers(0, K, N) if init is None else batch.check_labels(init, K)
        x = x.astype(np.int64)
        st = message_layout(batch)
        order, _ = colour_classes(batch)
        total = self.burn_in + n_samples * self.thin
        keep = np.full(total, -1, np.int64)
        keep[self.burn_in + self.thin - 1::self.thin] = np.arange(n_samples)
        samples = np.empty((n_samples, N), np.int64)
        rb = np.zeros((N, K))
        chunk = max(1, (1 << 22) // max(N, 1))  # bound the memory of pre-drawn uniforms
        shared = edge.shape[0] == 1
        for start in range(0, total, chunk):
            u = rng.random((min(chunk, total - start), N))
            _sweeps(node, edge, shared, x, order, st.src, st.edge, st.flip, st.in_ptr, st.in_idx,
                    u, keep, samples, rb, start)
        if (np.isneginf(node).any() or np.isneginf(edge).any()) and np.isneginf(
                labelling_score(batch, node, edge, samples)).any():
            warn_at_caller(
                "Gibbs kept labellings that the -inf log-potentials forbid: on some graphs the "
                "chain never reached an allowed labelling (the model may allow none, or "
                "single-site moves cannot reach one from the start); its samples and marginals "
                "there are not the model's", ConvergenceWarning)
        return GibbsChain(samples, rb / n_samples)

    # -------------------------------------------------------------- Engine interface
    def sample(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike,
               n_samples: int, rng: np.random.Generator | int | None = None) -> np.ndarray:
        """``n_samples`` labellings (after burn-in, every ``thin``-th sweep), shape (n, N).

        See :meth:`Engine.sample` for the parameters.
        """
        if whole_number(n_samples, "n_samples", minimum=0) == 0:
            node, _ = check_potentials(batch, node_logpot, edge_logpot)
            generator(rng, "rng")  # refused as when drawing
            return np.empty((0, node.shape[0]), np.int64)
        return self.run(batch, node_logpot, edge_logpot, n_samples, rng).samples

    @_gibbs_doc
    def marginals(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike,
                  rng: np.random.Generator | int | None = None) -> Marginals:
        """Monte Carlo marginals: Rao-Blackwellised node marginals, edge pair frequencies.

        ``log_z`` is NaN (Gibbs sampling gives no log Z estimate) and ``report`` is None.

        %(gibbs_parameters)s

        Returns
        -------
        Marginals
            From the engine's ``n_samples`` kept sweeps: ``log_z`` NaN (G,), ``node`` (N, K),
            ``edge`` (E, K, K) (or (1, K, K) summed over edges for a shared table), ``report``
            None.
        """
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        samples, rb = self.run(batch, node, edge, self.n_samples, rng)
        K = node.shape[1]
        E = batch.n_edges
        pair = samples[:, batch.edges[:, 0]] * K + samples[:, batch.edges[:, 1]]  # (n, E)
        counts = np.bincount((pair + np.arange(E) * K * K).ravel(), minlength=E * K * K)
        em = counts.reshape(E, K, K) / samples.shape[0]
        if edge.shape[0] == 1:
            em = em.sum(axis=0, keepdims=True)
        return Marginals(np.full(batch.n_graphs, np.nan), rb, em, None)

    def log_partition(self, batch: GraphBatch, node_logpot: ArrayLike,
                      edge_logpot: ArrayLike) -> np.ndarray:
        """Not available: Gibbs sampling gives no log Z estimate (``has_log_z`` is False).

        See :meth:`Engine.log_partition` for the parameters.

        Raises
        ------
        NotImplementedError
            Always.
        """
        raise NotImplementedError("the gibbs engine gives no log Z estimate; use 'bp', 'tree_ep', "
                                  "'mean_field' or an exact engine")

    @_gibbs_doc
    def map_assignment(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike,
                       rng: np.random.Generator | int | None = None) -> MapResult:
        """Heuristic: the highest-scoring labelling visited by the chain, per graph.

        %(gibbs_parameters)s

        Returns
        -------
        MapResult
            Of each graph the best of the engine's ``n_samples`` kept sweeps: ``labels`` (N,)
            and ``score`` (G,).
        """
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        samples = self.run(batch, node, edge, self.n_samples, rng).samples
        scores = labelling_score(batch, node, edge, np.asarray(samples))  # (n, G)
        best = np.argmax(scores, axis=0)
        labels = samples[best[batch.node_graph], np.arange(batch.n_total_nodes)]
        return MapResult(labels, scores[best, np.arange(batch.n_graphs)])


def independent_draws(batch: GraphBatch, node: np.ndarray, edge: np.ndarray, n_samples: int,
                      rng=None, chains: int = 16, burn_in: int = 200, thin: int = 10
                      ) -> np.ndarray:
    """``n_samples`` labellings (n_samples, N) of the model from ``min(n_samples, chains)``
    independent Gibbs chains run together on copies of the batch, each from a uniform start with
    ``burn_in`` sweeps, then one draw every ``thin`` sweeps; row ``i`` comes from chain
    ``i % chains``.

    Several chains keep a slowly mixing model's draws from all sharing the state of one chain (on
    a strongly coupled grid, one sign for every draw); drawing several times from each chain after
    one burn-in keeps the cost at ``chains * burn_in + thin * n_samples`` sweeps of the batch.
    Like any Gibbs output the draws follow the model, and are independent, only as far as the
    chains mix within ``burn_in`` and ``thin`` sweeps.
    """
    n = whole_number(n_samples, "n_samples", minimum=0)
    if n == 0:
        generator(rng, "rng")  # refused as when drawing
        return np.empty((0, batch.n_total_nodes), np.int64)
    chains = whole_number(min(n, chains), "chains")
    gibbs = Gibbs(burn_in=burn_in, thin=thin)
    if chains == 1:
        return gibbs.sample(batch, node, edge, n, rng)
    copies = batch.cached(("gibbs", "copies", chains),
                          lambda: batch.subset(np.tile(np.arange(batch.n_graphs), chains)))
    edges = edge if edge.shape[0] == 1 else np.tile(edge, (chains, 1, 1))
    per = -(-n // chains)
    draws = gibbs.sample(copies, np.tile(node, (chains, 1)), edges, per, rng)
    return draws.reshape(per * chains, batch.n_total_nodes)[:n]
