"""Cold start: the demo's MAP and NUTS fits in a fresh process with empty numba and PyTensor caches.

Run:  .venv/bin/python bench/bench_cold_start.py [--methods map,nuts] [--warm]

Each fit runs in its own Python process whose ``NUMBA_CACHE_DIR`` and PyTensor ``compiledir`` are
new empty folders, as on a machine that has never run pymc_crf (``--warm`` runs each a second time
on the caches the first run left, as a later process on the same machine). The data are made and
the model built before the clock starts; the row is ``pmc.fit`` alone: wall and CPU seconds.
Targets (issue 38): MAP < 5 s, NUTS < 30 s wall on two cores.
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


def run(method: str, caches: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(caches, "numba"),
               PYTENSOR_FLAGS=f"compiledir={os.path.join(caches, 'pytensor')}")
    out = subprocess.run([sys.executable, "-c", CHILD, method], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="map,nuts")
    parser.add_argument("--warm", action="store_true", help="also a second run on the caches left")
    args = parser.parse_args()
    print(f"{'method':8s} {'caches':6s} {'wall s':>8s} {'cpu s':>8s} {'test error':>10s}")
    for method in args.methods.split(","):
        with tempfile.TemporaryDirectory() as caches:
            for label in ("empty", "warm") if args.warm else ("empty",):
                r = run(method, caches)
                print(f"{method:8s} {label:6s} {r['wall']:8.1f} {r['cpu']:8.1f} {r['error']:10.4f}",
                      flush=True)
    load = os.getloadavg()[0]
    print(f"load average (1 min) at the end: {load:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
