"""Random log-potential tables of chain batches, for the engine tests against brute force."""

import numpy as np

from pymc_crf.graphs.batch import GraphBatch


def chain_tables(rng: np.random.Generator, lengths: list[int], K: int, shared: bool,
                 scale: float = 1.0, forbid: float | None = None):
    """A batch of chains with N(0, scale^2) node tables (n_total_nodes, K) and edge tables, one
    shared (1, K, K) or one per edge (n_edges, K, K).

    With ``forbid``, each entry is -inf (a forbidden label or transition) with that probability,
    except label 0 and the transition 0 -> 0, so every chain keeps a valid labelling.

    Returns
    -------
    tuple
        ``(batch, node, edge)``.
    """
    batch = GraphBatch.chains(lengths)
    node = scale * rng.normal(size=(batch.n_total_nodes, K))
    edge = scale * rng.normal(size=(1 if shared else batch.n_edges, K, K))
    if forbid is not None:
        node[rng.random(node.shape) < forbid] = -np.inf
        edge[rng.random(edge.shape) < forbid] = -np.inf
        node[:, 0] = np.where(np.isfinite(node[:, 0]), node[:, 0], 0.0)
        edge[:, 0, 0] = np.where(np.isfinite(edge[:, 0, 0]), edge[:, 0, 0], 0.0)
    return batch, node, edge
