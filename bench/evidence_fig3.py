"""Parise & Welling 2006 fig. 3: accuracy of evidence scores against AIS as a function of N; a
thin wrapper of ``pymc-crf reproduce parise-welling-fig3`` (``pymc_crf/reproduce/model_scoring.py``
has the trials: one data set at one N per trial, |score - AIS| of MAP, BIC-ML, BP-LR,
BP-LR-ExactGrad and Laplace-Exact).

Run:  .venv/bin/python bench/evidence_fig3.py [--datasets 10] [--n 10 30 100 300 1000 3000 10000]
                                               [--plot docs/evidence_fig3.png] [--serial]
"""

from __future__ import annotations

import argparse
import shutil

from pymc_crf.reproduce import run_experiment


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", type=int, default=10)
    ap.add_argument("--n", type=int, nargs="+", default=[10, 30, 100, 300, 1000, 3000, 10000])
    ap.add_argument("--n-temps", type=int, default=1000)
    ap.add_argument("--plot", default=None, help="copy the figure to this path")
    ap.add_argument("--serial", action="store_true", help="in-process instead of a LocalCluster")
    ap.add_argument("--out", default="reproduce_out")
    args = ap.parse_args(argv)
    res = run_experiment("parise-welling-fig3", out=args.out, serial=args.serial,
                         overrides={"datasets": args.datasets, "n": args.n,
                                    "n_temps": args.n_temps})
    print(f"{res.report.tables}\n\n{res.report.timings}")
    if args.plot:
        shutil.copy(res.paths["figure"], args.plot)


if __name__ == "__main__":
    main()
