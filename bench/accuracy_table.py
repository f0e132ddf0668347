"""Accuracy of BP, TreeEP and mean field against exact inference (thesis ch. 3 setting): a thin
wrapper of ``pymc-crf reproduce thesis-ch3-treeep`` (``pymc_crf/reproduce/tree_ep_accuracy.py``
has the trials: one random Ising model per trial on K4 / 5x5 / 8x8 grids at several coupling
strengths, errors against the junction tree).

Run: ``.venv/bin/python bench/accuracy_table.py [--trials 10] [--serial]``
"""

from __future__ import annotations

import argparse

from pymc_crf.reproduce import run_experiment


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--serial", action="store_true", help="in-process instead of a LocalCluster")
    p.add_argument("--out", default="reproduce_out")
    args = p.parse_args(argv)
    res = run_experiment("thesis-ch3-treeep", overrides={"trials": args.trials}, out=args.out,
                         serial=args.serial)
    print(f"{res.report.tables}\n\n{res.report.timings}")


if __name__ == "__main__":
    main()
