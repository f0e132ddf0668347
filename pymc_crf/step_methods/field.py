"""The random-field likelihood of a PyMC model as a step method sees it.

A step method for the weights of a random field splits the model's log density into the
random-field term, evaluated in weight space by the likelihood object of
``docs/fit_contract.md`` (unnormalised score, Bethe or exact log Z, auxiliary draws), and the rest
of the model (the weights' priors, hyper-priors, other observed variables), evaluated by PyMC
(:mod:`pymc_crf.step_methods.rest_logp`).
"""

from __future__ import annotations

import numpy as np
import pymc as pm

from pymc_crf.fitters.objective import CRFLogLikelihood
from pymc_crf.fitters.spec import extract_crf
from pymc_crf.inference.base import Engine
from pymc_crf.inference.bp import labelling_score

__all__ = ["RandomFieldTerm"]


class RandomFieldTerm:
    """The single random-field likelihood of ``model`` and the free weight variables it reads.

    Parameters
    ----------
    model : pm.Model
        A model with one ``pmc.CRF`` likelihood whose weight tensors are free variables without
        a transform (their priors may be anything, including hierarchical ones).
    method : str
        Name of the step method, for error messages.
    """

    def __init__(self, model: pm.Model, method: str):
        spec = extract_crf(model)
        for w in spec.weights:
            if w.name is None:
                raise ValueError(f"{method} needs the random-field weights to be free variables; "
                                 f"they are an expression ({w.reason})")
            rv = model[w.name]
            if model.rvs_to_transforms.get(rv) is not None:
                raise ValueError(f"{method} needs untransformed weights; {w.name!r} has the "
                                 f"transform {type(model.rvs_to_transforms[rv]).__name__}")
        self.spec = spec
        self.model = model
        self.batch = spec.batch
        self.K = int(spec.n_labels)
        self.labels = np.asarray(spec.labels, dtype=np.int64)
        self.rv = model[spec.observed_name]
        self.weight_names = [w.name for w in spec.weights]
        self.size = int(spec.flat_size)

    def likelihood(self, engine: Engine | None = None) -> CRFLogLikelihood:
        """The weight-space likelihood object with ``engine`` (default: the model's)."""
        return CRFLogLikelihood(self.spec, engine)

    def statistics(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Table-space sufficient statistics of a labelling (N,) of the batch, in the layout of
        ``CRFLogLikelihood.observed_statistics`` (node one-hots (N, K); edge indicators (E, K, K)
        or, for a shared edge table, pair counts (1, K, K))."""
        b, K = self.batch, self.K
        labels = np.asarray(labels, dtype=np.int64)
        node = np.zeros((b.n_total_nodes, K))
        node[np.arange(b.n_total_nodes), labels] = 1.0
        yu, yv = labels[b.edges[:, 0]], labels[b.edges[:, 1]]
        if self.spec.shared_edge_table:
            edge = np.zeros((1, K, K))
            np.add.at(edge[0], (yu, yv), 1.0)
        else:
            edge = np.zeros((b.n_edges, K, K))
            edge[np.arange(b.n_edges), yu, yv] = 1.0
        return node, edge

    def log_score(self, tables: tuple[np.ndarray, np.ndarray], labels: np.ndarray) -> float:
        """Unnormalised log score of a labelling under log-potential ``tables``, summed over
        graphs (the log-likelihood without ``-log Z``)."""
        node, edge = tables
        return float(labelling_score(self.batch, node, edge, labels).sum())
