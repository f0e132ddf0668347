"""Small CRF and MRF models shared by the weight-space tests (objective, Bethe-Laplace, samplers)."""

import pymc as pm

import pymc_crf as pmc


def node_edge_crf(batch, K: int, potential: str, shared: bool, rng) -> pm.Model:
    """Node weights ``W`` (2, K) on random node features and either one shared (K, K) table ``T``
    or per-edge tables ``V`` (2, K, K) from random edge features; random labels."""
    N, E = batch.n_total_nodes, batch.n_edges
    X = rng.normal(size=(N, 2))
    Xe = rng.normal(size=(E, 2))
    y = rng.integers(0, K, size=N)
    eps = 0.05 if potential == "probit" else 0.0   # label noise is the probit's
    with pm.Model() as m:
        W = pm.Normal("W", 0.3, 1.5, shape=(2, K))
        if shared:
            T = pm.Normal("T", -0.2, 0.7, shape=(K, K))
            pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T,
                    potential=potential, epsilon=eps, observed=y)
        else:
            V = pm.Normal("V", 0.0, 1.0, shape=(2, K, K))
            pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_features=Xe,
                    edge_weights=V, potential=potential, epsilon=eps, observed=y)
    return m


def ising_grid_mrf(rows: int, n_samples: int, seed: int, prior_sd: float) -> pm.Model:
    """The +-1 Boltzmann machine of Welling & Parise 2006, sec. 7 on a rows x rows grid
    (``welling_parise_grid`` data), biases ``b`` and couplings ``w`` with N(0, prior_sd^2) priors."""
    data = pmc.datasets.welling_parise_grid(rows, rows, n_samples=n_samples, seed=seed)
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, prior_sd, shape=rows * rows)
        w = pm.Normal("w", 0.0, prior_sd, shape=data.graphs.n_edges)
        pmc.MRF("x", graphs=data.graphs, node_weights=b, edge_weights=w,
                parameterization="ising", observed=data.samples)
    return m
