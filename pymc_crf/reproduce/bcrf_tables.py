"""Thesis tables 5.1 / 5.2 (Qi 2005, sec. 5.5.1; Qi, Szummer & Minka 2005, sec. 8.1).

Each trial samples training graphs and 1000 test 3-node loops (table 5.1) or chains (table 5.2)
from a probit CRF with 24 weights (6 edge features x 2 x 2 labels) with
``pmc.datasets.bcrf_synthetic`` (seed ``1000 * n_train + trial``) and measures the test error (all
test nodes, maximum-marginal labels) of

* ML-CRF / MAP-CRF -- maximum likelihood (a flat prior) / MAP with the prior N(0, 5 I) of
  ``pmc.datasets.bcrf_model``, by ``pmc.fit(method="map")`` to scipy's strict tolerances (at most
  500 L-BFGS iterations: the ML weights of a separable training set grow without bound) on the
  exact likelihood, exact marginals at the estimate;
* BPE-CRF-PEP -- exact marginals at the power-EP posterior mean (thesis sec. 5.4.1);
* BCRF-PEP / BCRF-TEP -- EP + approximate model averaging (Qi, Szummer & Minka 2005, eqs.
  (57)-(63): q-averaged potential tables, then exact marginals of the averaged tables);
* true w -- the generating weights (an oracle, for scale);

* NUTS (gold) -- Monte Carlo model averaging of the exact node marginals over NUTS draws from the
  exact posterior of ``pmc.datasets.bcrf_model`` by ``pmc.predict(method="average")``, in its
  own trial (``method="nuts"``; ``nuts_sampler`` is PyMC's ``pm.sample`` option: nutpie
  compiles for about a minute and then samples fast, PyMC's NUTS starts at once and suits short
  runs).

EP starts at the paper's step size (``step_size``, 0.8) with ``run_ep``'s step back-off schedule
(a site's step is halved when its update would leave q or its cavity not positive definite, all
steps when the mean oscillates) and up to its default 2000 sweeps; a trial records whether EP met
its tolerance.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import ttest_rel

from pymc_crf.reproduce.registry import (
    Experiment,
    Report,
    Trial,
    TrialResult,
    bad_parameter,
    register,
)
from pymc_crf.reproduce.report import markdown_table, mean_se, new_figure

__all__ = ["PAPER_TABLES", "run_trial"]

K, FE, PRIOR_VAR = 2, 6, 5.0

# Qi 2005 (PhD thesis), table 5.1 (loops) and table 5.2 (chains): test error %, mean of 10 runs
# of 1000 test graphs, for 10 / 30 / 100 training graphs. The paper has no NUTS or oracle row.
PAPER_TABLES = {
    "loop": {"ML-CRF": (27.96, 22.80, 12.25), "MAP-CRF": (16.36, 12.40, 9.60),
             "BPE-CRF-TEP": (10.66, 9.85, 9.21), "BPE-CRF-PEP": (10.67, 9.76, 9.14),
             "BCRF-TEP": (10.51, 9.73, 9.23), "BCRF-PEP": (10.59, 9.71, 9.23)},
    "chain": {"ML-CRF": (32.54, 30.36, 23.09), "MAP-CRF": (29.12, 24.39, 21.48),
              "BPE-CRF-TEP": (25.74, 23.06, 21.42), "BPE-CRF-PEP": (25.48, 22.52, 21.34),
              "BCRF-TEP": (25.01, 22.53, 21.41), "BCRF-PEP": (24.94, 22.21, 21.27)},
}
PAPER_TRAIN = (10, 30, 100)
ROWS = ("true w (oracle)", "ML-CRF", "MAP-CRF", "BPE-CRF-TEP", "BPE-CRF-PEP", "BCRF-TEP",
        "BCRF-PEP", "NUTS (gold)")


def _marginals(data, mean: np.ndarray, cov: np.ndarray | None = None) -> np.ndarray:
    """Exact node marginals (N, K) of ``data``'s graphs: of the CRF at the weights ``mean``, or
    with ``cov`` of the q-averaged CRF (Qi, Szummer & Minka 2005, eqs. (57)-(63))."""
    from pymc_crf.fitters.ep.average import averaged_node_marginals

    mean = np.ravel(mean)
    cov = np.zeros((mean.size, mean.size)) if cov is None else cov
    return averaged_node_marginals(mean, cov, K, data.graphs, edge_features=data.edge_features,
                                   potential="probit")


def _error(marg: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(marg.argmax(1) != labels))


def _point_estimate(train, prior_var: float | None) -> np.ndarray:
    """ML (``prior_var`` None: a flat prior) or MAP, by ``pmc.fit(method="map")`` to scipy's
    strict tolerances (the exact likelihood: the junction tree or chain engine)."""
    from pymc_crf.datasets import bcrf_model
    from pymc_crf.fitters import fit

    model = bcrf_model(train, None if prior_var is None else prior_var**0.5)
    with warnings.catch_warnings():
        # the ML weights of a separable training set grow without bound; L-BFGS stops on its
        # iteration limit there, as the thesis's ML-CRF does
        warnings.simplefilter("ignore")
        res = fit(model, method="map", gtol=1e-5, maxiter=500, progressbar=False,
                  log_likelihood=False)
    return res.posterior["w"].values.reshape(-1, FE * K * K)[0]


def _nuts_marginals(train, test, draws: int, tune: int, chains: int, sampler: str, seed: int
                    ) -> np.ndarray:
    """Node marginals of ``test`` averaged over every NUTS draw of the exact posterior."""
    import pymc as pm

    from pymc_crf.datasets import bcrf_model
    from pymc_crf.predict import predict

    model = bcrf_model(train, PRIOR_VAR**0.5)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=1, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False,
                          nuts_sampler=sampler)
    return predict(idata, test, method="average", draws=None, model=model).marginals


def _ep_trial(train, test, w_true: np.ndarray, step_size: float) -> dict[str, float]:
    from pymc_crf.fitters.ep.core import run_ep
    from pymc_crf.fitters.ep.terms import build_terms

    row = {"true w (oracle)": _error(_marginals(test, w_true), test.labels)}
    for name, pv in (("ML-CRF", None), ("MAP-CRF", PRIOR_VAR)):
        row[name] = _error(_marginals(test, _point_estimate(train, pv)), test.labels)
    terms = build_terms(train.graphs, K, train.labels, None, train.edge_features,
                        use_node=False, use_edge=True)
    for variant, transform in (("PEP", 1.0), ("TEP", 0.0)):
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ep = run_ep(terms, np.zeros(terms.d), np.full(terms.d, PRIOR_VAR),
                            transform=transform, step_size=step_size, tol=1e-4)
        except np.linalg.LinAlgError:
            # A diverged power-EP run (non-finite site parameters at the paper's step 0.8):
            # recorded as a failure, its error rows left out of the means.
            row[f"time {variant}"] = time.perf_counter() - t0
            row.update({f"{variant} converged": 0.0, f"{variant} failed": 1.0,
                        f"{variant} skipped per sweep": np.nan, f"BPE-CRF-{variant}": np.nan,
                        f"BCRF-{variant}": np.nan})
            continue
        row[f"time {variant}"] = time.perf_counter() - t0
        row[f"{variant} failed"] = 0.0
        row[f"{variant} converged"] = float(ep.converged)
        row[f"{variant} skipped per sweep"] = float(ep.skips.sum() / ep.iterations)
        row[f"BPE-CRF-{variant}"] = _error(_marginals(test, ep.mean), test.labels)
        # approximate model averaging: exact marginals of the q-averaged tables
        row[f"BCRF-{variant}"] = _error(_marginals(test, ep.mean, ep.cov), test.labels)
    return row


def run_trial(settings: dict[str, Any], seed: int) -> dict[str, float]:
    """One trial of table 5.1 / 5.2: ``settings["method"]`` is ``"point_ep"`` (oracle, ML, MAP and
    the four EP rows) or ``"nuts"`` (the gold row)."""
    from pymc_crf.datasets import bcrf_synthetic

    kind = settings["kind"]
    train, test = bcrf_synthetic(kind, n_train=settings["n_train"], n_test=settings["n_test"],
                                 seed=seed)
    if settings["method"] == "point_ep":
        return _ep_trial(train, test, train.true_weights["w"], settings["step_size"])
    t0 = time.perf_counter()
    marg = _nuts_marginals(train, test, settings["nuts_draws"], settings["nuts_tune"],
                           settings["nuts_chains"], settings["nuts_sampler"], seed)
    return {"NUTS (gold)": _error(marg, test.labels), "time NUTS": time.perf_counter() - t0}


def _trials(kind: str):
    def trials(p: dict[str, Any]) -> list[Trial]:
        common = {"kind": kind, "n_test": p["n_test"]}
        out = []
        for n in p["train"]:
            for t in range(p["trials"]):
                out.append(Trial({**common, "method": "point_ep", "n_train": n,
                                  "step_size": p["step_size"]}, 1000 * n + t))
            for t in range(min(p["nuts_trials"], p["trials"]) if n in p["nuts_train"] else 0):
                out.append(Trial({**common, "method": "nuts", "n_train": n,
                                  "nuts_draws": p["nuts_draws"], "nuts_tune": p["nuts_tune"],
                                  "nuts_chains": p["nuts_chains"],
                                  "nuts_sampler": p["nuts_sampler"]}, 1000 * n + t))
        return out
    return trials


def _collect(results: Sequence[TrialResult], n: int, key: str) -> list[float]:
    return [r.values[key] for r in results if r.settings["n_train"] == n and key in r.values]


def _report(kind: str):
    def report(results: Sequence[TrialResult], p: dict[str, Any]) -> Report:
        paper = PAPER_TABLES[kind]
        train = list(p["train"])
        header = ["algorithm"] + [f"{n} train (ours)" for n in train] + \
            [f"{n} train (paper)" for n in train]
        rows = []
        for name in ROWS:
            cells = [mean_se(_collect(results, n, name), 100) for n in train]
            cells += [f"{paper[name][PAPER_TRAIN.index(n)]:.2f}"
                      if name in paper and n in PAPER_TRAIN else "—" for n in train]
            rows.append([name] + cells)
        nuts = [str(n) for n in train if n in p["nuts_train"]]
        n_nuts = min(p["nuts_trials"], p["trials"])
        notes = [f"Test error % (mean ± standard error over trials; {p['trials']} trials per "
                 f"column, " + (f"NUTS on the first {n_nuts} at {', '.join(nuts)} training "
                                "graphs; " if n_nuts and nuts else "no NUTS runs; ")
                 + f"{p['n_test']} test graphs each; EP step size {p['step_size']}).", ""]
        for variant in ("PEP", "TEP"):
            conv = [f"{n} train {np.mean(_collect(results, n, f'{variant} converged')):.2f}"
                    + (f" ({int(np.sum(f))} diverged, left out of the means)"
                       if np.sum(f := _collect(results, n, f"{variant} failed")) else "")
                    for n in train]
            notes.append(f"- EP {variant} converged (fraction of trials): " + ", ".join(conv))
        for other in ("ML-CRF", "MAP-CRF", "BPE-CRF-PEP", "NUTS (gold)"):
            cells = []
            for n in train:
                a = _collect(results, n, "BCRF-PEP")[:len(_collect(results, n, other))]
                b = _collect(results, n, other)
                if len(b) >= 2 and np.any(np.subtract(a, b) != 0):
                    t = ttest_rel(a, b, nan_policy="omit")
                    cells.append(f"{n} train: t = {t.statistic:.2f}, p = {t.pvalue:.2g}")
            if cells:
                notes.append(f"- paired t-test BCRF-PEP vs {other}: " + "; ".join(cells))
        table = markdown_table(header, rows)
        timings = markdown_table(
            ["n train", "EP (PEP) mean s", "EP (TEP) mean s", "NUTS mean s"],
            [[n] + [mean_se(_collect(results, n, f"time {v}"), digits=2) for v in
                    ("PEP", "TEP", "NUTS")] for n in train])
        fig, ax = new_figure()
        ax = ax[0, 0]
        for i, name in enumerate(("ML-CRF", "MAP-CRF", "BCRF-PEP", "BCRF-TEP", "NUTS (gold)")):
            ys = [100 * np.nanmean(v) if (v := _collect(results, n, name)) else np.nan
                  for n in train]
            ax.plot(train, ys, marker="o", color=f"C{i}", label=f"{name} (ours)")
            if name in paper:
                ax.plot(PAPER_TRAIN, paper[name], ls="--", marker="x", color=f"C{i}",
                        label=f"{name} (paper)")
        ax.set_xscale("log")
        ax.set_xlabel("training graphs")
        ax.set_ylabel("test error %")
        ax.set_title(f"Qi 2005 table {'5.1 (loops)' if kind == 'loop' else '5.2 (chains)'}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        return Report(table + "\n\n" + "\n".join(notes), timings, fig)
    return report


_SIZES = {
    "full": {"train": [10, 30, 100], "trials": 10, "n_test": 1000, "step_size": 0.8,
             "nuts_train": [10, 30, 100], "nuts_trials": 10, "nuts_draws": 500, "nuts_tune": 500,
             "nuts_chains": 2, "nuts_sampler": "nutpie"},
    "quick": {"train": [10], "trials": 2, "n_test": 50, "step_size": 0.8, "nuts_train": [10],
              "nuts_trials": 1, "nuts_draws": 30, "nuts_tune": 30, "nuts_chains": 1,
              "nuts_sampler": "pymc"},
}

#: ``pm.sample``'s ``nuts_sampler`` values; those but "pymc" need their package installed
NUTS_SAMPLERS = ("pymc", "nutpie", "numpyro", "blackjax")


def _check(name: str):
    """``check`` of the experiment ``name``: an EP step size in (0, 1] (``run_ep`` rejects any
    other, but only after a trial's ML and MAP fits) and a ``nuts_sampler`` that ``pm.sample``
    knows and can import (otherwise the NUTS trials, which run after the EP ones, fail)."""
    def check(p: dict[str, Any]) -> None:
        import importlib.util

        if not 0 < p["step_size"] <= 1:
            raise bad_parameter(name, "step_size", "takes an EP step size in (0, 1]",
                                p["step_size"])
        sampler = p["nuts_sampler"]
        if sampler not in NUTS_SAMPLERS:
            raise bad_parameter(name, "nuts_sampler",
                                f"takes one of {', '.join(map(repr, NUTS_SAMPLERS))}", sampler)
        runs_nuts = min(p["nuts_trials"], p["trials"]) and set(p["nuts_train"]) & set(p["train"])
        if runs_nuts and sampler != "pymc" and importlib.util.find_spec(sampler) is None:
            raise bad_parameter(name, "nuts_sampler", f"needs the package {sampler} installed "
                                '(or "pymc", which needs nothing more)', sampler)
    return check


for _kind, _name, _what in (("loop", "thesis-table-5.1", "3-node loops"),
                            ("chain", "thesis-table-5.2", "3-node chains")):
    register(Experiment(
        name=_name,
        description=f"Qi 2005 table {_name[-3:]}: ML, MAP, BCRF-PEP/TEP and NUTS test error on "
                    f"{_what} (10/30/100 training graphs)",
        sizes=_SIZES, trials=_trials(_kind), run_trial=run_trial, report=_report(_kind),
        zero_ok=("nuts_trials",), check=_check(_name)))
