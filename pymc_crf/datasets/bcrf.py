"""The synthetic data of Qi, Szummer & Minka (2005) sec. 8.1 / Qi (2005) thesis sec. 5.5.1."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pymc_crf.datasets.base import CRFData
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.select import get_engine
from pymc_crf.potentials import log_potential
from pymc_crf.validation import positive_number, whole_number

if TYPE_CHECKING:
    import pymc as pm

__all__ = ["bcrf_model", "bcrf_synthetic"]

N_EDGE_FEATURES = 6
PRIOR_VARIANCE = 5.0


def bcrf_synthetic(kind: str = "loop", n_train: int = 10, n_test: int = 1000, seed: int = 0,
                   noise: float = 0.5, n_nodes: int = 3,
                   n_irrelevant: int = 0) -> tuple[CRFData, CRFData]:
    """Train and test sets of small binary probit CRFs (Qi, Szummer & Minka 2005, sec. 8.1; thesis sec.
    5.5.1).

    The paper fixes: binary labels, graphs of 3 vertices in a loop or a chain, w of 24 elements
    (6 edge features x 2 x 2 label pairs), edge feature vectors drawn from one of four Gaussians,
    labels sampled exactly from the probit CRF (eq. (4) with epsilon = 0), a N(0, 5 I) prior.
    It leaves open the Gaussians, the true w and the noise level; our fixed choices are:

    * the true weights ``w ~ N(0, 5 I)`` (the prior the paper trains with), drawn from ``seed``;
    * four Gaussian centres ``mu_c ~ N(0, I_6)``, drawn from ``seed``; each edge picks a centre
      uniformly and gets ``x_e = mu_c + noise * z``, ``z ~ N(0, I_6)`` (``noise`` sets how
      discriminable the data are; 0.5 by default);
    * labels drawn exactly (junction tree for loops, forward-filtering backward-sampling for chains)
      from the probit CRF with epsilon = 0, no node potentials;
    * the training and test graphs come from the same ``seed`` (one trial), test after train;
    * ``n_irrelevant`` extra edge features (for feature selection, thesis ch. 4) are i.i.d.
      N(0, 1), drawn from a second stream of ``seed`` so the first six features and the labels
      are those of ``n_irrelevant=0``; their true weights are 0.

    Parameters
    ----------
    kind : {"loop", "chain"}
    n_train, n_test : int
        Number of graphs in each set.
    seed : int
        One seed per trial: the same seed gives the same data.
    noise : float
        Standard deviation of the features around their Gaussian's centre.
    n_nodes : int
        Vertices per graph (3 in the paper).
    n_irrelevant : int
        Edge features appended that the labels do not depend on.

    Returns
    -------
    (train, test) : tuple of CRFData
        With ``edge_features`` (E, 6 + n_irrelevant), ``labels``, ``true_weights["w"]``
        (6 + n_irrelevant, 2, 2), potential
        ``"probit"``, epsilon 0. ``test`` is None when ``n_test=0``.

    Examples
    --------
    >>> train, test = bcrf_synthetic("loop", n_train=10, n_test=100, seed=0)
    >>> train.edge_features.shape, train.true_weights["w"].shape
    ((30, 6), (6, 2, 2))
    """
    if kind not in ("loop", "chain"):
        raise ValueError(f"kind must be 'loop' or 'chain', got {kind!r}")
    n_train = whole_number(n_train, "n_train")
    n_test = whole_number(n_test, "n_test", minimum=0)
    n_nodes = whole_number(n_nodes, f"n_nodes (of a {kind})", minimum=3 if kind == "loop" else 2)
    noise = positive_number(noise, "noise", allow_zero=True)
    n_irrelevant = whole_number(n_irrelevant, "n_irrelevant", minimum=0)
    seed = whole_number(seed, "seed", minimum=0)  # an int: it also seeds [seed, 1] below
    rng = np.random.default_rng(seed)
    rng_irrelevant = np.random.default_rng([seed, 1])
    w = rng.normal(0.0, np.sqrt(PRIOR_VARIANCE), size=(N_EDGE_FEATURES, 2, 2))
    centres = rng.normal(size=(4, N_EDGE_FEATURES))

    def make(n_graphs: int, desc: str) -> CRFData:
        if kind == "chain":
            batch = GraphBatch.chains([n_nodes] * n_graphs)
        else:
            ring = [(i, (i + 1) % n_nodes) for i in range(n_nodes)]
            batch = GraphBatch.from_edges([ring] * n_graphs, [n_nodes] * n_graphs)
        comp = rng.integers(0, 4, size=batch.n_edges)
        x = centres[comp] + noise * rng.normal(size=(batch.n_edges, N_EDGE_FEATURES))
        edge = log_potential(np.einsum("ef,fab->eab", x, w), "probit", 0.0)
        node = np.zeros((batch.n_total_nodes, 2))
        labels = get_engine("auto", batch).sample(batch, node, edge, 1, rng)[0]
        if n_irrelevant:
            x = np.hstack([x, rng_irrelevant.normal(size=(batch.n_edges, n_irrelevant))])
        w_all = np.concatenate([w, np.zeros((n_irrelevant, 2, 2))])
        return CRFData(batch, labels, None, x, 2, {"w": w_all}, "probit", 0.0,
                       f"bcrf_synthetic({kind!r}, seed={seed}): {desc}")

    train = make(n_train, "train")
    test = make(n_test, "test") if n_test else None
    return train, test


def bcrf_model(data: CRFData, prior_sd: float | None = 5**0.5) -> pm.Model:
    """The BCRF model of Qi, Szummer & Minka 2005, sec. 8.1, on data from :func:`bcrf_synthetic`.

    The data's potential (probit edge potentials) on its edge features, weights ``w ~ N(0,
    prior_sd^2 I)`` (4 per edge feature: 24 for the paper's six, more with ``n_irrelevant``).

    Parameters
    ----------
    data : CRFData
        Data from :func:`bcrf_synthetic`.
    prior_sd : float or None, default sqrt(5)
        Prior standard deviation of the weights (the paper's prior variance 5 by default); must
        be positive. None gives the weights a flat prior (``pm.Flat``): ``method="map"`` is then
        the maximum-likelihood CRF (the thesis's ML-CRF), and the posterior is improper.

    Returns
    -------
    pymc.Model
        The model, with the data's coords; ``pmc.fit(model, method=...)`` fits it.
    """
    import pymc as pm

    from pymc_crf.distributions import CRF

    dims = ("edge_feature", "label_i", "label_j")
    if prior_sd is not None:
        prior_sd = positive_number(prior_sd, "prior_sd (None for a flat prior)")
    with pm.Model(coords=data.coords) as model:
        w = (pm.Flat("w", dims=dims) if prior_sd is None
             else pm.Normal("w", 0.0, prior_sd, dims=dims))
        CRF("t", graphs=data.graphs, edge_features=data.edge_features, edge_weights=w,
            potential=data.potential, epsilon=data.epsilon, observed=data.padded_labels,
            dims=("graph", "position"))
    return model
