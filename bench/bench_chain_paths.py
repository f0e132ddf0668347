"""Chain engine paths through the public entry points: shared table, edge features, wide ranges.

Run:  .venv/bin/python bench/bench_chain_paths.py [--repeats 20]

Problem: 1000 sequences x 50 positions, K = 10 labels, F = 100 dense node features (as in
``bench_chain.py``), labels drawn exactly from the CRF. Four ways of writing the model with
``pmc.CRF`` in ``pm.Model`` (Normal priors):

* ``shared``: node weights W (F, K) and one shared (K, K) transition table T;
* ``constant``: the same CRF from constant edge features (a column of ones, edge weights
  (1, K, K) = T), which the table builders recognise as one shared table;
* ``per-edge``: real edge features (a bias, a +-1 indicator, a uniform number; edge weights
  (3, K, K)), so the engine gets an (E, K, K) table, one per edge;
* ``wide``: the shared model at weights scaled so that node-row plus table log-potential ranges
  are several hundred.

For each, in one run and timed in turn round after round (``bench_chain.interleaved``; the VM
has fast and slow modes): ``ChainEngine.log_partition`` and ``ChainEngine.marginals`` on the
model's log-potential tables, the objective ``CRFLogLikelihood`` value + gradient (on
``extract_crf(model)``), and the compiled model's logp + dlogp (``model.logp_dlogp_function``).
Every time is given as a ratio to the two BLAS products ``X @ W`` and ``X.T @ G`` timed in the
same rounds. The compiled models multiply through scipy's OpenBLAS and the rest through
numpy's; ``blas_env`` keeps either library's spinning worker threads from slowing the other's
calls in this rotation (see its docstring). Targets: objective <= 2x the BLAS products;
compiled logp + dlogp <= 1.3x the objective; edge-feature models <= 2x the shared one.

A floor row times what a per-edge objective that forms its tables must do besides the
recursions: the BLAS pair, the edge products ``Xe @ We`` and ``Xe.T @ M`` and one exp of each of
the E K^2 table entries. The package's per-edge objective and compiled model form no table array
(``ChainEngine.log_z_and_feature_marginals``, ``FeatureLogPartition``), so they can run below it;
its ``log Z`` and ``log Z + marginals`` rows time the engine on formed tables. A second
floor row times the shared-table objective plus one exp of each table entry with the kernels'
own exp, a lane block at a time from entries in cache, in the benchmark's thread: with the
kernels in one thread, what a per-edge objective costs at least, before forming its tables and
contracting its edge marginals with the features. The row after it adds the kernel's own table
making (forming, shifting, exponentiating: ``_lane_feature_tables``) instead of the bare exps.

Last, a ragged batch: 600 chains of length 3-14, K = 26, log-potentials N(0, s^2) with s = 1 and
s = 30 (node-row plus table ranges of several hundred): ``ChainEngine.marginals`` time of each
and their ratio.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_env import SETTING  # noqa: E402  (sets OPENBLAS_THREAD_TIMEOUT before numpy loads)

# isort: split
import numpy as np  # noqa: E402
import pymc as pm
from bench_chain import interleaved, make_problem  # noqa: E402
from numba import njit  # noqa: E402

import pymc_crf as pmc  # noqa: E402
from pymc_crf.graphs.batch import GraphBatch  # noqa: E402
from pymc_crf.inference.chain import ChainEngine  # noqa: E402
from pymc_crf.inference.chain.lanes import LANES, _lane_feature_tables  # noqa: E402
from pymc_crf.inference.chain.scaling import _exp_nonpos  # noqa: E402
from pymc_crf.model.objective import CRFLogLikelihood  # noqa: E402
from pymc_crf.model.spec import extract_crf  # noqa: E402


@njit
def _exp_blocks(x, out, kb, n):
    """``n`` times ``out = exp(x)`` of the non-positive entries ``x`` with the kernels' exp."""
    s = 0.0
    for _ in range(n):
        _exp_nonpos(x, out, kb, x.shape[0])
        s += out[0]
    return s


def _table_maker(batch, Xe, Te):
    """A callable that makes the per-edge tables of the batch's first lane block with the
    kernel's ``_lane_feature_tables``, as many times as the batch has lane blocks."""
    K = Te.shape[1]
    B = min(LANES, batch.n_graphs)
    n = np.diff(batch.node_offsets)[:B].astype(np.int64)
    elo = batch.edge_offsets[:B].astype(np.int64)
    Lb = int(n.max())
    We = np.ascontiguousarray(Te.reshape(Te.shape[0], -1))
    P, lshift = np.empty(Lb * K * K * B), np.empty(Lb * B)
    lthr, xs, ks = np.empty(B), np.empty(K * K * B), np.empty(K * K * B)
    n_blocks = -(-batch.n_graphs // B)

    def run():
        for _ in range(n_blocks):
            _lane_feature_tables(Xe, We, elo, n, Lb, K, B, P, lshift, lthr, xs, ks)
    return run


def build(batch, X, y, K, Xe=None):
    """The chain CRF as a PyMC model: a shared (K, K) table ``T``, or edge features ``Xe`` with
    edge weights ``T`` (Fe, K, K)."""
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, 1.0, shape=(X.shape[1], K))
        if Xe is not None:
            T = pm.Normal("T", 0.0, 1.0, shape=(Xe.shape[1], K, K))
            pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_features=Xe,
                    edge_weights=T, observed=y)
        else:
            T = pm.Normal("T", 0.0, 1.0, shape=(K, K))
            pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T,
                    observed=y)
    return model


def case(name, batch, X, y, W, T, Xe=None):
    """Timed callables of one model: engine log Z / marginals, objective, compiled logp+dlogp."""
    K = W.shape[1]
    model = build(batch, X, y, K, Xe)
    spec = extract_crf(model)
    values = {"W": W, "T": T}
    w_flat = np.concatenate([values[w.name].ravel() for w in spec.weights])
    lik = CRFLogLikelihood(spec)
    _, node, _, _, edge = lik._tables(w_flat, shared_if_constant=True)
    eng = ChainEngine()
    f = model.logp_dlogp_function(ravel_inputs=True)
    f.set_extra_values({})
    q = np.concatenate([values[v.name].ravel() for v in model.value_vars])
    # the compiled model and the objective agree (value up to the Normal priors)
    lp, g = f(q)
    ll, gl = lik(w_flat)
    prior = -0.5 * float(q @ q) - 0.5 * q.size * np.log(2.0 * np.pi)
    assert abs(lp - (ll + prior)) < 1e-8 * abs(lp), (name, lp, ll + prior)
    lo, hi = node.max(1) - np.where(np.isfinite(node), node, np.inf).min(1), np.ptp(edge, (1, 2))
    print(f"{name}: node-row range up to {lo.max():.0f}, table range up to {hi.max():.0f}, "
          f"engine edge tables {edge.shape}")
    return {
        f"{name}: log Z": lambda: eng.log_partition(batch, node, edge),
        f"{name}: log Z + marginals": lambda: eng.marginals(batch, node, edge),
        f"{name}: objective value + grad": lambda: lik(w_flat),
        f"{name}: compiled logp + dlogp": lambda: f(q),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None,
                    help="threads of the chain kernels (default: pymc_crf's default)")
    args = ap.parse_args(argv)
    pmc.set_num_threads(args.threads)
    batch, X, W, T, y = make_problem()
    Gm = np.random.default_rng(1).normal(size=(X.shape[0], W.shape[1]))
    ref_key = "reference: X @ W + X.T @ G"
    cases = {ref_key: lambda: (X @ W, X.T @ Gm)}
    E = batch.n_edges
    rng = np.random.default_rng(2)
    # real edge features: a bias, a +-1 indicator and a uniform number per edge
    Xe = np.column_stack([np.ones(E), rng.choice([-1.0, 1.0], E), rng.random(E)])
    Te = np.stack([T, 0.2 * rng.normal(size=T.shape), 0.2 * rng.normal(size=T.shape)])
    cases.update(case("shared", batch, X, y, W, T))
    cases.update(case("constant", batch, X, y, W, T[None], Xe=np.ones((E, 1))))
    cases.update(case("per-edge", batch, X, y, W, Te, Xe=Xe))
    # what a per-edge objective that forms its tables must do besides the engine's recursions:
    # the BLAS pair, the edge products Xe @ We and Xe.T @ M, one exp of each table entry
    Me = rng.normal(size=(E, Te[0].size))
    ebuf = np.empty((E, Te[0].size))
    floor_key = "per-edge floor: BLAS pair + edge products + exp"
    cases[floor_key] = lambda: (X @ W, X.T @ Gm, np.exp(np.dot(Xe, Te.reshape(3, -1), out=ebuf),
                                                      out=ebuf), Xe.T @ Me)
    # a one-thread floor of any scaled per-edge objective: the shared-table objective (the BLAS
    # pair and the recursions) plus one exp of each of the E K^2 table entries, exponentiated a
    # lane block at a time as the kernel does, from entries in cache as the kernel forms them
    # (the first lane block of tables, each shifted to its maximum, E / LANES times)
    ent = Xe[:LANES] @ Te.reshape(3, -1)
    ent = (ent - ent.max(1, keepdims=True)).ravel()
    eout, ek = np.empty_like(ent), np.empty_like(ent)
    shared_obj = cases["shared: objective value + grad"]
    fused_key = "per-edge floor: shared objective + exp in 1 thread"
    cases[fused_key] = lambda: (shared_obj(), _exp_blocks(ent, eout, ek, E // LANES))
    # the same with the kernel's own table making (tables formed from the features, shifted,
    # exponentiated: _lane_feature_tables) on the first lane block, once per lane block
    make_key = "per-edge: shared objective + 1-thread table making"
    make_tables = _table_maker(batch, Xe, Te)
    cases[make_key] = lambda: (shared_obj(), make_tables())
    cases.update(case("wide", batch, X, y, 30.0 * W, 40.0 * T))
    # the user's ragged batch: 600 chains of length 3-14, K = 26
    rng = np.random.default_rng(0)
    rb = GraphBatch.chains(rng.integers(3, 15, size=600))
    rn, re = rng.normal(size=(rb.n_total_nodes, 26)), rng.normal(size=(1, 26, 26))
    eng = ChainEngine()
    cases["600 chains K=26, scale 1: marginals"] = lambda: eng.marginals(rb, rn, re)
    cases["600 chains K=26, scale 30: marginals"] = lambda: eng.marginals(rb, 30 * rn, 30 * re)

    rows = interleaved(cases, args.repeats)
    ref = rows[ref_key][0]
    print(f"\n{os.cpu_count()} cores, {SETTING}, chain kernels in {pmc.get_num_threads()} "
          f"thread(s), {args.repeats} rounds; ms (median, min) and ratio of medians to the "
          "reference")
    print(f"{'what':44s} {'median':>9s} {'min':>9s} {'ratio':>7s}")
    for k, (med, mn, _) in rows.items():
        print(f"{k:44s} {med:9.2f} {mn:9.2f} {med / ref:7.2f}")
    print()
    names = ("shared", "constant", "per-edge", "wide")
    for name in names:
        obj = rows[f"{name}: objective value + grad"][0]
        comp = rows[f"{name}: compiled logp + dlogp"][0]
        print(f"{name:9s} objective / BLAS = {obj / ref:5.2f} (target <= 2); "
              f"compiled / objective = {comp / obj:5.2f} (target <= 1.3)")
    for name in names[1:]:
        for what in ("objective value + grad", "compiled logp + dlogp"):
            r = rows[f"{name}: {what}"][0] / rows[f"shared: {what}"][0]
            print(f"{name:9s} {what} / shared = {r:5.2f} (target <= 2)")
    fl = rows[floor_key][0]
    print(f"per-edge  floor / BLAS = {fl / ref:5.2f}; objective / floor = "
          f"{rows['per-edge: objective value + grad'][0] / fl:5.2f}")
    print(f"per-edge  shared objective + exp / BLAS = {rows[fused_key][0] / ref:5.2f}; shared "
          f"objective + table making / BLAS = {rows[make_key][0] / ref:5.2f}")
    s1 = rows["600 chains K=26, scale 1: marginals"][0]
    s30 = rows["600 chains K=26, scale 30: marginals"][0]
    print(f"600 chains K=26: scale 30 / scale 1 = {s30 / s1:.2f}")
    return rows


if __name__ == "__main__":
    main()
