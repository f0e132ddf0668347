"""The models, method runs and scoring of the Welling & Parise 2006 comparison (sec. 7, figs. 2, 4,
5 and 6), used by the ``welling-parise-*`` experiments of ``pymc-crf reproduce`` and by the scripts
``bench/samplers_figures.py`` (the figures at the budgets of docs/samplers.md) and
``bench/bench_samplers.py``.

Methods, each scored by the CVM distance (Welling & Parise 2006, eq. (23); normalised by the number
of samples and summed over the weights, as ``pmc.compare``) of its draws from NUTS's draws on the
exact posterior (junction-tree / chain log Z), and by wall time: BL-MP (``bethe_laplace``,
``map="exact"``), BL-BP (``map="bp"``), LV-CD (``langevin_cd``), MC-BP (``bethe_mh``), exchange, and
on request the exact Laplace approximation (exact MAP and Hessian, nothing of Bethe in it).
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm

import pymc_crf as pmc
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference import get_engine

__all__ = ["GRID_METHODS", "LABELS", "PAPER_CHAIN_METHODS", "PAPER_GRID_METHODS", "coupling_grid",
           "faq_chain_model", "ising_grid_model", "ising_samples", "run_methods", "score"]

GRID_METHODS = ("bl_mp", "bl_bp", "lv_cd", "mc_bp", "exchange", "laplace_exact")
# the paper's methods per figure (exchange can be added with --methods)
PAPER_GRID_METHODS = ("bl_mp", "bl_bp", "lv_cd", "mc_bp")
PAPER_CHAIN_METHODS = ("bl_mp", "lv_cd")
LABELS = {"bl_mp": "BL-MP", "bl_bp": "BL-BP", "lv_cd": "LV-CD", "mc_bp": "MC-BP",
          "exchange": "exchange", "laplace_exact": "Laplace (exact)"}


def ising_grid_model(samples: np.ndarray, graph: GraphBatch, prior_sd: float = 1.0) -> pm.Model:
    """A +-1 Boltzmann machine (biases and couplings per node / edge, ``pmc.MRF`` "ising") with an
    independent N(0, prior_sd^2) prior on every weight."""
    n, E = int(graph.n_nodes[0]), graph.n_edges
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, prior_sd, shape=n)
        w = pm.Normal("w", 0.0, prior_sd, shape=E)
        pmc.MRF("x", graphs=graph, node_weights=b, edge_weights=w, parameterization="ising",
                observed=samples)
    return m


def ising_samples(graph: GraphBatch, b: np.ndarray, w: np.ndarray, n: int,
                  rng: np.random.Generator) -> np.ndarray:
    """N exact samples (label 1 = spin +1) of the +-1 Boltzmann machine ``exp(b s + w s s)``."""
    node = np.stack([-b, b], axis=1)
    edge = w[:, None, None] * np.array([[1.0, -1.0], [-1.0, 1.0]])
    return get_engine("junction_tree", graph).sample(graph, node, edge, n, rng)


def faq_chain_model(n_files: int, length: int, n_features: int,
                    rng: np.random.Generator) -> pm.Model:
    """A binary chain CRF shaped like the newsgroup-FAQ CRF of Welling & Parise 2006, sec. 7
    (whose data is not public): ``n_files`` chains of ``length`` lines, per line a bias and
    ``n_features - 1`` binary features (rates U(0.1, 0.5)) that enter the node potential
    (node weights (F, 2)) and the potential of the edge to the next line (edge weights
    (F, 2, 2)); 6 F weights (48 for F = 8, the paper's count). True weights N(0, 1), labels
    drawn exactly (forward filtering, backward sampling); N(0, 1) priors."""
    batch = GraphBatch.chains([length] * n_files)
    rates = rng.uniform(0.1, 0.5, size=n_features - 1)
    g = np.concatenate([np.ones((batch.n_total_nodes, 1)),
                        (rng.random((batch.n_total_nodes, n_features - 1)) < rates)
                        .astype(np.float64)], axis=1)
    # feature of line i on the edge (i, i + 1), as f(t_i, t_{i+1}, x_i) in the paper
    G = g[batch.edges[:, 0]]
    W0, T0 = rng.normal(size=(n_features, 2)), rng.normal(size=(n_features, 2, 2))
    edge = np.einsum("ef,fkl->ekl", G, T0)
    y = get_engine("chain", batch).sample(batch, g @ W0, edge, 1, rng)[0]
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.0, shape=(n_features, 2))
        T = pm.Normal("T", 0.0, 1.0, shape=(n_features, 2, 2))
        pmc.CRF("y", graphs=batch, node_features=g, node_weights=W, edge_features=G,
                edge_weights=T, observed=y)
    return m


def run_methods(model: pm.Model, methods, draws: int, tune: int, chains: int, seed: int,
                nuts_draws: int, nuts_tune: int = 1000, exchange_draws: int | None = None) -> dict:
    """Fit ``model`` by NUTS (reference) and each method; returns {name: DataTree}
    (``exchange_draws``: fewer draws for the exchange sampler, whose steps cost most)."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["nuts"] = pmc.fit(model, method="nuts", draws=nuts_draws, tune=nuts_tune,
                              chains=chains, random_seed=seed)
        for name in methods:
            if name == "bl_mp":
                out[name] = pmc.fit(model, method="bethe_laplace", map="exact",
                                    draws=draws, chains=chains, random_seed=seed)
            elif name == "laplace_exact":
                # the Laplace approximation itself: exact MAP and exact Hessian (junction tree);
                # its distance to NUTS is the error of a Gaussian at the mode
                out[name] = pmc.fit(model, method="bethe_laplace", map="exact",
                                    covariance="exact", draws=draws, chains=chains,
                                    random_seed=seed)
            elif name == "bl_bp":
                out[name] = pmc.fit(model, method="bethe_laplace", map="bp",
                                    draws=draws, chains=chains, random_seed=seed)
            else:
                method = {"lv_cd": "langevin_cd", "mc_bp": "bethe_mh", "exchange": "exchange"}[name]
                n = exchange_draws if name == "exchange" and exchange_draws else draws
                out[name] = pmc.fit(model, method=method, draws=n, tune=tune, chains=chains,
                                    random_seed=seed)
    return out


def _ess(res) -> np.ndarray:
    """ESS of every flat weight (posterior_matrix order) over all chains."""
    ess = az.ess(res)
    return np.concatenate([np.atleast_1d(ess[v].values).ravel() for v in res["posterior"].data_vars])


def score(results: dict) -> pd.DataFrame:
    """``pmc.compare`` against NUTS: CVM, wall time, min ESS (samplers), min ESS per second, and
    ``cvm_floor``: the CVM two independent samples of one distribution with these per-weight
    effective sizes score on average, ``sum_j (1/ESS_j + 1/ESS_ref,j) / 6`` (the mean of the
    normalised Cramer-von Mises statistic), so a CVM near it is Monte Carlo noise, not bias."""
    table = pmc.compare(results, reference="nuts")
    if "min_ess" in table:
        table["min_ess_per_s"] = table["min_ess"] / table["wall_time"]
    ref = _ess(results["nuts"])
    table["cvm_floor"] = [float(np.sum(1.0 / _ess(results[k]) + 1.0 / ref) / 6.0)
                          if k != "nuts" else 0.0 for k in table.index]
    return table


def coupling_grid(rows: int, d: float, bias: float, rng: np.random.Generator):
    """Figs. 4 / 5 of Welling & Parise 2006 (sec. 7): a rows x rows grid with couplings
    U([-d - eps, -d] u [d, d + eps]), d in quarters, eps = 0.1 / 4, and equal biases;
    returns (graph, biases, couplings)."""
    eps = 0.1 / 4
    graph = GraphBatch.grid(rows, rows)
    dq = d / 4
    w = np.where(rng.random(graph.n_edges) < 0.5, -dq - eps * rng.random(graph.n_edges),
                 dq + eps * rng.random(graph.n_edges))
    return graph, np.full(rows * rows, bias), w
