"""Benchmark: loopy BP time to convergence on binary Ising grids, against plain vectorised numpy.

Setting of issue 4: fields ~ N(0, 1), couplings ~ N(0, 0.5^2), flooding schedule, damping 0.5
(log domain), tolerance 1e-9 on the largest change of the max-normalised log messages. Both
implementations run the same log-domain schedule from uniform messages, so they take the same
number of sweeps; both timings include the final beliefs. Also times TreeEP on a 30x30 grid
(libDAI's TreeEP takes ~1.1 s there), and warm-started BP calls on a 5x5 grid as a
Metropolis-Hastings sampler on the Bethe likelihood makes them: from the fixed point of the
previous parameter, against a cold start of the same call.

Run: ``.venv/bin/python bench/bench_bp.py [--repeats 3] [--seed 0]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from numba import get_num_threads

from pymc_crf.graphs.adjacency import message_layout
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.bp import BeliefPropagation
from pymc_crf.inference.tree_ep import TreeEP

TOL = 1e-9
DAMPING = 0.5


def ising_grid(n: int, rng: np.random.Generator):
    """An ``n x n`` binary Ising grid as (batch, node (N,2), edge (E,2,2)) log-potentials."""
    b = GraphBatch.grid(n, n)
    th = rng.normal(0.0, 1.0, b.n_total_nodes)
    w = rng.normal(0.0, 0.5, b.n_edges)
    node = np.stack([th, -th], 1)
    edge = np.stack([np.stack([w, -w], 1), np.stack([-w, w], 1)], 1)
    return b, node, edge


def _lse(x, axis):
    m = x.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=axis, keepdims=True))).squeeze(axis)


def numpy_bp(batch: GraphBatch, node: np.ndarray, edge: np.ndarray, tol=TOL, damping=DAMPING,
             max_iter=10000):
    """Reference: the same flooding schedule written as plain vectorised numpy."""
    E = batch.n_edges
    d = np.arange(2 * E)
    e = d // 2
    flip = d % 2 == 1
    src = np.where(flip, batch.edges[e, 1], batch.edges[e, 0])
    dst = np.where(flip, batch.edges[e, 0], batch.edges[e, 1])
    psi = np.where(flip[:, None, None], edge[e].transpose(0, 2, 1), edge[e])  # [x_src, x_dst]
    in_idx = np.argsort(dst, kind="stable")
    starts = np.searchsorted(dst[in_idx], np.arange(batch.n_total_nodes))
    K = node.shape[1]
    msg = np.zeros((2 * E, K))
    it = 0
    while it < max_iter:
        it += 1
        S = node + np.add.reduceat(msg[in_idx], starts, axis=0)
        cav = S[src] - msg[d ^ 1]
        new = _lse(cav[:, :, None] + psi, axis=1)
        new -= new.max(axis=1, keepdims=True)  # max-normalised, as the engine while iterating
        new = (1 - damping) * new + damping * msg
        change = np.abs(new - msg).max()
        msg = new
        if change < tol:
            break
    S = node + np.add.reduceat(msg[in_idx], starts, axis=0)
    beliefs = np.exp(S - _lse(S, axis=1)[:, None])
    return beliefs, it


def best_time(f, repeats):
    out, best = None, np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    engines = {
        "numba serial": BeliefPropagation(damping=DAMPING, schedule="parallel", tol=TOL,
                                          max_iter=10000, threads=False),
        f"numba {get_num_threads()} threads": BeliefPropagation(
            damping=DAMPING, schedule="parallel", tol=TOL, max_iter=10000, threads=True),
    }
    warm = ising_grid(4, rng)
    for bp in engines.values():
        bp.marginals(*warm)  # numba compilation (cached on disk after the first run)

    print(f"BP flooding, damping {DAMPING}, tol {TOL:g}; best of {args.repeats}")
    print(f"{'grid':>9} {'engine':>17} {'iters':>6} {'numba [s]':>10} {'numpy [s]':>10} "
          f"{'speed-up':>9} {'max |db|':>9}")
    for n in (30, 100):
        b, node, edge = ising_grid(n, rng)
        message_layout(b)  # structure is cached per batch, as in repeated use
        t_np, (bel, it_np) = best_time(
            lambda b=b, node=node, edge=edge: numpy_bp(b, node, edge), args.repeats)
        for label, bp in engines.items():
            t_nb, m = best_time(
                lambda b=b, node=node, edge=edge, bp=bp: bp.marginals(b, node, edge),
                args.repeats)
            it = int(m.report["iterations"][0])
            assert it == it_np, (it, it_np)
            print(f"{n:>4}x{n:<4} {label:>17} {it:>6} {t_nb:>10.4f} {t_np:>10.4f} "
                  f"{t_np / t_nb:>8.1f}x {np.abs(bel - m.node).max():>9.1e}")

    b, node, edge = ising_grid(30, rng)
    ep = TreeEP()
    ep.marginals(*ising_grid(4, rng))  # compile
    t_ep, m = best_time(lambda: ep.marginals(b, node, edge), args.repeats)
    print(f"TreeEP 30x30: {t_ep:.3f} s, {int(m.report['iterations'][0])} sweeps, converged "
          f"{bool(m.report['converged'][0])} (libDAI TreeEP: ~1.1 s)")
    warm_starts(engines["numba serial"], rng, args.repeats)


def warm_starts(bp: BeliefPropagation, rng: np.random.Generator, repeats: int,
                calls: int = 200) -> None:
    """Time per BP call on a 5x5 grid (K = 2), warm-started from the messages of the previous
    parameter's fixed point, and cold; the parameter moves by 0 or 1% of the couplings."""
    b, node, edge = ising_grid(5, rng)
    start = bp.run(b, node, edge).messages
    print(f"BP calls on a 5x5 grid, K = 2 (best of {repeats} blocks of {calls} calls)")
    print(f"{'step':>6} {'warm [us]':>10} {'sweeps':>7} {'cold [us]':>10} {'sweeps':>7}")
    for step in (0.0, 0.01):
        near = edge * (1.0 + step)

        def block(messages, near=near):
            for _ in range(calls):
                out = bp.run(b, node, near, messages=messages)
            return out

        t_warm, warm = best_time(lambda: block(start), repeats)
        t_cold, cold = best_time(lambda: block(None), repeats)
        print(f"{step:>6.0%} {t_warm / calls * 1e6:>10.1f} {int(warm.report['iterations'][0]):>7} "
              f"{t_cold / calls * 1e6:>10.1f} {int(cold.report['iterations'][0]):>7}")


if __name__ == "__main__":
    main()
