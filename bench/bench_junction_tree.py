"""Junction-tree engine: log Z + all node and edge marginals on single binary grids.

Run:  .venv/bin/python bench/bench_junction_tree.py

For each n x n binary grid (random fields N(0, 1), random Ising couplings N(0, 1)) this times
``JunctionTree.marginals`` (log Z and every node and edge marginal) and ``log_partition`` alone,
median of many repeats after a warm-up, and the same calibration written in plain numpy
(clique tables as ndarrays, scipy logsumexp over axes, a Python loop over cliques) on the same
junction tree, measured in the same run so that the ratio is machine-independent. libDAI's C++
junction tree takes about 0.4 ms (5x5) and 4.6 ms (10x10) on the reference machine; the target is
within 2x of that. A last row gives the per-graph time on a batch of 1000 5x5 grids.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.special import logsumexp

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.graphs.junction_tree import JunctionTreeStructure
from pymc_crf.inference.junction_tree import JunctionTree

LIBDAI_MS = {5: 0.4, 10: 4.6}


def ising_problem(batch: GraphBatch, rng: np.random.Generator):
    node = rng.normal(size=(batch.n_total_nodes, 2))
    J = rng.normal(size=batch.n_edges)
    edge = np.empty((batch.n_edges, 2, 2))
    edge[:, 0, 0] = edge[:, 1, 1] = J
    edge[:, 0, 1] = edge[:, 1, 0] = -J
    return node, edge


def numpy_reference(jt: JunctionTreeStructure, edges: np.ndarray, node: np.ndarray,
                    edge: np.ndarray):
    """The same two-pass log-space calibration with numpy tables (reference for the ratio)."""
    K = node.shape[1]
    m = jt.n_cliques
    tabs = [np.zeros((K,) * len(c)) for c in jt.cliques]

    def expand(arr, positions, ndim):
        # Broadcast `arr` (axes in the order of `positions`) to an ndim clique table.
        order = np.argsort(positions)
        arr = np.transpose(arr, order)
        shape = [1] * ndim
        for p in positions:
            shape[p] = K
        return arr.reshape(shape)

    for i, c in enumerate(jt.node_clique):
        tabs[c] = tabs[c] + expand(node[i], [jt.cliques[c].index(i)], len(jt.cliques[c]))
    for e, c in enumerate(jt.edge_clique):
        u, v = edges[e]
        pos = [jt.cliques[c].index(int(u)), jt.cliques[c].index(int(v))]
        tabs[c] = tabs[c] + expand(edge[e], pos, len(jt.cliques[c]))
    up = [None] * m
    for c in range(m - 1, -1, -1):
        ns = len(jt.separators[c])
        up[c] = logsumexp(tabs[c], axis=tuple(range(ns, len(jt.cliques[c]))))
        p = jt.parent[c]
        if p >= 0:
            pos = [jt.cliques[p].index(v) for v in jt.separators[c]]
            tabs[p] = tabs[p] + expand(up[c], pos, len(jt.cliques[p]))
    log_z = sum(float(up[r]) for r in jt.roots)
    for c in range(m):
        p = jt.parent[c]
        if p < 0:
            continue
        sep = jt.separators[c]
        keep = [jt.cliques[p].index(v) for v in sep]
        marg = logsumexp(tabs[p], axis=tuple(a for a in range(len(jt.cliques[p]))
                                             if a not in keep))
        marg = np.transpose(marg, np.argsort(np.argsort(keep)))  # to the order of `sep`
        tabs[c] = tabs[c] + (marg - up[c]).reshape(marg.shape + (1,) * (len(jt.cliques[c])
                                                                        - len(sep)))
    root_of = list(range(m))
    for c in range(m):
        if jt.parent[c] >= 0:
            root_of[c] = root_of[jt.parent[c]]
    nm = np.empty_like(node)
    for i, c in enumerate(jt.node_clique):
        a = jt.cliques[c].index(i)
        rest = tuple(x for x in range(len(jt.cliques[c])) if x != a)
        nm[i] = np.exp(logsumexp(tabs[c], axis=rest) - up[root_of[c]])
    em = np.empty_like(edge)
    for e, c in enumerate(jt.edge_clique):
        a, b = (jt.cliques[c].index(int(x)) for x in edges[e])
        rest = tuple(x for x in range(len(jt.cliques[c])) if x not in (a, b))
        t = np.exp(logsumexp(tabs[c], axis=rest) - up[root_of[c]])
        em[e] = t if a < b else t.T
    return log_z, nm, em


def median_ms(fn, repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def main() -> None:
    rng = np.random.default_rng(0)
    engine = JunctionTree(max_treewidth=16)  # min-fill gives treewidth 13 on the 10x10 grid
    rows = []
    for n, reps, np_reps in ((5, 3000, 200), (8, 500, 40), (10, 200, 15)):
        batch = GraphBatch.grid(n, n)
        node, edge = ising_problem(batch, rng)
        jt = batch.junction_tree(0)
        res = engine.marginals(batch, node, edge)
        ref = numpy_reference(jt, batch.local_edges(0), node, edge)
        err = max(abs(res.log_z[0] - ref[0]), np.abs(res.node - ref[1]).max(),
                  np.abs(res.edge - ref[2]).max())
        assert err < 1e-9, f"engine and numpy reference disagree by {err:g}"
        t_marg = median_ms(lambda b=batch, x=node, y=edge: engine.marginals(b, x, y), reps)
        t_lz = median_ms(lambda b=batch, x=node, y=edge: engine.log_partition(b, x, y), reps)
        t_np = median_ms(lambda j=jt, b=batch, x=node, y=edge: numpy_reference(
            j, b.local_edges(0), x, y), np_reps, warmup=1)
        entries = sum(2 ** len(c) for c in jt.cliques)
        rows.append((f"{n}x{n}", jt.treewidth, jt.n_cliques, entries, t_marg, t_lz,
                     LIBDAI_MS.get(n), t_np))
    print("JunctionTree.marginals (log Z + all node and edge marginals), binary grids, "
          "median ms")
    print(f"{'grid':>6} {'tw':>3} {'cliques':>7} {'entries':>8} {'marg ms':>9} {'logZ ms':>9} "
          f"{'/libDAI':>8} {'numpy ms':>9} {'numpy/JT':>9}")
    for name, tw, nc, ent, tm, tl, lib, tn in rows:
        lib_ratio = f"{tm / lib:8.2f}" if lib else f"{'-':>8}"
        print(f"{name:>6} {tw:>3} {nc:>7} {ent:>8} {tm:9.3f} {tl:9.3f} {lib_ratio} {tn:9.2f} "
              f"{tn / tm:9.1f}")
    # Throughput on a batch of identical shapes (one kernel call over all graphs).
    batch = GraphBatch.grid(5, 5, n_graphs=1000)
    node, edge = ising_problem(batch, rng)
    t = median_ms(lambda: engine.marginals(batch, node, edge), 20)
    print(f"batch of 1000 5x5 grids: {t:.1f} ms in all, {1e3 * t / 1000:.1f} us per graph")


if __name__ == "__main__":
    main()
