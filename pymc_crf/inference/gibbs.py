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

import networkx as nx
import numpy as np
from numba import njit

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import Engine, MapResult, Marginals, as_generator, check_potentials
from pymc_crf.inference.bp import bp_structure, labelling_score

__all__ = ["Gibbs", "colour_order"]


def colour_order(batch: GraphBatch) -> tuple[np.ndarray, np.ndarray]:
    """Global node ids sorted by colour class and the class pointer (cached on the batch).

    Returns ``(order, ptr)``: the nodes of class ``c`` (across all graphs) are
    ``order[ptr[c]:ptr[c+1]]``.
    """
    cached = batch._cache.get("gibbs_colours")
    if cached is not None:
        return cached
    colour = np.empty(batch.n_total_nodes, np.int64)
    for gs in batch.structure_groups.values():
        col = nx.greedy_color(batch.to_networkx(int(gs[0])), strategy="largest_first")
        local = np.array([col[i] for i in range(int(batch.n_nodes[gs[0]]))], np.int64)
        colour[batch.node_index(gs)] = np.tile(local, len(gs))
    order = np.argsort(colour, kind="stable").astype(np.int64)
    ptr = np.concatenate([[0], np.cumsum(np.bincount(colour))]).astype(np.int64)
    batch._cache["gibbs_colours"] = (order, ptr)
    return order, ptr


@njit(cache=True)
def _sweeps(node, edge, shared, x, order, src, edge_of, flip, in_ptr, in_idx, u, keep, samples,
            rb, start):
    """Run ``u.shape[0]`` sweeps in place on ``x``; after sweep ``s`` with ``keep[s] >= 0`` store
    the state in ``samples[keep[s]]`` and add the conditionals of that sweep to ``rb``."""
    K = node.shape[1]
    p = np.empty(K)
    for s in range(u.shape[0]):
        rec = keep[start + s] >= 0
        for j in range(order.shape[0]):
            i = order[j]
            m = -np.inf
            for k in range(K):
                lk = node[i, k]
                for q in range(in_ptr[i], in_ptr[i + 1]):
                    d = in_idx[q]
                    tab = 0 if shared else edge_of[d]
                    xn = x[src[d]]
                    # flip: i is edges[e, 0], so the table is read edge[e, x_i, x_nbr]
                    lk += edge[tab, k, xn] if flip[d] else edge[tab, xn, k]
                p[k] = lk
                if lk > m:
                    m = lk
            tot = 0.0
            for k in range(K):
                p[k] = np.exp(p[k] - m) if p[k] > -np.inf else 0.0
                tot += p[k]
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
    """

    name = "gibbs"
    exact = False

    def __init__(self, burn_in: int = 200, thin: int = 1, n_samples: int = 2000, seed=None):
        if int(burn_in) < 0:
            raise ValueError(f"burn_in must be >= 0; got {burn_in}")
        if int(thin) < 1:
            raise ValueError(f"thin must be >= 1; got {thin}")
        if int(n_samples) < 1:
            raise ValueError(f"n_samples must be >= 1; got {n_samples}")
        self.burn_in, self.thin, self.n_samples = int(burn_in), int(thin), int(n_samples)
        self.seed = seed

    def run(self, batch: GraphBatch, node_logpot, edge_logpot, n_samples: int, rng=None,
            init: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Run the chain; returns ``(samples (n_samples, N), rao_blackwell_node_marginals)``.

        ``init`` (N,) starts the chain from a given labelling (e.g. the data, for contrastive
        divergence); by default the start is drawn uniformly.
        """
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        n_samples = int(n_samples)
        if n_samples < 1:
            raise ValueError(f"n_samples must be >= 1; got {n_samples}")
        rng = as_generator(self.seed if rng is None else rng)
        N, K = node.shape
        if np.isneginf(node).all(axis=1).any():
            i = int(np.flatnonzero(np.isneginf(node).all(axis=1))[0])
            raise ValueError(f"node {i} has log-potential -inf for every label")
        x = rng.integers(0, K, N) if init is None else batch.check_labels(init, K)
        x = x.astype(np.int64)
        st = bp_structure(batch)
        order, _ = colour_order(batch)
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
        return samples, rb / n_samples

    # -------------------------------------------------------------- Engine interface
    def sample(self, batch, node_logpot, edge_logpot, n_samples, rng=None):
        """``n_samples`` labellings (after burn-in, every ``thin``-th sweep), shape (n, N)."""
        return self.run(batch, node_logpot, edge_logpot, n_samples, rng)[0]

    def marginals(self, batch, node_logpot, edge_logpot, rng=None):
        """Monte Carlo marginals: Rao-Blackwellised node marginals, edge pair frequencies.

        ``log_z`` is NaN (Gibbs sampling gives no log Z estimate) and ``report`` is None.
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

    def log_partition(self, batch, node_logpot, edge_logpot):
        raise NotImplementedError("the gibbs engine gives no log Z estimate; use 'bp', 'tree_ep' "
                                  "or an exact engine")

    def map_assignment(self, batch, node_logpot, edge_logpot, rng=None):
        """Heuristic: the highest-scoring labelling visited by the chain, per graph."""
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        samples = self.run(batch, node, edge, self.n_samples, rng)[0]
        scores = np.stack([labelling_score(batch, node, edge, s) for s in samples])  # (n, G)
        best = np.argmax(scores, axis=0)
        labels = samples[best[batch.node_graph], np.arange(batch.n_total_nodes)]
        return MapResult(labels, scores[best, np.arange(batch.n_graphs)])
