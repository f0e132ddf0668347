"""Synthetic three-class HMM sequences of Luo, Sun & Zhao, sec. VI (tables I-IV).

Each class is a 4-state Gaussian HMM over a subset of eight hidden states ``h1..h8``; ``h1`` and
``h2`` are shared by all classes. The task is to classify whole sequences.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pymc_crf.distributions.hcrf import check_class_labels
from pymc_crf.graphs.batch import GraphBatch, graphs_doc
from pymc_crf.validation import generator, whole_number

__all__ = ["SequenceData", "hmm_classes", "HMM_EMISSION_MEAN", "HMM_EMISSION_VAR",
           "HMM_CLASS_STATES", "HMM_TRANSITIONS"]

# Luo, Sun & Zhao, table I: Gaussian emission (mean, variance) of h1..h8.
HMM_EMISSION_MEAN = np.array([21.0, 23.0, 36.0, 26.0, 11.0, 8.0, 46.0, 1.0])
HMM_EMISSION_VAR = np.array([0.4, 0.8, 0.6, 0.1, 0.8, 0.8, 0.2, 0.2])

# The hidden states (0-based indices into h1..h8) used by each class, in table order.
HMM_CLASS_STATES = (np.array([0, 1, 2, 3]), np.array([0, 1, 4, 5]), np.array([0, 1, 6, 7]))


def _row_normalise(m: np.ndarray) -> np.ndarray:
    return m / m.sum(axis=1, keepdims=True)


# Luo, Sun & Zhao, tables II-IV (rows: current state, columns: next state). Table III's h2 row reads
# (0.10, 0.10, 0.70, 0.40), which sums to 1.3; it is renormalised to sum to one here (all other rows
# already sum to one, so the normalisation leaves them unchanged).
HMM_TRANSITIONS = (
    _row_normalise(np.array([[0.40, 0.40, 0.10, 0.10],
                             [0.10, 0.40, 0.10, 0.40],
                             [0.40, 0.10, 0.40, 0.10],
                             [0.10, 0.10, 0.40, 0.40]])),
    _row_normalise(np.array([[0.10, 0.70, 0.10, 0.10],
                             [0.10, 0.10, 0.70, 0.40],
                             [0.10, 0.10, 0.10, 0.70],
                             [0.70, 0.10, 0.10, 0.10]])),
    _row_normalise(np.array([[0.25, 0.60, 0.10, 0.05],
                             [0.25, 0.20, 0.30, 0.25],
                             [0.10, 0.30, 0.30, 0.30],
                             [0.35, 0.05, 0.10, 0.50]])),
)

# Features are computed from the raw emission x with fixed constants (not data statistics), so the
# train and test sets are transformed identically.
_CENTRE, _SCALE = 24.0, 15.0


@dataclass
class SequenceData:
    """A batch of sequences for sequence classification (HCRF input), labelled or not.

    Attributes
    ----------
    graphs : GraphBatch
        One chain per sequence.
    node_features : ndarray, shape (N, F)
        Features of every frame, sequences concatenated in graph order.
    labels : ndarray of int64, shape (G,), or None
        Class of each sequence, ``0 .. n_classes - 1``; None for new sequences to classify
        (``pmc.predict`` then reports no error rate).
    n_classes : int
    coords : dict
        PyMC coords: ``"feature"``, ``"class"``, ``"graph"``.
    raw : ndarray, shape (N,)
        The raw 1-d emissions (hmm_classes only).
    hidden_states : ndarray of int64, shape (N,)
        The true generating HMM state (0-based index of ``h1..h8``; hmm_classes only).
    """

    graphs: GraphBatch
    node_features: np.ndarray
    labels: np.ndarray | None
    n_classes: int
    coords: dict = field(default_factory=dict)
    raw: np.ndarray | None = None
    hidden_states: np.ndarray | None = None

    def __post_init__(self):
        if not isinstance(self.graphs, GraphBatch):
            raise TypeError(f"SequenceData: graphs must be a GraphBatch (one chain per sequence); "
                            f"got {type(self.graphs).__name__}")
        self.n_classes = whole_number(self.n_classes, "SequenceData: n_classes")
        # the HCRF's own check: one whole class index per sequence, within 0..n_classes-1.
        # None is allowed, as for CRFData: new sequences to classify have no labels (pmc.predict
        # then reports no error rate)
        if self.labels is not None:
            self.labels = check_class_labels(self.labels, self.graphs.n_graphs, self.n_classes)
        try:
            self.node_features = self.graphs.check_features(self.node_features, "node")
        except ValueError as err:
            raise ValueError(f"SequenceData: {err}") from None
        N = self.graphs.n_total_nodes
        for name in ("raw", "hidden_states"):
            value = getattr(self, name)
            if value is not None and np.shape(value)[:1] != (N,):
                raise ValueError(f"SequenceData: {name} must have one entry per frame ({N}); "
                                 f"got shape {np.shape(value)}")

    @property
    def n_graphs(self) -> int:
        return self.graphs.n_graphs

    @graphs_doc
    def subset(self, graphs: Sequence[int] | np.ndarray) -> SequenceData:
        """The listed sequences, in that order.

        %(graphs_parameters)s

        Returns
        -------
        SequenceData
        """
        graphs = self.graphs.graph_ids(graphs)
        idx = self.graphs.node_index(graphs)
        coords = dict(self.coords)
        coords["graph"] = np.arange(len(graphs))
        return SequenceData(
            graphs=self.graphs.subset(graphs), node_features=self.node_features[idx],
            labels=None if self.labels is None else self.labels[graphs],
            n_classes=self.n_classes, coords=coords,
            raw=None if self.raw is None else self.raw[idx],
            hidden_states=None if self.hidden_states is None else self.hidden_states[idx])


def _features(x: np.ndarray, kind: str) -> tuple[np.ndarray, list[str]]:
    z = (x - _CENTRE) / _SCALE
    if kind == "raw":
        return x[:, None].copy(), ["x"]
    if kind == "quadratic":
        return np.stack([z, z * z], axis=1), ["z", "z2"]
    raise ValueError(f"features must be 'quadratic' or 'raw', got {kind!r}")


def _sample_class(rng: np.random.Generator, c: int, n: int, T: int):
    states = HMM_CLASS_STATES[c]
    A = HMM_TRANSITIONS[c]
    h = np.empty((n, T), dtype=np.int64)
    h[:, 0] = rng.integers(0, 4, size=n)  # uniform initial state over the class's four states
    cum = np.cumsum(A, axis=1)
    for t in range(1, T):
        u = rng.random(n)
        h[:, t] = np.minimum((u[:, None] > cum[h[:, t - 1]]).sum(axis=1), 3)
    glob = states[h]
    x = rng.normal(HMM_EMISSION_MEAN[glob], np.sqrt(HMM_EMISSION_VAR[glob]))
    return x, glob


def _make(rng, n_per_class: int, T: int, features: str) -> SequenceData:
    xs, hs, ys = [], [], []
    for c in range(3):
        x, h = _sample_class(rng, c, n_per_class, T)
        xs.append(x)
        hs.append(h)
        ys.append(np.full(n_per_class, c, dtype=np.int64))
    x = np.concatenate(xs).ravel()
    h = np.concatenate(hs).ravel()
    y = np.concatenate(ys)
    feats, names = _features(x, features)
    G = 3 * n_per_class
    return SequenceData(
        graphs=GraphBatch.chains(np.full(G, T, dtype=np.int64)), node_features=feats, labels=y,
        n_classes=3,
        coords={"feature": names, "class": ["class1", "class2", "class3"],
                "graph": np.arange(G)},
        raw=x, hidden_states=h)


def hmm_classes(n_train_per_class: int = 5, n_test_per_class: int = 100, T: int = 100,
                seed: int | np.random.Generator | None = 0,
                features: str = "quadratic") -> tuple[SequenceData, SequenceData]:
    """Three-class HMM sequence data of Luo, Sun & Zhao, sec. VI.

    Class ``c`` is a Gaussian HMM over four of the eight hidden states ``h1..h8`` (class 1: h1-h4,
    class 2: h1, h2, h5, h6, class 3: h1, h2, h7, h8; h1 and h2 are shared), with the emission
    means and variances of Luo, Sun & Zhao, table I and the transition matrices of tables II-IV.

    Choices the paper leaves open or gets wrong, made here:

    * The class-2 transition row of h2 in table III, ``(0.1, 0.1, 0.7, 0.4)``, sums to 1.3; it is
      renormalised to ``(1, 1, 7, 4) / 13``.
    * The initial-state distribution is not given; it is uniform over the class's four states.
    * Variances in table I are variances (the emission sd is their square root).
    * Features: ``"quadratic"`` (default) gives ``z = (x - 24) / 15`` and ``z**2`` per frame, so a
      log-linear node score can express a Gaussian-shaped preference of a hidden state for a value
      of x (with fixed constants, so train and test are transformed identically); ``"raw"`` gives
      ``x`` alone. The raw emissions are kept in ``.raw`` and the generating states in
      ``.hidden_states`` in either case.

    Parameters
    ----------
    n_train_per_class, n_test_per_class : int
        Sequences per class in each split (paper: 5 and 100).
    T : int
        Length of every sequence (paper: 100).
    seed : int, Generator or None
        Random seed; the same seed gives the same data.
    features : {"quadratic", "raw"}

    Returns
    -------
    (train, test) : tuple of SequenceData
        ``.graphs`` (chains), ``.node_features`` (N, F), ``.labels`` (G,), ``.n_classes`` (3),
        ``.coords`` (``feature``, ``class``, ``graph``).
    """
    n_train_per_class = whole_number(n_train_per_class, "n_train_per_class")
    n_test_per_class = whole_number(n_test_per_class, "n_test_per_class")
    T = whole_number(T, "T")
    _features(np.zeros(1), features)  # validates `features` before drawing anything
    rng = generator(seed, "seed")
    train = _make(rng, n_train_per_class, T, features)
    test = _make(rng, n_test_per_class, T, features)
    return train, test
