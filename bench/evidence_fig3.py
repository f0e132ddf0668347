"""Parise & Welling 2006 fig. 3: accuracy of evidence scores against AIS as a function of N.

Run:  .venv/bin/python bench/evidence_fig3.py [--datasets 10] [--n 10 30 100 300 1000 3000 10000]
                                               [--plot docs/evidence_fig3.png]

Random 5-node Boltzmann machines (``pmc.datasets.parise_welling_random_structure``, d = 0.5/4,
biases U[-1, 1], exact samples), scored with the true structure under a N(0, I) prior on the
biases and weights. For each data set and N (the first N samples): AIS (exact log Z, 10 runs of
1000 temperatures) is the reference; the table gives the mean over data sets of
|score - AIS| for

* MAP: penalised log-likelihood at the MAP (terms 1-3 of eq. (8)),
* BIC-ML: terms 1, 2, 5 at the maximum-likelihood weights,
* BP-LR: eq. (8), Bethe log Z, linear-response C, MAP by BP gradients from pseudo-moment matching,
* BP-LR-ExactGrad: the same with the exact MAP,
* Laplace-Exact: eq. (8) with everything exact,

and the mean Monte Carlo error of AIS. Prints a markdown table; with ``--plot`` also draws the
figure (log scale, as the paper's).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pymc as pm

import pymc_crf as pmc
from pymc_crf.fitters.evidence import log_marginal_likelihood

METHODS = {"MAP": ("map", {}), "BIC-ML": ("bic", {}), "BP-LR": ("bethe_laplace", {"map": "bp"}),
           "BP-LR-ExactGrad": ("bethe_laplace", {"map": "exact"}),
           "Laplace-Exact": ("laplace_exact", {})}


def model_for(data, n: int) -> pm.Model:
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=int(data.graphs.n_nodes[0]))
        w = pm.Normal("w", 0.0, 1.0, shape=data.graphs.n_edges)
        pmc.MRF("x", graphs=data.graphs, node_weights=b, edge_weights=w,
                parameterization=data.parameterization, observed=data.samples[:n])
    return model


def run(n_datasets: int, ns: list[int], n_temps: int = 1000, n_runs: int = 10) -> dict:
    """errors[method][i_n, i_dataset] = |score - AIS|, and the AIS errors."""
    errs = {m: np.full((len(ns), n_datasets), np.nan) for m in METHODS}
    ais_se = np.full((len(ns), n_datasets), np.nan)
    for k in range(n_datasets):
        data = pmc.datasets.parise_welling_random_structure(d=0.5 / 4, n_samples=max(ns), seed=k)
        for i, n in enumerate(ns):
            model = model_for(data, n)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = log_marginal_likelihood(model, "ais", n_temps=n_temps, n_runs=n_runs,
                                              random_seed=k)
                ais_se[i, k] = ref.std_error
                for name, (meth, kw) in METHODS.items():
                    errs[name][i, k] = abs(float(log_marginal_likelihood(model, meth, **kw))
                                           - float(ref))
    return {"errors": errs, "ais_se": ais_se, "ns": ns}


def table(res: dict) -> str:
    ns = res["ns"]
    lines = ["| N | " + " | ".join(METHODS) + " | AIS MC error |",
             "|---|" + "---|" * (len(METHODS) + 1)]
    for i, n in enumerate(ns):
        cells = [f"{np.mean(res['errors'][m][i]):.3g}" for m in METHODS]
        lines.append(f"| {n} | " + " | ".join(cells) + f" | {np.mean(res['ais_se'][i]):.3g} |")
    return "\n".join(lines)


def plot(res: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for m in METHODS:
        ax.loglog(res["ns"], res["errors"][m].mean(axis=1), marker="o", label=m)
    ax.loglog(res["ns"], res["ais_se"].mean(axis=1), "k:", label="AIS MC error")
    ax.set_xlabel("N")
    ax.set_ylabel("mean |score - AIS|")
    ax.set_title("Evidence scores against AIS (5-node Boltzmann machines, d = 0.5/4)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", type=int, default=10)
    ap.add_argument("--n", type=int, nargs="+", default=[10, 30, 100, 300, 1000, 3000, 10000])
    ap.add_argument("--plot", default=None)
    args = ap.parse_args()
    res = run(args.datasets, args.n)
    print(table(res))
    if args.plot:
        plot(res, args.plot)


if __name__ == "__main__":
    main()
