"""Brute-force enumeration: the ground truth every other engine is tested against.

Enumerates all ``K ** n`` labellings of each graph with plain numpy. Refuses graphs with more than
``max_configurations`` labellings (default 1e6).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import logsumexp

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import (
    Engine,
    MapResult,
    Marginals,
    check_potentials,
    checked_map,
    impossible_graphs,
)
from pymc_crf.validation import generator, positive_number, whole_number

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["BruteForce"]


class BruteForce(Engine):
    """Exact inference by enumerating every labelling (tests and tiny graphs only).

    Parameters
    ----------
    max_configurations : float, default 1e6
        Most labellings of one graph (``inf``: no limit); :meth:`check_size` and every run
        refuse a graph with more, with a ValueError.
    """

    name = "brute_force"
    exact = True

    def __init__(self, max_configurations: float = 1e6):
        self.max_configurations = positive_number(max_configurations, "max_configurations",
                                                  allow_inf=True)

    def supports(self, batch: GraphBatch) -> bool:
        return True

    def check_size(self, batch: GraphBatch, n_labels: int) -> None:
        """Refuse a batch whose largest graph has more than ``max_configurations`` labellings
        with ``n_labels`` labels (compared in log space: 2^1100 overflows a float).

        See :meth:`Engine.check_size` for the parameters.
        """
        g = int(np.argmax(batch.n_nodes))
        self._check_count(g, int(batch.n_nodes[g]), int(n_labels))

    def _check_count(self, g: int, n: int, K: int) -> None:
        if K > 1 and n * math.log2(K) > math.log2(self.max_configurations):
            limit = self.max_configurations
            limit = int(limit) if float(limit).is_integer() else limit
            raise ValueError(f"brute_force: graph {g} has {K}^{n} labellings, more than "
                             f"max_configurations={limit}; use inference='auto' (an exact engine "
                             "where the treewidth allows)")

    # One graph at a time: (configs (C, n), log-weights (C,)) plus the node and edge ids.
    def _enumerate(self, batch: GraphBatch, node: np.ndarray, edge: np.ndarray, g: int):
        K = node.shape[1]
        n = int(batch.n_nodes[g])
        self._check_count(g, n, K)
        lo = int(batch.node_offsets[g])
        elo, ehi = int(batch.edge_offsets[g]), int(batch.edge_offsets[g + 1])
        configs = np.indices((K,) * n).reshape(n, -1).T  # (C, n)
        score = node[lo + np.arange(n), configs].sum(axis=1)
        local = batch.edges[elo:ehi] - lo
        eidx = np.zeros(ehi - elo, np.int64) if edge.shape[0] == 1 else np.arange(elo, ehi)
        if ehi > elo:
            score = score + edge[eidx, configs[:, local[:, 0]], configs[:, local[:, 1]]].sum(axis=1)
        return configs, score, local, eidx

    def log_partition(self, batch: GraphBatch, node_logpot: ArrayLike,
                      edge_logpot: ArrayLike) -> np.ndarray:
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        return np.array([logsumexp(self._enumerate(batch, node, edge, g)[1])
                         for g in range(batch.n_graphs)])

    def marginals(self, batch: GraphBatch, node_logpot: ArrayLike,
                  edge_logpot: ArrayLike) -> Marginals:
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        K = node.shape[1]
        log_z = np.empty(batch.n_graphs)
        nm = np.zeros_like(node)
        em = np.zeros_like(edge)
        for g in range(batch.n_graphs):
            configs, score, local, eidx = self._enumerate(batch, node, edge, g)
            log_z[g] = logsumexp(score)
            # a graph that allows no labelling (log Z = -inf) has no marginals: NaN, said so by
            # the callers (predictive_marginals), without numpy's warning on -inf - -inf
            p = (np.exp(score - log_z[g]) if log_z[g] > -np.inf
                 else np.full(score.shape, np.nan))
            lo = int(batch.node_offsets[g])
            for i in range(configs.shape[1]):
                nm[lo + i] = np.bincount(configs[:, i], weights=p, minlength=K)
            for k in range(local.shape[0]):
                pair = configs[:, local[k, 0]] * K + configs[:, local[k, 1]]
                em[eidx[k]] += np.bincount(pair, weights=p, minlength=K * K).reshape(K, K)
        return Marginals(log_z, nm, em)

    def map_assignment(self, batch: GraphBatch, node_logpot: ArrayLike,
                       edge_logpot: ArrayLike) -> MapResult:
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        labels = np.empty(batch.n_total_nodes, np.int64)
        score = np.empty(batch.n_graphs)
        for g in range(batch.n_graphs):
            configs, s, _, _ = self._enumerate(batch, node, edge, g)
            best = int(np.argmax(s))
            labels[batch.node_offsets[g]:batch.node_offsets[g + 1]] = configs[best]
            score[g] = s[best]
        return checked_map(MapResult(labels, score))

    def sample(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike,
               n_samples: int, rng: np.random.Generator | int | None = None) -> np.ndarray:
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        n_samples = whole_number(n_samples, "n_samples", minimum=0)
        rng = generator(rng, "rng")
        out = np.empty((n_samples, batch.n_total_nodes), np.int64)
        for g in range(batch.n_graphs):
            configs, s, _, _ = self._enumerate(batch, node, edge, g)
            if np.all(s == -np.inf):
                if n_samples:
                    raise impossible_graphs([g])
                continue
            p = np.exp(s - logsumexp(s))
            pick = rng.choice(len(p), size=n_samples, p=p / p.sum())
            out[:, batch.node_offsets[g]:batch.node_offsets[g + 1]] = configs[pick]
        return out

    def _statistics(self, batch, node, edge, g):
        """Sufficient statistics of every labelling of graph g and its probabilities."""
        K = node.shape[1]
        configs, score, local, _ = self._enumerate(batch, node, edge, g)
        p = np.exp(score - logsumexp(score))
        C, n = configs.shape
        s_node = np.zeros((C, n, K))
        s_node[np.arange(C)[:, None], np.arange(n)[None, :], configs] = 1.0
        n_tab = 1 if edge.shape[0] == 1 else local.shape[0]
        s_edge = np.zeros((C, n_tab, K, K))
        for k in range(local.shape[0]):
            s_edge[np.arange(C), 0 if n_tab == 1 else k,
                   configs[:, local[k, 0]], configs[:, local[k, 1]]] += 1.0
        return np.concatenate([s_node.reshape(C, -1), s_edge.reshape(C, -1)], axis=1), p

    def feature_covariance(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike,
                           graph: int = 0) -> np.ndarray:
        """Dense covariance of the sufficient statistics of one graph, from the enumeration of its
        labellings (the statistics' order as :meth:`Engine.feature_covariance`).

        See :meth:`Engine.feature_covariance` for the parameters.
        """
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        s, p = self._statistics(batch, node, edge, graph)
        mean = p @ s
        return (s * p[:, None]).T @ s - np.outer(mean, mean)

    def covariance_vector_product(self, batch: GraphBatch, node_logpot: ArrayLike,
                                  edge_logpot: ArrayLike, v_node: ArrayLike,
                                  v_edge: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        v_node = np.asarray(v_node, dtype=np.float64)
        v_edge = np.asarray(v_edge, dtype=np.float64)
        out_n = np.zeros_like(node)
        out_e = np.zeros_like(edge)
        for g in range(batch.n_graphs):
            nidx = batch.node_index([g])
            shared = edge.shape[0] == 1
            eidx = np.zeros(1, np.int64) if shared else batch.edge_index([g])
            s, p = self._statistics(batch, node, edge, g)
            v = np.concatenate([v_node[nidx].ravel(), v_edge[eidx].ravel()])
            centred = s - p @ s
            cv = (centred * p[:, None]).T @ (centred @ v)
            dn = nidx.size * node.shape[1]
            out_n[nidx] = cv[:dn].reshape(-1, node.shape[1])
            if shared:
                out_e[0] += cv[dn:].reshape(edge.shape[1:])
            else:
                out_e[eidx] = cv[dn:].reshape(-1, *edge.shape[1:])
        return out_n, out_e
