"""Thesis tables 5.1 / 5.2 (Qi 2005, sec. 5.5.1; Qi, Szummer & Minka 2005, sec. 8.1): a thin
wrapper of ``pymc-crf reproduce thesis-table-5.1`` / ``thesis-table-5.2``
(``pymc_crf/reproduce/bcrf_tables.py`` has the trials: ML, MAP, BPE, BCRF-PEP/TEP, the oracle
and the NUTS gold row; seed = 1000 * n_train + trial).

Run:   .venv/bin/python bench/paper_tables_ep.py [--trials 10] [--train 10 30] [--no-nuts]
                                                 [--step-size 0.8] [--serial]
"""

from __future__ import annotations

import argparse

from pymc_crf.reproduce import run_experiment


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--train", type=int, nargs="+", default=[10, 30])
    ap.add_argument("--kinds", nargs="+", default=["loop", "chain"])
    ap.add_argument("--no-nuts", action="store_true")
    ap.add_argument("--step-size", type=float, default=0.8,
                    help="EP step size lambda (the paper's 0.8 by default)")
    ap.add_argument("--serial", action="store_true", help="in-process instead of a LocalCluster")
    ap.add_argument("--out", default="reproduce_out")
    args = ap.parse_args(argv)
    for kind in args.kinds:
        name = "thesis-table-5.1" if kind == "loop" else "thesis-table-5.2"
        overrides = {"trials": args.trials, "train": args.train, "step_size": args.step_size,
                     "nuts_trials": 0 if args.no_nuts else args.trials}
        res = run_experiment(name, overrides=overrides, out=args.out, serial=args.serial)
        print(f"\n## {name}\n\n{res.report.tables}\n\n{res.report.timings}")


if __name__ == "__main__":
    main()
