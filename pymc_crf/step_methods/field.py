"""The random-field likelihood of a PyMC model as a step method sees it.

A step method for the weights of a random field splits the model's log density into the
random-field term, evaluated in weight space by the likelihood object of
``docs/fit_contract.md`` (unnormalised score, Bethe or exact log Z, auxiliary draws), and the rest
of the model (the weights' priors, hyper-priors, other observed variables), evaluated by PyMC
(:mod:`pymc_crf.step_methods.rest_logp`). CRFs (labels of a graph batch, flat (N,)) and MRFs
(i.i.d. rows (S, n) of one graph) go through the same methods here.
"""

from __future__ import annotations

import numpy as np
import pymc as pm

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import Engine
from pymc_crf.inference.bp import labelling_score
from pymc_crf.inference.gibbs import Gibbs
from pymc_crf.model.random_field import (
    MRFSpec,
    extract_random_field,
    random_field_log_likelihood,
)
from pymc_crf.model.spec import CRFSpec, require_all_labels

__all__ = ["RandomFieldTerm"]


class RandomFieldTerm:
    """The single random-field (``pmc.CRF`` or ``pmc.MRF``) likelihood of ``model`` and the free
    weight variables it reads.

    Parameters
    ----------
    model : pm.Model
        A model with one random-field likelihood whose weight tensors are free variables without
        a transform (their priors may be anything, including hierarchical ones).
    method : str
        Name of the step method, for error messages.
    spec : CRFSpec or MRFSpec, optional
        The model's random field as the caller read it (``extract_random_field``; ``pmc.fit``
        reads the model once and hands it on); read from ``model`` when omitted.
    """

    def __init__(self, model: pm.Model, method: str, spec: CRFSpec | MRFSpec | None = None):
        if spec is None:
            spec = extract_random_field(model)
        elif spec.model is not model:
            raise ValueError(f"{method}: spec= was read from another model than the one sampled")
        require_all_labels(spec, method)
        for w in spec.weights:
            if w.name is None:
                raise ValueError(f"{method} needs the random-field weights to be free variables; "
                                 f"they are an expression ({w.reason})")
        names = [w.name for w in spec.weights]
        if len(set(names)) < len(names):
            raise ValueError(f"{method} needs distinct node and edge weight variables: "
                             f"{spec.weights[0].reason}; sample tied weights with NUTS")
        for w in spec.weights:
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
        self.is_mrf = isinstance(spec, MRFSpec)
        # An MRF's rows are independent labellings of one graph: Gibbs runs on a batch of one
        # copy per row, with the tables tiled (built lazily: only Gibbs-based steps need it).
        self._rows_batch: GraphBatch | None = None
        self._ll = random_field_log_likelihood(spec)
        self._shared_stats = self._ll.observed_statistics()[1].shape[0] == 1

    def likelihood(self, engine: Engine | None = None):
        """The weight-space likelihood object with ``engine`` (default: the model's)."""
        return random_field_log_likelihood(self.spec, engine)

    @property
    def n_rows(self) -> int:
        """Independent labellings in the data: 1 (a CRF's whole batch) or the MRF's rows."""
        return self.labels.shape[0] if self.is_mrf else 1

    def statistics(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Table-space sufficient statistics of labels in the data's layout, as the likelihood
        object's ``observed_statistics``: node one-hot counts (nodes, K) and edge indicator counts
        (E, K, K), or (1, K, K) summed over edges for a shared edge table."""
        if self.is_mrf:
            return self._ll.statistics(labels)
        b, K = self.batch, self.K
        x = np.asarray(labels, dtype=np.int64)
        node = np.zeros((b.n_total_nodes, K))
        node[np.arange(b.n_total_nodes), x] = 1.0
        yu, yv = x[b.edges[:, 0]], x[b.edges[:, 1]]
        if self._shared_stats:
            edge = np.zeros((1, K, K))
            np.add.at(edge[0], (yu, yv), 1.0)
        else:
            edge = np.zeros((b.n_edges, K, K))
            edge[np.arange(b.n_edges), yu, yv] = 1.0
        return node, edge

    def log_score(self, tables: tuple[np.ndarray, np.ndarray], labels: np.ndarray) -> float:
        """Unnormalised log score of labels (data layout) under log-potential ``tables``, summed
        over graphs / rows (the log-likelihood without the log Z terms)."""
        node, edge = tables
        rows = np.atleast_2d(np.asarray(labels, dtype=np.int64))
        return float(labelling_score(self.batch, node, edge, rows).sum())

    def exact_draw(self, engine: Engine, tables, rng: np.random.Generator) -> np.ndarray:
        """Labels in the data's layout drawn from the model at ``tables`` by ``engine``'s sampler
        (one labelling of the batch for a CRF, as many rows as the data for an MRF)."""
        node, edge = tables
        draws = engine.sample(self.batch, node, edge, self.n_rows, rng)
        return draws if self.is_mrf else draws[0]

    def gibbs_from_data(self, gibbs: Gibbs, tables, rng: np.random.Generator) -> np.ndarray:
        """Labels in the data's layout after ``gibbs`` (its burn-in + thin sweeps) started at the
        observed labels under ``tables``."""
        node, edge = tables
        if not self.is_mrf:
            return gibbs.run(self.batch, node, edge, 1, rng, init=self.labels)[0][0]
        S, n = self.labels.shape
        if self._rows_batch is None:
            self._rows_batch = GraphBatch.from_edges([self.batch.edges] * S, [n] * S)
        edge_rows = edge if edge.shape[0] == 1 else np.tile(edge, (S, 1, 1))
        x = gibbs.run(self._rows_batch, np.tile(node, (S, 1)), edge_rows, 1, rng,
                      init=self.labels.reshape(-1))[0][0]
        return x.reshape(S, n)
