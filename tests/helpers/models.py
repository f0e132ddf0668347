"""Small CRF and MRF models shared by the weight-space tests (objective, Bethe-Laplace, step
methods, samplers)."""

import warnings

import numpy as np
import pymc as pm

import pymc_crf as pmc
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference import get_engine
from pymc_crf.inference.select import ApproximateInferenceWarning


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


TREE = np.array([[0, 1], [1, 2], [1, 3], [3, 4]])


def tree_model(n_graphs: int = 6, seed: int = 0, prior_sd: float = 1.0) -> pm.Model:
    """Binary CRF on copies of a 5-node tree: node features (2), node weights W (2, 2) and a
    shared edge table T (2, 2); labels drawn at random."""
    rng = np.random.default_rng(seed)
    batch = GraphBatch.from_edges([TREE] * n_graphs, [5] * n_graphs)
    X = rng.normal(size=(batch.n_total_nodes, 2))
    y = rng.integers(0, 2, size=batch.n_total_nodes)
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, prior_sd, shape=(2, 2))
        T = pm.Normal("T", 0.0, prior_sd, shape=(2, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    return m


def grid_model(rows: int = 4, n_graphs: int = 4, seed: int = 0, inference="auto",
               max_treewidth: int = 10) -> pm.Model:
    """Binary CRF on ``n_graphs`` rows x rows grids, node features (2) and a shared edge table,
    labels drawn exactly from the model at fixed weights (coupling 0.4)."""
    rng = np.random.default_rng(seed)
    batch = GraphBatch.grid(rows, rows, n_graphs=n_graphs)
    X = rng.normal(size=(batch.n_total_nodes, 2))
    W0 = np.array([[0.5, -0.5], [-0.3, 0.3]])
    T0 = np.array([[0.4, -0.4], [-0.4, 0.4]])
    eng = get_engine("auto", batch, warn=False)
    y = eng.sample(batch, X @ W0, T0[None], 1, rng)[0] if eng.exact else \
        rng.integers(0, 2, size=batch.n_total_nodes)
    with pm.Model() as m, warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproximateInferenceWarning)
        W = pm.Normal("W", 0.0, 1.0, shape=(2, 2))
        T = pm.Normal("T", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y,
                inference=inference, max_treewidth=max_treewidth)
    return m


def mrf_model(n_rows: int = 40, seed: int = 0) -> pm.Model:
    """Ising MRF on the 5-node tree: biases b (5,) and couplings w (4,), exact data rows."""
    rng = np.random.default_rng(seed)
    g = GraphBatch.from_edges([TREE], [5])
    b0, w0 = rng.normal(0, 0.5, 5), rng.normal(0, 0.5, 4)
    node = np.stack([-b0, b0], axis=1)
    edge = np.stack([np.array([[1.0, -1.0], [-1.0, 1.0]]) * w for w in w0])
    X = get_engine("junction_tree", g).sample(g, node, edge, n_rows, rng)
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=5)
        w = pm.Normal("w", 0.0, 1.0, shape=4)
        pmc.MRF("x", graphs=g, node_weights=b, edge_weights=w, parameterization="ising",
                observed=X)
    return m


def hierarchical_model(seed: int = 0, potential: bool = False) -> pm.Model:
    """Tree CRF whose weight prior scale is a free variable, plus another observed variable (and,
    with ``potential``, a ``pm.Potential`` of the weights and the scale)."""
    rng = np.random.default_rng(seed)
    batch = GraphBatch.from_edges([TREE] * 4, [5] * 4)
    X = rng.normal(size=(batch.n_total_nodes, 2))
    y = rng.integers(0, 2, size=batch.n_total_nodes)
    with pm.Model() as m:
        s = pm.HalfNormal("s", 1.0)
        W = pm.Normal("W", 0.0, s, shape=(2, 2))
        T = pm.Normal("T", 0.0, 1.0, shape=(2, 2))
        pm.Normal("z", W.sum(), 1.0, observed=np.array([0.3, -0.2]))
        if potential:
            pm.Potential("pot", -0.7 * s * (W.sum() - T[0, 1]) ** 2)
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    return m
