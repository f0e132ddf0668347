"""Cold start: the demo's MAP and NUTS fits in a fresh process with empty numba and PyTensor caches.

Run:  .venv/bin/python bench/bench_cold_start.py [--methods map,nuts] [--warm] [--large]
      [--models]

Each fit runs in its own Python process whose ``NUMBA_CACHE_DIR`` and PyTensor
``base_compiledir`` (its C modules and its numba cache) are new empty folders, as on a machine
that has never run pymc_crf (``--warm`` runs each a second time on the caches the first run
left, as a later process on the same machine). The data are made and
the model built before the clock starts; the row is ``pmc.fit`` alone: wall and CPU seconds.
Targets (issue 38): MAP < 5 s, NUTS < 30 s wall on two cores.

``--large``: also a compiled model on the chain engine's lane kernels (600 chains of 30
positions, 8 labels, 20 dense features: what a tagger's corpus reaches), its log density
(``model.compile_logp()``, as ``pmc.fit`` computes the log-likelihood) and then its gradient
(``compile_dlogp()``, as the samplers and ``map`` use), each compiled and called once, timed
from compilation to the first value.

``--models``: also four small chain models of different graph structures (3-7 chains, 3 labels,
the per-graph tier) compiled one after the other in one process: logp and then dlogp of each,
compilation to first value. The first pays for compiling the kernels; each later one pays what
every new model structure pays (the kernels are compiled by then).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time, warnings
import pymc_crf as pmc
from pymc_crf.datasets import bcrf_model
train, test = pmc.datasets.bcrf_synthetic("chain", n_train=30, n_test=1000, seed=0)
model = bcrf_model(train)
method = sys.argv[1]
kw = dict(progressbar=False, random_seed=0)
if method == "nuts":
    kw.update(draws=1000, tune=1000, chains=2)
t0, c0 = time.perf_counter(), time.process_time()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    result = pmc.fit(model, method=method, **kw)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
error = pmc.predict(result, test).error_rate
print(json.dumps({"wall": wall, "cpu": cpu, "error": error}))
"""

LARGE = r"""
import json, time, warnings
import numpy as np, pymc as pm
import pymc_crf as pmc
rng = np.random.default_rng(0)
G, L, K, F = 600, 30, 8, 20
batch = pmc.GraphBatch.chains([L] * G)
X, y = rng.normal(size=(G * L, F)), rng.integers(0, K, G * L)
with pm.Model() as model:
    W = pm.Normal("W", 0.0, 1.0, shape=(F, K))
    T = pm.Normal("T", 0.0, 1.0, shape=(K, K))
    pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
point = model.initial_point()
out = {}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for what in ("logp", "dlogp"):
        t0, c0 = time.perf_counter(), time.process_time()
        getattr(model, f"compile_{what}")()(point)
        out[what] = [time.perf_counter() - t0, time.process_time() - c0]
print(json.dumps(out))
"""

MODELS = r"""
import json, time, warnings
import numpy as np, pymc as pm
import pymc_crf as pmc
rng = np.random.default_rng(0)
out = []
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for lengths in ([3, 4, 5], [2, 6], [5, 5, 5, 1], [4] * 7):
        batch = pmc.GraphBatch.chains(lengths)
        N = batch.n_total_nodes
        X, y = rng.normal(size=(N, 4)), rng.integers(0, 3, N)
        with pm.Model() as model:
            W = pm.Normal("W", 0.0, 1.0, shape=(4, 3))
            T = pm.Normal("T", 0.0, 1.0, shape=(3, 3))
            pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T,
                    observed=y)
        point = model.initial_point()
        t0 = time.perf_counter()
        model.compile_logp()(point)
        model.compile_dlogp()(point)
        out.append(time.perf_counter() - t0)
print(json.dumps(out))
"""


def run(method: str, caches: str, program: str = CHILD) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(caches, "numba"),
               PYTENSOR_FLAGS=f"base_compiledir={os.path.join(caches, 'pytensor')}")
    out = subprocess.run([sys.executable, "-c", program, method], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="map,nuts")
    parser.add_argument("--warm", action="store_true", help="also a second run on the caches left")
    parser.add_argument("--large", action="store_true",
                        help="also a compiled model on the lane kernels: first logp, then dlogp")
    parser.add_argument("--models", action="store_true",
                        help="also four small models of different structures in one process")
    args = parser.parse_args()
    print(f"{'method':8s} {'caches':6s} {'wall s':>8s} {'cpu s':>8s} {'test error':>10s}")
    for method in args.methods.split(","):
        with tempfile.TemporaryDirectory() as caches:
            for label in ("empty", "warm") if args.warm else ("empty",):
                r = run(method, caches)
                print(f"{method:8s} {label:6s} {r['wall']:8.1f} {r['cpu']:8.1f} {r['error']:10.4f}",
                      flush=True)
    if args.large:
        print("compiled model, 600 x 30 positions, K = 8 (compile + first call):")
        with tempfile.TemporaryDirectory() as caches:
            for label in ("empty", "warm") if args.warm else ("empty",):
                r = run("", caches, LARGE)
                print(f"  {label:6s} caches: logp {r['logp'][0]:.1f} s wall / {r['logp'][1]:.1f} s "
                      f"CPU, then dlogp {r['dlogp'][0]:.1f} / {r['dlogp'][1]:.1f} s", flush=True)
    if args.models:
        with tempfile.TemporaryDirectory() as caches:
            for label in ("empty", "warm") if args.warm else ("empty",):
                r = run("", caches, MODELS)
                print(f"four small models, {label} caches: logp + dlogp "
                      + ", ".join(f"{t:.1f}" for t in r) + " s", flush=True)
    load = os.getloadavg()[0]
    print(f"load average (1 min) at the end: {load:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
