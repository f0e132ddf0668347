"""The MRF likelihood from sufficient statistics vs the same likelihood as a CRF over N copies.

Run:  .venv/bin/python bench/bench_mrf.py [--rows 2000] [--repeats 15]

A 5 x 5 grid (``pmc.datasets.welling_parise_grid``), N rows, table parameterisation with per-node
(25, 2) and per-edge (40, 2, 2) weights. The same log-likelihood is written two ways:

* ``pmc.MRF`` (one log Z per evaluation, the gradient ``J^T (counts - N mu)``);
* ``pmc.CRF`` over N copies of the grid with one-hot node / edge identity features (log Z of
  every copy: N junction-tree passes).

Timed (interleaved rounds, median and min in ms; ratios from the same run): the compiled PyMC
``logp + dlogp`` (default numba backend) of each model, and the engine-side weight-space
likelihoods ``MRFLogLikelihood`` / ``CRFLogLikelihood`` (value + gradient). The script first checks
that the four give the same value (1e-8 relative).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import pymc as pm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_chain import interleaved  # noqa: E402

import pymc_crf as pmc  # noqa: E402
from pymc_crf.fitters import extract_crf, extract_mrf  # noqa: E402
from pymc_crf.model.objective import CRFLogLikelihood  # noqa: E402
from pymc_crf.model.random_field import MRFLogLikelihood  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    data = pmc.datasets.welling_parise_grid(n_samples=args.rows, seed=0)
    g, X, N = data.graphs, data.samples, args.rows
    n, E = 25, g.n_edges
    with pm.Model() as m_mrf:
        a = pm.Normal("a", 0, 1, shape=(n, 2))
        c = pm.Normal("c", 0, 1, shape=(E, 2, 2))
        pmc.MRF("x", graphs=g, node_weights=a, edge_weights=c, observed=X)
    copies = pmc.GraphBatch.from_edges([g.local_edges(0)] * N, [n] * N)
    with pm.Model() as m_crf:
        a = pm.Normal("a", 0, 1, shape=(n, 2))
        c = pm.Normal("c", 0, 1, shape=(E, 2, 2))
        pmc.CRF("x", graphs=copies, node_features=np.tile(np.eye(n), (N, 1)), node_weights=a,
                edge_features=np.tile(np.eye(E), (N, 1)), edge_weights=c,
                observed=X.reshape(-1))
    rng = np.random.default_rng(1)
    point = {"a": 0.3 * rng.normal(size=(n, 2)), "c": 0.3 * rng.normal(size=(E, 2, 2))}
    w = np.concatenate([point["a"].ravel(), point["c"].ravel()])
    fns = {}
    for name, m in (("mrf_model", m_mrf), ("crf_copies_model", m_crf)):
        ins = [m.rvs_to_values[m["a"]], m.rvs_to_values[m["c"]]]
        fns[name] = m.compile_fn([m.logp(), m.dlogp()], inputs=ins, point_fn=False)
    ll_mrf = MRFLogLikelihood(extract_mrf(m_mrf))
    ll_crf = CRFLogLikelihood(extract_crf(m_crf))
    vals = {"mrf_model": fns["mrf_model"](point["a"], point["c"])[0],
            "crf_copies_model": fns["crf_copies_model"](point["a"], point["c"])[0],
            "mrf_engine": ll_mrf(w)[0], "crf_engine": ll_crf(w)[0]}
    ref = vals["mrf_engine"]
    assert abs(vals["mrf_model"] - vals["crf_copies_model"]) <= 1e-8 * abs(vals["mrf_model"])
    assert abs(vals["mrf_engine"] - vals["crf_engine"]) <= 1e-8 * abs(ref)
    cases = {"mrf_model": lambda: fns["mrf_model"](point["a"], point["c"]),
             "crf_copies_model": lambda: fns["crf_copies_model"](point["a"], point["c"]),
             "mrf_engine": lambda: ll_mrf(w), "crf_engine": lambda: ll_crf(w)}
    t = interleaved(cases, args.repeats)
    out = {k: {"median_ms": round(v[0], 3), "min_ms": round(v[1], 3)} for k, v in t.items()}
    out["speedup_model"] = round(t["crf_copies_model"][0] / t["mrf_model"][0], 1)
    out["speedup_engine"] = round(t["crf_engine"][0] / t["mrf_engine"][0], 1)
    out["rows"] = N
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
