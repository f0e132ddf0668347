"""BP-HCRF variational inference against MAP-HCRF on the Japanese vowels: wall times measured in
one process, the test accuracy of each and the ratio of the wall times (issue 38: at most 5).

Run:  nice .venv/bin/python bench/bench_vi_speed.py [--restarts 8] [--max-iter 20]
                                                    [--map-maxiter 500] [--theta-maxiter N]
                                                    [--json out.json]

Data and fits are those of ``pymc-crf reproduce japanese-vowels`` (``pymc_crf/reproduce/
hcrf_tables.py``, its full size): the packaged copy of the data and its given split (270
training, 370 test sequences, 9 speakers), ``pmc.fit(method="bp_hcrf_vi")`` with K = 10 hidden
states, R = 4 rounds, 8 restarts of at most 20 EM iterations, predicted with its default
(local-z) rule (``--theta-maxiter``: L-BFGS iterations of each theta M-step, else the fitter's
default); ``pmc.fit(method="map")`` on the 10-state HCRF from the reproduction's random
start (at most 500 L-BFGS iterations), predicted by averaging over the fit.

Order: one untimed warm-up of each fit (one VI restart of one iteration, three L-BFGS
iterations) and of each predictor, so no timed run compiles a numba kernel; then MAP, VI, MAP
again. The ratio divides the VI wall time by the mean of the two MAP times (the machine is
shared: the two MAP times show how much the load moved during the run). Times are of the
``pmc.fit`` call (model construction included), predictions timed apart. BLAS runs
single-threaded and its workers sleep at once (``blas_env``), so numpy's and the compiled model's
BLAS do not slow each other.
"""

from __future__ import annotations

import os
import sys

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_env import SETTING  # noqa: E402  (sets OPENBLAS_THREAD_TIMEOUT before numpy loads)

# isort: split
import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

from pymc_crf.reproduce.hcrf_tables import fit_trial, score_trial, vowels_data  # noqa: E402

TARGET = 5.0


def timed(train, test, settings: dict, seed: int) -> dict:
    """One fit of ``settings`` and its test scores, with the wall and CPU times of the fit and the
    wall time of the predictions."""
    w, c = time.perf_counter(), time.process_time()
    res = fit_trial(train, settings, seed)
    out = {"fit_s": time.perf_counter() - w, "fit_cpu_s": time.process_time() - c}
    w = time.perf_counter()
    out.update(score_trial(res, test, settings["method"]))
    out["predict_s"] = time.perf_counter() - w
    if settings["method"] == "bp_hcrf_vi":
        out["final_bound"] = float(res["diagnostics"]["final_bound"])
        out["em_iterations"] = int(res["diagnostics"]["n_iterations"])
    else:
        out["lbfgs_iterations"] = int(res["optimizer_result"]["n_iterations"])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--restarts", type=int, default=8)
    ap.add_argument("--max-iter", type=int, default=20)
    ap.add_argument("--map-maxiter", type=int, default=500)
    ap.add_argument("--theta-maxiter", type=int, default=None,
                    help="L-BFGS iterations of each VI theta M-step (default: the fitter's)")
    ap.add_argument("--seed", type=int, default=0, help="the reproduction's split seed")
    ap.add_argument("--json", default=None, help="write the rows here")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    train, test = vowels_data(1)
    vi = {"method": "bp_hcrf_vi", "truncation": 10, "rounds": 4, "restarts": a.restarts,
          "max_iter": a.max_iter}
    if a.theta_maxiter is not None:
        vi["theta_maxiter"] = a.theta_maxiter
    mp = {"method": "map_hcrf", "map_states": 10, "map_maxiter": a.map_maxiter}
    print(f"{SETTING}; {train.graphs.n_graphs} training / {test.graphs.n_graphs} test sequences",
          flush=True)
    w = time.perf_counter()
    for s in ({**vi, "restarts": 1, "max_iter": 1}, {**mp, "map_maxiter": 3}):
        score_trial(fit_trial(train, s, a.seed), test, s["method"])
    print(f"warm-up {time.perf_counter() - w:.1f} s", flush=True)
    load0 = os.getloadavg()
    rows = []
    for name, s in (("MAP-HCRF", mp), ("BP-HCRF VI", vi), ("MAP-HCRF", mp)):
        r = {"method": name, **timed(train, test, s, a.seed), "load": os.getloadavg()[0]}
        rows.append(r)
        print(json.dumps(r), flush=True)
    map_s = [r["fit_s"] for r in rows if r["method"] == "MAP-HCRF"]
    vi_row = rows[1]
    ratio = vi_row["fit_s"] / (sum(map_s) / len(map_s))
    print(f"\nload (1-min average) {load0[0]:.2f} at the start, "
          f"{', '.join(f'{r['load']:.2f}' for r in rows)} after each fit")
    print("\n| method | fit wall s | fit CPU s | iterations | test accuracy % |")
    print("|---|---|---|---|---|")
    for r in rows:
        its = r.get("em_iterations", r.get("lbfgs_iterations"))
        acc = f"{100 * r['accuracy']:.2f}"
        if "accuracy (prior-usage rule)" in r:
            acc += f" (prior-usage rule {100 * r['accuracy (prior-usage rule)']:.2f})"
        print(f"| {r['method']} | {r['fit_s']:.1f} | {r['fit_cpu_s']:.1f} | {its} | {acc} |")
    verdict = "meets" if ratio <= TARGET else "misses"
    print(f"\nVI / MAP-HCRF wall-time ratio: {ratio:.2f} ({verdict} the target <= {TARGET:g})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "ratio": ratio, "load_start": load0[0],
                       "settings": {"vi": vi, "map": mp}}, f, indent=1)


if __name__ == "__main__":
    main()
