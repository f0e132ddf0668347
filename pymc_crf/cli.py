"""The ``pymc-crf`` command: comparisons of fitters on built-in data sets."""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np

__all__ = ["build_bcrf_model", "main", "run_demo"]


def build_bcrf_model(train, prior_sd: float = 5**0.5):
    """The BCRF model of Qi, Szummer & Minka 2005, sec. 8.1: probit edge potentials, w ~ N(0, 5 I) (24
    weights)."""
    import pymc as pm

    import pymc_crf as pmc

    with pm.Model(coords=train.coords) as model:
        w = pm.Normal("w", 0.0, prior_sd, dims=("edge_feature", "label_i", "label_j"))
        pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
                potential=train.potential, epsilon=train.epsilon,
                observed=train.padded_labels, dims=("graph", "position"))
    return model


def run_demo(kind: str = "chain", n_train: int = 30, n_test: int = 1000, seed: int = 0,
             methods: tuple[str, ...] = ("map", "nuts"), draws: int = 1000, tune: int = 1000,
             chains: int = 2, out=None):
    """Fit the synthetic BCRF data by each method and print one comparison table."""
    import pandas as pd

    import pymc_crf as pmc

    out = sys.stdout if out is None else out

    train, test = pmc.datasets.bcrf_synthetic(kind, n_train=n_train, n_test=n_test, seed=seed)
    model = build_bcrf_model(train)
    print(f"data: bcrf_synthetic({kind!r}, n_train={n_train}, n_test={n_test}, seed={seed}); "
          f"{train.graphs}", file=out)
    results = {}
    for method in methods:
        t0 = time.perf_counter()
        opts = {"draws": draws, "tune": tune, "chains": chains, "random_seed": seed} \
            if method == "nuts" else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=FutureWarning)
            results[method] = pmc.fit(model, method=method, **opts)
        print(f"  fitted {method:>14s} in {time.perf_counter() - t0:7.2f} s", file=out)
    reference = "nuts" if "nuts" in results else None
    table = pmc.compare(results, reference=reference, test=test)
    # The plug-in (BPE) error beside the model-averaged one.
    table["test_error_bpe"] = [pmc.predict(r, test, method="bpe").error_rate
                               for r in results.values()]
    with pd.option_context("display.width", 120, "display.max_columns", 20,
                           "display.float_format", "{:.4g}".format):
        print(table, file=out)
    return table, results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pymc-crf", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="fit the synthetic BCRF data by several methods and compare")
    demo.add_argument("--kind", choices=("chain", "loop"), default="chain")
    demo.add_argument("--n-train", type=int, default=30)
    demo.add_argument("--n-test", type=int, default=1000)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--methods", default="map,nuts",
                      help="comma-separated fitters, or 'all' for every registered one")
    demo.add_argument("--draws", type=int, default=1000)
    demo.add_argument("--tune", type=int, default=1000)
    demo.add_argument("--chains", type=int, default=2)
    from pymc_crf import reproduce

    rep = sub.add_parser("reproduce", help="run one paper reproduction (a table and a figure)")
    reproduce.add_arguments(rep)
    args = parser.parse_args(argv)
    if args.command == "reproduce":
        return reproduce.run(args)
    if args.command in (None, "demo"):
        if args.command is None:
            args = demo.parse_args([])
        import pymc_crf as pmc

        methods = tuple(m for m in pmc.fitters.available() if m != "bp_hcrf_vi") \
            if args.methods == "all" else tuple(args.methods.split(","))
        np.set_printoptions(precision=4)
        run_demo(args.kind, args.n_train, args.n_test, args.seed, methods, args.draws,
                 args.tune, args.chains)
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
