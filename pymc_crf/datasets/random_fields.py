"""Synthetic Boltzmann-machine data for ``pmc.MRF``: the experiments of Parise & Welling 2006
sec. 4.1 (random structures on 5 nodes) and Welling & Parise 2006 sec. 7 (5 x 5 +-1 grids).

Both draw the true parameters, then N exact samples of the model (exhaustive enumeration / the
junction tree), seeded: the same seed gives the same graph, parameters and samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytensor.tensor as pt

from pymc_crf.distributions.mrf import check_mrf_labels, mrf_parameterization
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.junction_tree import JunctionTree
from pymc_crf.validation import generator, positive_number, whole_number

__all__ = ["MRFData", "parise_welling_random_structure", "welling_parise_grid"]


@dataclass
class MRFData:
    """One graph, the true MRF parameters and N samples of it.

    Attributes
    ----------
    graphs : GraphBatch
        The graph (a batch of one).
    samples : ndarray (N, n) int64
        Label indices, one labelling per row (``observed`` of ``pmc.MRF``); for ``"ising"`` the
        spin is ``2 * label - 1``.
    node_weights : ndarray (n,)
        True biases, one per node.
    edge_weights : ndarray (E,)
        True couplings, one per edge (in ``graphs.edges`` order).
    parameterization : str
        ``"ising"`` (+-1 spins) or ``"boltzmann"`` (0/1 units), as ``pmc.MRF`` takes it.
    n_labels : int
    coords : dict
        ``row``, ``node``, ``edge`` for ``pm.Model(coords=...)``.
    dims : dict
        ``{"node_weights": ("node",), "edge_weights": ("edge",), "samples": ("row", "node")}``.
    description : str
        A short text saying what the data set is (the generators name their source).
    settings : dict
        The generator's arguments (seed included).
    """

    graphs: GraphBatch
    samples: np.ndarray
    node_weights: np.ndarray
    edge_weights: np.ndarray
    parameterization: str
    n_labels: int = 2
    description: str = ""
    settings: dict = field(default_factory=dict)

    def __post_init__(self):
        # the sizes are read by coords, log_potentials and the fitters' comparisons with the
        # true weights, so they are checked here rather than where they are first used
        if not isinstance(self.graphs, GraphBatch):
            raise TypeError(f"MRFData: graphs must be a GraphBatch of one graph (the MRF's); got "
                            f"{type(self.graphs).__name__}")
        if self.graphs.n_graphs != 1:
            raise ValueError(f"MRFData: graphs must be a GraphBatch of one graph (the MRF's); got "
                             f"{self.graphs.n_graphs} graphs")
        if self.parameterization not in ("ising", "boltzmann"):
            raise ValueError(f"MRFData: parameterization must be 'ising' or 'boltzmann'; got "
                             f"{self.parameterization!r}")
        if whole_number(self.n_labels, "MRFData: n_labels", minimum=2) != 2:
            raise ValueError(f"MRFData: n_labels must be 2 for the binary "
                             f"{self.parameterization!r} parameterization; got {self.n_labels!r}")
        self.n_labels = 2
        n, E = int(self.graphs.n_nodes[0]), self.graphs.n_edges
        for name, size in (("node_weights", n), ("edge_weights", E)):
            try:
                w = np.asarray(getattr(self, name), dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"MRFData: {name} must be {size} finite numbers; got "
                                 f"{getattr(self, name)!r}") from None
            if w.shape != (size,) or not np.isfinite(w).all():
                raise ValueError(f"MRFData: {name} must be {size} finite numbers, shape "
                                 f"({size},); got shape {w.shape}"
                                 + ("" if w.shape != (size,) else " with NaN or inf"))
            setattr(self, name, w)
        self.samples = check_mrf_labels(self.graphs, self.samples, self.n_labels,
                                        self.parameterization)

    @property
    def coords(self) -> dict:
        return {"row": np.arange(self.samples.shape[0]),
                "node": np.arange(int(self.graphs.n_nodes[0])),
                "edge": np.arange(self.graphs.n_edges)}

    @property
    def dims(self) -> dict:
        return {"node_weights": ("node",), "edge_weights": ("edge",), "samples": ("row", "node")}

    @property
    def true_weights(self) -> dict:
        return {"node_weights": self.node_weights, "edge_weights": self.edge_weights}

    def log_potentials(self) -> tuple[np.ndarray, np.ndarray]:
        """The true node (n, K) and edge (E, K, K) log-potential tables."""
        return _tables(self.graphs, self.parameterization, self.node_weights, self.edge_weights)

    def __repr__(self) -> str:
        return (f"MRFData({self.parameterization}, {int(self.graphs.n_nodes[0])} nodes, "
                f"{self.graphs.n_edges} edges, {self.samples.shape[0]} samples)")


def _tables(graph: GraphBatch, parameterization: str, b: np.ndarray, w: np.ndarray):
    p = mrf_parameterization(graph, parameterization, pt.as_tensor_variable(b),
                             pt.as_tensor_variable(w) if graph.n_edges else None, None)
    return p.node_table(b), p.edge_table(w) if graph.n_edges else p.edge_table(None)


def _interval_mixture(rng: np.random.Generator, d: float, eps: float, size: int) -> np.ndarray:
    """Draws from U{[-d, -d + eps] u [d, d + eps]} (two intervals of equal length eps)."""
    low = np.where(rng.random(size) < 0.5, -d, d)
    return low + eps * rng.random(size)


#: the largest random structure whose labellings parise_welling_random_structure enumerates
_MAX_ENUMERATED_NODES = 20


def parise_welling_random_structure(n_nodes: int = 5, d: float = 0.5 / 4,
                                    epsilon: float = 0.1 / 4, n_samples: int = 10000,
                                    edge_prob: float = 0.5, parameterization: str = "boltzmann",
                                    seed: int | np.random.Generator | None = 0) -> MRFData:
    """A random Boltzmann machine and N exact samples, as Parise & Welling 2006, sec. 4.1.

    The paper draws "random structures on 5 nodes", weights
    ``w ~ U{[-d, -d + eps] u [d, d + eps]}`` with ``eps = 0.1 / 4``, biases ``b ~ U[-1, 1]``,
    ``d`` in ``{0.1, 0.2, 0.5, 1.0, 1.5, 2.0} / 4`` (``0.5 / 4`` in its first experiment) and
    N = 10000 samples by exhaustive enumeration.

    Parameters
    ----------
    n_nodes : int
    d, epsilon : float
        Edge strength and interval width of the coupling distribution.
    n_samples : int
    edge_prob : float
        The paper does not say how structures are drawn; here each of the ``n (n - 1) / 2`` node
        pairs is an edge independently with this probability (G(n, 1/2) by default: 5 edges on
        average, the paper's example has 6), redrawn until the graph has at least one edge.
    parameterization : {"boltzmann", "ising"}
        Parise & Welling 2006, appendix A, writes the model with 0/1 units (features ``x_i`` and
        ``x_i x_j``), hence the default; ``"ising"`` uses the same numbers on +-1 spins.
    seed : int or Generator

    Returns
    -------
    MRFData
    """
    if parameterization not in ("boltzmann", "ising"):
        raise ValueError(f"parameterization must be 'boltzmann' or 'ising'; got "
                         f"{parameterization!r}")
    n_nodes = whole_number(n_nodes, "n_nodes", minimum=2)
    if n_nodes > _MAX_ENUMERATED_NODES:
        raise ValueError(f"n_nodes={n_nodes}: the samples are exact by enumerating all 2^n_nodes "
                         f"labellings, which this generator does up to n_nodes="
                         f"{_MAX_ENUMERATED_NODES}")
    n_samples = whole_number(n_samples, "n_samples")
    edge_prob = positive_number(edge_prob, "edge_prob")
    if edge_prob > 1.0:
        raise ValueError(f"edge_prob must lie in (0, 1]; got {edge_prob}")
    d = positive_number(d, "d")
    epsilon = positive_number(epsilon, "epsilon", allow_zero=True)
    rng = generator(seed, "seed")
    pairs = np.array([(i, j) for i in range(n_nodes) for j in range(i + 1, n_nodes)])
    keep = np.zeros(len(pairs), bool)
    while not keep.any():
        keep = rng.random(len(pairs)) < edge_prob
    graph = GraphBatch.from_edges([pairs[keep]], [n_nodes])
    w = _interval_mixture(rng, d, epsilon, graph.n_edges)
    b = rng.uniform(-1.0, 1.0, size=n_nodes)
    node, edge = _tables(graph, parameterization, b, w)
    # exact sampling by exhaustive enumeration, as the paper
    samples = BruteForce(max_configurations=2**_MAX_ENUMERATED_NODES).sample(graph, node, edge,
                                                                             n_samples, rng)
    return MRFData(graph, samples, b, w, parameterization,
                   description="Parise & Welling 2006 sec. 4.1: random structure on "
                               f"{n_nodes} nodes, d={d:g}, eps={epsilon:g}",
                   settings={"n_nodes": n_nodes, "d": d, "epsilon": epsilon,
                             "n_samples": n_samples, "edge_prob": edge_prob,
                             "parameterization": parameterization,
                             "seed": "Generator" if isinstance(seed, np.random.Generator) else seed})


def welling_parise_grid(rows: int = 5, cols: int = 5, n_samples: int = 1000,
                        sd: float = 0.5, seed: int | np.random.Generator | None = 0) -> MRFData:
    """A +-1 Boltzmann machine on a grid and N exact samples, as Welling & Parise 2006, sec. 7.

    Weights (one per edge) and biases (one per node) are drawn from a zero-mean normal with
    covariance ``0.25 I`` (variance 0.25: ``sd = 0.5``); data cases are perfect samples from the
    junction tree ("forward prediction backward sampling").

    Parameters
    ----------
    rows, cols : int
        Grid size (5 x 5 in the paper).
    n_samples : int
        N, the number of data cases.
    sd : float
        Standard deviation of the weights and biases.
    seed : int or Generator

    Returns
    -------
    MRFData
        ``parameterization="ising"``.
    """
    sd = positive_number(sd, "sd")
    rows, cols = whole_number(rows, "rows"), whole_number(cols, "cols")
    n_samples = whole_number(n_samples, "n_samples")
    rng = generator(seed, "seed")
    graph = GraphBatch.grid(rows, cols)
    if graph.n_edges == 0:
        raise ValueError("the grid needs at least 2 nodes (it has no edges)")
    w = rng.normal(0.0, sd, size=graph.n_edges)
    b = rng.normal(0.0, sd, size=rows * cols)
    node, edge = _tables(graph, "ising", b, w)
    samples = JunctionTree().sample(graph, node, edge, n_samples, rng)
    return MRFData(graph, samples, b, w, "ising",
                   description=f"Welling & Parise 2006 sec. 7: {rows} x {cols} +-1 grid, "
                               f"weights and biases N(0, {sd**2:g})",
                   settings={"rows": rows, "cols": cols, "n_samples": n_samples, "sd": sd,
                             "seed": "Generator" if isinstance(seed, np.random.Generator) else seed})
