"""Luo, Sun & Zhao, table V and the Japanese vowels speaker task: BP-HCRF VI vs MAP-HCRF; a thin
wrapper of ``pymc-crf reproduce luo-table-v`` and ``pymc-crf reproduce japanese-vowels``
(``pymc_crf/reproduce/hcrf_tables.py`` has the trials).

Run::

    .venv/bin/python bench/hcrf_tables.py [--splits 5] [--restarts 2] [--max-iter 20]
                                          [--skip-vowels] [--skip-hmm] [--serial]

The vowels part reads ``../shared/data/japanese_vowels`` relative to the repository root (or
``$JAPANESE_VOWELS_DIR``) and is skipped with a message when that folder is absent.
"""

from __future__ import annotations

import argparse

from pymc_crf.reproduce import run_experiment


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", type=int, default=5)
    ap.add_argument("--restarts", type=int, default=2)
    ap.add_argument("--max-iter", type=int, default=20)
    ap.add_argument("--map-states", type=int, default=10)
    ap.add_argument("--map-maxiter", type=int, default=500)
    ap.add_argument("--skip-hmm", action="store_true")
    ap.add_argument("--skip-vowels", action="store_true")
    ap.add_argument("--serial", action="store_true", help="in-process instead of a LocalCluster")
    ap.add_argument("--out", default="reproduce_out")
    args = ap.parse_args(argv)
    fit = {"restarts": args.restarts, "max_iter": args.max_iter, "map_states": args.map_states,
           "map_maxiter": args.map_maxiter}
    for name, skip, extra in (("luo-table-v", args.skip_hmm, {"splits": args.splits}),
                              ("japanese-vowels", args.skip_vowels, {})):
        if skip:
            continue
        res = run_experiment(name, overrides={**fit, **extra}, out=args.out, serial=args.serial)
        if res.skipped:
            print(f"\n{name}: SKIPPED, {res.skipped}")
        else:
            print(f"\n## {name}\n\n{res.report.tables}\n\n{res.report.timings}")


if __name__ == "__main__":
    main()
