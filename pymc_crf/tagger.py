"""``CRFTagger``: a chain-CRF sequence tagger with sklearn-crfsuite's interface, fitted by any
``pmc.fit`` method.

The estimator takes what sklearn-crfsuite's ``CRF`` takes: ``X`` a list of sentences, each a list
of per-token feature dicts (``str`` values are indicators ``name=value``, numbers and booleans
numeric features, see :class:`pymc_crf.FeatureVectorizer`), and ``y`` a list of tag sequences. It
builds the linear-chain CRF of ``docs/real_data.md`` (one weight per feature x tag and per tag
pair, Gaussian prior) and fits it with ``pmc.fit``:

>>> from pymc_crf import CRFTagger                                      # doctest: +SKIP
>>> tagger = CRFTagger(c2=1.0).fit(X_train, y_train)                    # doctest: +SKIP
>>> tagger.predict(X_test)[0], tagger.predict_marginals(X_test)[0][0]   # doctest: +SKIP
(['B-NP', 'I-NP', ...], {'B-NP': 0.98, 'I-NP': 0.01, ...})

It is a scikit-learn estimator (``get_params`` / ``set_params`` / ``clone``), so
``cross_val_score``, ``GridSearchCV`` and ``Pipeline`` work on lists of sentences; ``score`` is
token accuracy, as sklearn-crfsuite's. ``check_estimator`` does not apply whole: see
``docs/tagger.md``. The fitted state is the vectorizer's vocabulary, the tag set and the fit's
``DataTree`` (``result_``); no PyMC model is kept, so a tagger pickles (joblib) and saves to
netCDF (:meth:`CRFTagger.to_netcdf`, :meth:`CRFTagger.from_netcdf`).
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from pymc_crf.features import FeatureVectorizer, encode_tags, sequence_batch
from pymc_crf.validation import flag, positive_number, whole_number

if TYPE_CHECKING:
    from pymc_crf.datasets.base import CRFData

__all__ = ["CRFTagger"]

#: sentences as the tagger takes them: each a sequence of tokens, a token a feature dict or a
#: list of feature strings (python-crfsuite's form)
Sentences = Sequence[Sequence[Mapping[str, Any] | Sequence[str]]]
#: tags as the tagger takes them: one sequence of str tags per sentence
TagSequences = Sequence[Sequence[str]]

#: format tag of a tagger saved by :meth:`CRFTagger.to_netcdf`
NETCDF_FORMAT = "pymc_crf.CRFTagger/1"
#: ``c2="learned"``: the Gibbs sweeps' default options (those measured on CoNLL-2000, docs/tagger.md)
LEARNED_SCALE_OPTIONS = {"chains": 2, "tune": 30, "draws": 70, "refine": 10}


def _without_client(params: dict) -> dict:
    """``params`` with a Dask ``client`` left out of the fitter and scale options: it says where
    a fit ran, not what the model is, and neither pickles nor goes to JSON."""
    out = dict(params)
    for key in ("method_options", "scale_options"):
        if isinstance(out.get(key), Mapping) and "client" in out[key]:
            out[key] = {k: v for k, v in out[key].items() if k != "client"}
    return out


def _check_sentences(X, name: str) -> list:
    """``X`` as a list of sentences (each a sequence of token dicts); clear errors else."""
    if isinstance(X, str | bytes | Mapping) or not isinstance(X, Sequence | np.ndarray):
        raise TypeError(f"{name} must be a list of sentences, each a list of per-token feature "
                        f"dicts; got {type(X).__name__}")
    X = list(X)
    for s, sent in enumerate(X):
        if isinstance(sent, Mapping):
            raise TypeError(f"{name}[{s}] is a dict, one token's features: {name} must be a list "
                            "of sentences, each a list of token dicts; for one sentence pass "
                            f"[sentence] (or use predict_single / predict_marginals_single)")
        if isinstance(sent, str | bytes) or not isinstance(sent, Sequence):
            raise TypeError(f"{name}[{s}] must be a list of per-token feature dicts (one "
                            f"sentence); got {type(sent).__name__}. A CRFTagger takes sentences "
                            "of token dicts, not a 2-d numeric array")
    return X


def _check_tags(y, X: list, name: str, x_name: str) -> list[list[str]]:
    """``y`` as a list of tag lists matching the sentences of ``X`` token for token."""
    if isinstance(y, str | bytes) or not isinstance(y, Sequence | np.ndarray):
        raise TypeError(f"{name} must be a list of tag sequences (one list of str per "
                        f"sentence); got {type(y).__name__}")
    y = [list(t) if not isinstance(t, str) else t for t in y]
    if len(y) != len(X):
        raise ValueError(f"{x_name} has {len(X)} sentences and {name} {len(y)}")
    for s, (xs, ts) in enumerate(zip(X, y, strict=True)):
        if isinstance(ts, str):
            raise TypeError(f"{name}[{s}] is the string {ts!r}; it must be a list of tags")
        if len(xs) != len(ts):
            raise ValueError(f"sentence {s}: {x_name}[{s}] has {len(xs)} tokens and "
                             f"{name}[{s}] {len(ts)} tags")
        for t, tag in enumerate(ts):
            if not isinstance(tag, str):
                raise TypeError(f"{name}[{s}][{t}] is {tag!r} ({type(tag).__name__}); tags must "
                                "be str")
    return y


class CRFTagger(BaseEstimator):
    """Linear-chain CRF tagger over per-token feature dicts, fitted by any ``pmc.fit`` method.

    The model: node weights ``W`` (features x tags) and a transition table ``T`` (tags x tags),
    all ``Normal(0, prior_sd)``, and the chain CRF likelihood of the tags. With ``method="map"``
    this is CRFsuite's L2-regularised objective ``-log L + c2 ||w||^2`` with every feature x tag
    and tag x tag weight (CRFsuite's ``feature.possible_states`` and
    ``feature.possible_transitions``).

    Parameters
    ----------
    c2 : float, "evidence" or "learned"
        CRFsuite's L2 coefficient; the prior sd is ``1 / sqrt(2 c2)`` (1.0 -> 0.7071). Ignored
        when ``prior_sd`` is given. ``"evidence"``: chosen by the data without a grid search:
        one prior sd shared by every weight is learned by maximising the Laplace evidence
        (type-II maximum likelihood; the scale ``pmc.fit(method="laplace",
        covariance="implicit")`` learns: the exact curvature, ``log det`` by stochastic Lanczos
        quadrature, MAPs at a few values of ``log s`` and a model of the evidence between them),
        then the tagger is fitted by ``method`` at that sd; the chosen value is ``c2_``.
        ``"learned"``: one prior sd per group of features, the groups a feature template
        (``FeatureVectorizer.templates_``) crossed with how many training tokens the feature
        fires on (1, 2-3, 4-15, 16 or more), and one for the transitions, each with a
        ``HalfNormal(1)`` prior; the sds are integrated over with the weights by
        ``pmc.fit(method="randomized_map")``'s Gibbs sweeps (``scale_options``), then the
        tagger is fitted by ``method`` at their posterior means (``prior_scales_``). Groups
        that fire on the same tokens keep their share of the signal (a point estimate of
        many scales prunes some of them, docs/randomized_map.md). It costs far more than a MAP
        (two warm-started optimisations a sweep, 200 sweeps by default): docs/tagger.md gives
        the measured cost and gain.
    prior_sd : float, optional
        The prior standard deviation of every weight, instead of ``c2``.
    method : str
        A registered fitter (``pmc.fitters.available()``): ``"map"`` (default; one point),
        ``"bethe_laplace"`` (Laplace approximation: exact on chains, a dense covariance of all
        weights, so small feature sets only), ``"nuts"`` (small data), ``"ep"`` ...
    method_options : dict, optional
        More keyword arguments of the fitter (e.g. ``{"ftol": 1e-6}`` for ``"map"``,
        ``{"draws": 500, "tune": 500}`` for ``"nuts"``).
    min_freq : int
        Keep a feature only if it occurs in at least this many training tokens.
    draws : int or None
        Posterior draws averaged by ``predict_marginals(average=True)`` (None: all).
    random_state : int, optional
        Seed of the fit (fitters that draw) and of the choice of draws to average.
    scale_options : dict, optional
        ``c2="learned"``: options of the Gibbs sweeps' ``pmc.fit(method="randomized_map")``
        (default ``{"chains": 2, "tune": 30, "draws": 70, "refine": 10}``; e.g. ``client`` to
        run the chains on Dask workers).
    progressbar : bool
        Show the fitter's progress bar (not the evidence search's, which has none).

    Attributes
    ----------
    classes_ : list of str
        The tags, in the order of the model's labels (sorted).
    result_ : xarray.DataTree
        The fit (``posterior`` holds ``W`` (feature, tag) and ``T`` (tag_from, tag), with the
        feature names and tags as coordinates), for ArviZ.
    vectorizer_ : FeatureVectorizer
        Feature dicts -> columns (fitted vocabulary).
    dev_score_ : float
        Token accuracy on ``X_dev`` / ``y_dev`` when they were given to :meth:`fit`.
    c2_ : float
        The L2 coefficient the tagger was fitted with (the evidence's choice for
        ``c2="evidence"``); not set for ``c2="learned"``.
    prior_scales_ : dict of str to float
        ``c2="learned"``: the prior sd of each group of features (``"template (count
        bucket)"``) and of the transitions (``"transitions"``), their posterior means.
    metadata_ : dict
        Free-form JSON-able information saved with the tagger (the command line records its
        feature template there); empty by default.
    """

    def __init__(self, c2: float | str = 1.0, prior_sd: float | None = None, method: str = "map",
                 method_options: dict | None = None, min_freq: int = 1, draws: int | None = 200,
                 random_state: int | None = None, scale_options: dict | None = None,
                 progressbar: bool = False):
        self.c2 = c2
        self.prior_sd = prior_sd
        self.method = method
        self.method_options = method_options
        self.min_freq = min_freq
        self.draws = draws
        self.random_state = random_state
        self.scale_options = scale_options
        self.progressbar = progressbar

    # -- parameters -------------------------------------------------------------------------

    def _prior_sd(self) -> float | str:
        """The fixed prior sd, or ``"evidence"`` / ``"learned"`` (``c2``)."""
        if self.prior_sd is not None:
            return positive_number(self.prior_sd, "prior_sd")
        if isinstance(self.c2, str):
            if self.c2 not in ("evidence", "learned"):
                raise ValueError(f"c2 must be a number > 0, 'evidence' or 'learned'; got "
                                 f"{self.c2!r}")
            return self.c2
        return (1.0 / (2.0 * positive_number(self.c2, "c2"))) ** 0.5

    def _scale_options(self) -> dict:
        """The Gibbs sweeps' options for ``c2="learned"`` (defaults, then ``scale_options``)."""
        if self.scale_options is not None and not isinstance(self.scale_options, Mapping):
            raise TypeError(f"scale_options must be a dict of pmc.fit(method='randomized_map') "
                            f"options; got {type(self.scale_options).__name__}")
        opts = {**LEARNED_SCALE_OPTIONS, **(self.scale_options or {})}
        if opts.pop("scale_method", "gibbs") != "gibbs":
            raise ValueError("c2='learned' integrates over the scales (scale_method='gibbs'); "
                             "for one value of them fit the model with pmc.fit directly")
        opts.setdefault("progressbar", flag(self.progressbar, "progressbar"))
        if self.random_state is not None:
            opts.setdefault("random_seed", self.random_state)
        return opts

    def _learned_sds(self, graphs, features, labels, K: int, vec: FeatureVectorizer
                     ) -> tuple[np.ndarray, float, dict[str, float]]:
        """``c2="learned"``: the posterior-mean prior sd of every feature (F,) and of the
        transitions, by the Gibbs sweeps of ``pmc.fit(method="randomized_map")`` on the model
        with one ``HalfNormal(1)`` scale per feature group (template x training-count bucket)
        and one for the transitions; and the sds by group name."""
        import pymc as pm

        import pymc_crf as pmc

        opts = self._scale_options()
        names = vec.template_count_groups(features)
        groups, index = np.unique(names, return_inverse=True)
        with pm.Model() as model:
            s = pm.HalfNormal("s", 1.0, shape=len(groups))
            t = pm.HalfNormal("t", 1.0)
            W = pm.Normal("W", 0.0, s[index][:, None], shape=(features.shape[1], K))
            T = pm.Normal("T", 0.0, t, shape=(K, K))
            pmc.CRF("y", graphs=graphs, node_features=features, node_weights=W,
                    edge_weights=T, observed=labels)
        fit = pmc.fit(model, method="randomized_map", scale_method="gibbs",
                      log_likelihood=False, **opts)
        post = fit["posterior"]
        s_mean = post["s"].values.mean(axis=(0, 1))
        t_mean = float(post["t"].values.mean())
        scales = {str(g): float(v) for g, v in zip(groups, s_mean, strict=True)}
        scales["transitions"] = t_mean
        return s_mean[index], t_mean, scales

    @staticmethod
    def _evidence_sd(graphs, features, labels, K: int) -> float:
        """The prior sd of every weight that maximises the Laplace evidence (``c2="evidence"``):
        the scale ``pmc.fit(model, method="laplace", covariance="implicit", hyperprior=False)``
        learns, taken from ``learn_scales`` without the fit's draws and variances."""
        import pymc as pm

        import pymc_crf as pmc
        from pymc_crf.fitters.bethe_laplace.problem import weight_problem
        from pymc_crf.fitters.bethe_laplace.scales import learn_scales

        with pm.Model() as model:
            s = pm.HalfNormal("s", 1.0)
            W = pm.Normal("W", 0.0, s, shape=(features.shape[1], K))
            T = pm.Normal("T", 0.0, s, shape=(K, K))
            pmc.CRF("y", graphs=graphs, node_features=features, node_weights=W,
                    edge_weights=T, observed=labels)
        problem = weight_problem(model, "laplace", learn_scales=True)
        learned = learn_scales(problem, covariance="implicit", hyperprior=False, finish=False)
        return float(learned.point.scales[0])

    def _fit_options(self) -> dict:
        from pymc_crf.fitters.registry import available, fitter, load_builtin

        load_builtin()
        if not isinstance(self.method, str) or self.method not in available():
            raise ValueError(f"method={self.method!r} is not a registered fitter; choose from "
                             f"{available()}")
        if self.method_options is not None and not isinstance(self.method_options, Mapping):
            raise TypeError(f"method_options must be a dict of the fitter's options; got "
                            f"{type(self.method_options).__name__}")
        opts = dict(self.method_options or {})
        params = inspect.signature(fitter(self.method)).parameters
        if "progressbar" in params and "progressbar" not in opts:
            opts["progressbar"] = flag(self.progressbar, "progressbar")
        if ("random_seed" in params and "random_seed" not in opts
                and self.random_state is not None):
            opts["random_seed"] = self.random_state
        return opts

    # -- fitting ----------------------------------------------------------------------------

    def fit(self, X: Sentences, y: TagSequences, X_dev: Sentences | None = None,
            y_dev: TagSequences | None = None) -> CRFTagger:
        """Fit the tagger.

        Parameters
        ----------
        X : list of sentences
            Each a list of per-token feature dicts (str -> str / number / bool).
        y : list of tag sequences
            One list of str tags per sentence, as long as the sentence.
        X_dev, y_dev : optional
            Held-out sentences and tags: their token accuracy is stored as ``dev_score_`` (the
            fit itself does not use them; sklearn-crfsuite only reports them too).

        Returns
        -------
        CRFTagger
            ``self``, fitted.
        """
        import pymc as pm

        import pymc_crf as pmc

        X = _check_sentences(X, "X")
        y = _check_tags(y, X, "y", "X")
        if (X_dev is None) != (y_dev is None):
            raise ValueError("give both X_dev and y_dev, or neither")
        if X_dev is not None:
            X_dev = _check_sentences(X_dev, "X_dev")
            y_dev = _check_tags(y_dev, X_dev, "y_dev", "X_dev")
        sd = self._prior_sd()
        opts = self._fit_options()
        if self.draws is not None:  # used by predict_marginals: bad values fail before the work
            whole_number(self.draws, "draws (None for all draws)")
        if sd == "learned":
            self._scale_options()  # bad options fail before the work
        keep = [i for i, s in enumerate(X) if len(s)]  # empty sentences carry no information
        if not keep:
            raise ValueError("X has no tokens: every sentence is empty")
        vec = FeatureVectorizer(min_freq=whole_number(self.min_freq, "min_freq"))
        # every sentence, so that errors name the user's sentence numbers (an empty one has no
        # rows)
        features = vec.fit_transform(X)
        X, y = [X[i] for i in keep], [y[i] for i in keep]
        labels, classes = encode_tags(y)
        if len(classes) < 2:
            raise ValueError(f"y has a single tag {classes}: a tagger needs at least two")
        graphs = sequence_batch(X)
        scales = None
        if sd == "evidence":
            sd = self._evidence_sd(graphs, features, labels, len(classes))
        if sd == "learned":
            node_sd, edge_sd, scales = self._learned_sds(graphs, features, labels,
                                                         len(classes), vec)
            node_sd = node_sd[:, None]
        else:
            node_sd = edge_sd = sd
        coords = {"feature": vec.feature_names_, "tag": classes, "tag_from": classes}
        with pm.Model(coords=coords) as model:
            W = pm.Normal("W", 0.0, node_sd, dims=("feature", "tag"))
            T = pm.Normal("T", 0.0, edge_sd, dims=("tag_from", "tag"))
            pmc.CRF("y", graphs=graphs, node_features=features, node_weights=W,
                    edge_weights=T, observed=labels)
        result = pmc.fit(model, method=self.method, **opts)
        self.__dict__.pop("c2_", None)  # a previous fit's
        self.__dict__.pop("prior_scales_", None)
        if scales is None:  # the c2 given, else the one of the sd (given or by evidence)
            self.c2_ = (float(self.c2) if self.prior_sd is None and not isinstance(self.c2, str)
                        else 1.0 / (2.0 * sd**2))
        else:
            self.prior_scales_ = scales
        self.vectorizer_ = vec
        self.classes_ = list(classes)
        self.result_ = result
        self.metadata_ = dict(getattr(self, "metadata_", {}) or {})
        self._cache = {}
        self.__dict__.pop("dev_score_", None)  # a previous fit's
        if X_dev is not None:
            self.dev_score_ = self.score(X_dev, y_dev)
        return self

    # -- prediction -------------------------------------------------------------------------

    def _check_fitted(self) -> None:
        if not hasattr(self, "result_"):
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet: call "
                                 "fit(X, y) with sentences of token feature dicts and their "
                                 "tags first")

    def _data(self, X: list):
        """The ``CRFData`` of the non-empty sentences of ``X`` and their indices in ``X``."""
        from pymc_crf.datasets.base import CRFData

        keep = [i for i, s in enumerate(X) if len(s)]
        feats = self.vectorizer_.transform(X)  # errors name X's own sentence numbers
        if not keep:
            return None, keep
        return CRFData(sequence_batch([len(X[i]) for i in keep]), None, feats,
                       n_labels=len(self.classes_)), keep

    def _weights(self) -> dict:
        """``info`` (the result's CRF layout), the weight draws ``(S, ...)`` and their mean."""
        if not getattr(self, "_cache", None):
            from pymc_crf.model.predictors import posterior_mean, result_layout, weight_draws

            info = result_layout(self.result_)
            draws = weight_draws(self.result_, info)
            self._cache = {"info": info, "draws": draws,
                           "mean": posterior_mean(self.result_, draws, info)}
        return self._cache

    def log_potentials(self, X: Sentences, weights: Mapping[str, np.ndarray] | None = None
                       ) -> tuple[CRFData, np.ndarray, np.ndarray]:
        """The chain's node (N, K) and shared edge (1, K, K) log-potentials of sentences ``X``.

        Parameters
        ----------
        X : list of sentences
            Token feature dicts; empty sentences contribute no rows.
        weights : dict, optional
            ``{"node_weights": (F, K), "edge_weights": (K, K)}``; default the posterior mean
            (the MAP for ``method="map"``).

        Returns
        -------
        (CRFData, ndarray, ndarray)
            The data (graphs: one chain per non-empty sentence) and the tables, for the
            inference engines (``pymc_crf.inference.get_engine("chain")``).
        """
        from pymc_crf.model.predictors import log_potentials_for

        self._check_fitted()
        X = _check_sentences(X, "X")
        data, _ = self._data(X)
        if data is None:
            raise ValueError("X has no tokens")
        w = self._weights()
        if weights is None:
            weights = w["mean"]
        else:
            # a missing key would be read as zero weights: uniform or transition-free tables
            keys = {"node_weights", "edge_weights"}
            if not isinstance(weights, Mapping) or set(weights) != keys:
                got = sorted(weights) if isinstance(weights, Mapping) else type(weights).__name__
                raise ValueError(f"weights must be a dict with exactly the keys {sorted(keys)} "
                                 f"(node (F, K) and edge (K, K) weights); got {got}")
            # only the features' columns were checked (and named the data, not the weights):
            # a wrong K gave node and edge tables of different K, a 3-d edge table a (1, 1, K, K)
            # one, NaN weights NaN tables, all handed on to the engines
            F, K = w["mean"]["node_weights"].shape[0], len(self.classes_)
            want = {"node_weights": (F, K), "edge_weights": (K, K)}
            checked = {}
            for key, shape in want.items():
                try:
                    value = np.asarray(weights[key], dtype=np.float64)
                except (TypeError, ValueError) as err:
                    raise ValueError(f"weights[{key!r}] must be a numeric array {shape}; "
                                     f"got {type(weights[key]).__name__} ({err})") from None
                if value.shape != shape:
                    raise ValueError(f"weights[{key!r}] must have shape {shape} ({F} features, "
                                     f"{K} tags); got {value.shape}")
                if not np.isfinite(value).all():
                    raise ValueError(f"weights[{key!r}] contains NaN or inf")
                checked[key] = value
            weights = checked
        node, edge = log_potentials_for(data, w["info"], weights.get("node_weights"),
                                        weights.get("edge_weights"))
        return data, node, edge

    def _split(self, flat: Sequence, X: list, keep: list[int]) -> list[list]:
        out: list[list] = [[] for _ in X]
        i = 0
        for s in keep:
            n = len(X[s])
            out[s] = list(flat[i:i + n])
            i += n
        return out

    def predict(self, X: Sentences) -> list[list[str]]:
        """The most probable tag sequence of each sentence (Viterbi at the posterior mean: the
        MAP weights for ``method="map"``).

        Parameters
        ----------
        X : list of sentences
            Each a list of per-token feature dicts; features unseen in training are ignored.

        Returns
        -------
        list of list of str
        """
        self._check_fitted()
        X = _check_sentences(X, "X")
        if not any(len(s) for s in X):
            return [[] for _ in X]
        data, keep = self._data(X)
        return self._viterbi(data, X, keep)

    def _viterbi(self, data, X: list, keep: list[int]) -> list[list[str]]:
        """:meth:`predict` of ``X`` from its vectorised ``data`` (``_data``)."""
        from pymc_crf.inference.select import get_engine
        from pymc_crf.model.predictors import log_potentials_for

        w = self._weights()
        node, edge = log_potentials_for(data, w["info"], w["mean"].get("node_weights"),
                                        w["mean"].get("edge_weights"))
        labels = get_engine("auto", data.graphs).map_assignment(data.graphs, node, edge).labels
        return self._split([self.classes_[k] for k in labels], X, keep)

    def marginals_array(self, X: Sentences, average: bool = True, *, client: Any = None,
                        n_partitions: int | None = None) -> np.ndarray:
        """Per-token tag marginals of all non-empty sentences of ``X`` stacked.

        Parameters
        ----------
        X, average, client, n_partitions
            As :meth:`predict_marginals`.

        Returns
        -------
        ndarray (N, K)
            One row per token of the non-empty sentences, its columns in the order of
            ``classes_``.
        """
        self._check_fitted()
        X = _check_sentences(X, "X")
        data, _ = self._data(X)
        return self._marginals(data, average, client, n_partitions)

    def _marginals(self, data, average: bool, client: Any, n_partitions: int | None
                   ) -> np.ndarray:
        """:meth:`marginals_array` from the vectorised ``data`` (``_data``)."""
        import pymc_crf as pmc

        if data is None:
            return np.zeros((0, len(self.classes_)))
        average = flag(average, "average")
        if average and self._weights()["draws"]["node_weights"].shape[0] > 1:
            method = "average"
            options = {"draws": self.draws,
                       "random_seed": 0 if self.random_state is None else self.random_state}
        else:
            method, options = "bpe", {}
        if client is None:
            return pmc.predict(self.result_, data, method, **options).marginals
        from pymc_crf.distributed import predict, shard_ranges

        n = whole_number(4 if n_partitions is None else n_partitions, "n_partitions", minimum=1)
        # at most one partition per non-empty sentence: a partition holds at least one graph
        n = min(n, data.graphs.n_graphs)
        parts = [data.subset(np.arange(a, b)) for a, b in shard_ranges(data.graphs.n_graphs, n)]
        return predict(self.result_, parts, method, client=client, **options).marginals

    def predict_marginals(self, X: Sentences, average: bool = True, *, client: Any = None,
                          n_partitions: int | None = None) -> list[list[dict[str, float]]]:
        """Per-token tag probabilities, as sklearn-crfsuite's ``predict_marginals``.

        Parameters
        ----------
        X : list of sentences
            Each a list of per-token feature dicts.
        average : bool
            When the fit gave several posterior draws (``nuts``, ``bethe_laplace`` ...), average
            the exact chain marginals over ``draws`` of them (the posterior predictive); False,
            or a one-point fit (``map``): the marginals at the posterior mean.
        client : distributed.Client or str, optional
            Compute on a Dask cluster (``pmc.distributed.predict``: the fit broadcast once, the
            sentences in ``n_partitions`` partitions, default 4, at most one per non-empty
            sentence); the result is the local one, bit for bit.
        n_partitions : int, optional
            Partitions of the sentences for ``client``.

        Returns
        -------
        list of list of dict
            For each sentence, for each token, ``{tag: probability}`` over ``classes_``.
        """
        X = _check_sentences(X, "X")
        marg = self.marginals_array(X, average, client=client, n_partitions=n_partitions)
        keep = [i for i, s in enumerate(X) if len(s)]
        return self._marginal_dicts(marg, X, keep)

    def _marginal_dicts(self, marg: np.ndarray, X: list, keep: list[int]
                        ) -> list[list[dict[str, float]]]:
        rows = [dict(zip(self.classes_, map(float, r), strict=True)) for r in marg]
        return self._split(rows, X, keep)

    def _tag(self, X: Sentences, marginals: bool, average: bool = True
             ) -> tuple[list[list[str]], list[list[dict[str, float]]] | None]:
        """:meth:`predict` and (with ``marginals``) :meth:`predict_marginals` of ``X`` from one
        vectorisation of it (``pymc-crf tag``)."""
        self._check_fitted()
        X = _check_sentences(X, "X")
        if not any(len(s) for s in X):
            return [[] for _ in X], ([[] for _ in X] if marginals else None)
        data, keep = self._data(X)
        pred = self._viterbi(data, X, keep)
        if not marginals:
            return pred, None
        return pred, self._marginal_dicts(self._marginals(data, average, None, None), X, keep)

    def predict_single(self, xseq: Sequence[Mapping[str, Any]]) -> list[str]:
        """:meth:`predict` of one sentence.

        Parameters
        ----------
        xseq : list of dict
            One sentence: a list of token feature dicts.

        Returns
        -------
        list of str
            Its most probable tags.
        """
        return self.predict([xseq])[0]

    def predict_marginals_single(self, xseq: Sequence[Mapping[str, Any]], average: bool = True
                                 ) -> list[dict[str, float]]:
        """:meth:`predict_marginals` of one sentence.

        Parameters
        ----------
        xseq : list of dict
            One sentence: a list of token feature dicts.
        average : bool
            As :meth:`predict_marginals`.

        Returns
        -------
        list of dict
            For each token, ``{tag: probability}`` over ``classes_``.
        """
        return self.predict_marginals([xseq], average)[0]

    def score(self, X: Sentences, y: TagSequences) -> float:
        """Token accuracy of :meth:`predict` (as sklearn-crfsuite's ``CRF.score``).

        Tags of ``y`` the tagger never saw count as errors.

        Parameters
        ----------
        X : list of sentences
            Each a list of per-token feature dicts.
        y : list of tag sequences
            One list of str tags per sentence, as long as the sentence.

        Returns
        -------
        float
            The fraction of tokens whose predicted tag is the tag of ``y``.

        Raises
        ------
        ValueError
            When ``X`` and ``y`` differ in sentences or tokens, or ``y`` has no tags.
        """
        X = _check_sentences(X, "X")
        y = _check_tags(y, X, "y", "X")
        pred = self.predict(X)
        flat_true = [t for s in y for t in s]
        if not flat_true:
            raise ValueError("y has no tags to score")
        flat_pred = [t for s in pred for t in s]
        return float(np.mean([a == b for a, b in zip(flat_true, flat_pred, strict=True)]))

    # -- persistence ------------------------------------------------------------------------

    def __getstate__(self) -> dict:
        state = _without_client(dict(self.__dict__))
        state.pop("_cache", None)  # derived from result_
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._cache = {}

    def to_netcdf(self, path: str | os.PathLike[str]) -> None:
        """Save the fitted tagger as one netCDF file (needs h5netcdf or netCDF4).

        The file is the fit's ``DataTree`` (``result_``, readable by ArviZ / xarray) with the
        constructor parameters, the vectorizer's settings, the tags and ``metadata_`` as JSON in
        its root attrs; the feature names are the ``feature`` coordinate of ``W``.

        Parameters
        ----------
        path : str or path-like
            The file to write.
        """
        from pymc_crf.model.results import json_text as _json

        self._check_fitted()
        tree = self.result_.copy()
        tree.attrs["tagger_format"] = NETCDF_FORMAT
        tree.attrs["tagger_params"] = _json(self._saved_params())
        tree.attrs["tagger_classes"] = _json(self.classes_)
        tree.attrs["tagger_vectorizer"] = _json(
            {"min_freq": self.vectorizer_.min_freq, "bias": self.vectorizer_.bias,
             "feature_names": self.vectorizer_.feature_names_})
        tree.attrs["tagger_metadata"] = _json(self.metadata_)
        if hasattr(self, "dev_score_"):
            tree.attrs["tagger_dev_score"] = float(self.dev_score_)
        if hasattr(self, "c2_"):
            tree.attrs["tagger_c2"] = float(self.c2_)
        if hasattr(self, "prior_scales_"):
            tree.attrs["tagger_prior_scales"] = _json(self.prior_scales_)
        tree.to_netcdf(path)

    def _saved_params(self) -> dict:
        """The constructor parameters as saved (:func:`_without_client`)."""
        return _without_client(self.get_params(deep=False))

    @classmethod
    def from_netcdf(cls, path: str | os.PathLike[str]) -> CRFTagger:
        """A tagger saved by :meth:`to_netcdf` (read whole into memory).

        Parameters
        ----------
        path : str or path-like
            The file :meth:`to_netcdf` wrote.

        Returns
        -------
        CRFTagger
            The fitted tagger.

        Raises
        ------
        ValueError
            When the file is not a tagger saved by :meth:`to_netcdf`.
        """
        import xarray as xr

        with xr.open_datatree(path) as tree:
            tree = tree.load()
        attrs = dict(tree.attrs)
        if attrs.get("tagger_format") != NETCDF_FORMAT:
            raise ValueError(f"{path} is not a CRFTagger saved by CRFTagger.to_netcdf (no "
                             f"tagger_format = {NETCDF_FORMAT!r} attr)")
        params = json.loads(attrs.pop("tagger_params"))
        tagger = cls(**params)
        vec_info = json.loads(attrs.pop("tagger_vectorizer"))
        vec = FeatureVectorizer(min_freq=vec_info["min_freq"], bias=vec_info["bias"])
        tagger.vectorizer_ = vec._with_columns(vec_info["feature_names"])  # and the templates
        tagger.classes_ = list(json.loads(attrs.pop("tagger_classes")))
        tagger.metadata_ = json.loads(attrs.pop("tagger_metadata"))
        if "tagger_dev_score" in attrs:
            tagger.dev_score_ = float(attrs.pop("tagger_dev_score"))
        if "tagger_c2" in attrs:
            tagger.c2_ = float(attrs.pop("tagger_c2"))
        if "tagger_prior_scales" in attrs:
            tagger.prior_scales_ = json.loads(attrs.pop("tagger_prior_scales"))
        attrs.pop("tagger_format")
        tree.attrs = attrs
        tagger.result_ = tree
        tagger._cache = {}
        return tagger

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.dict = True
        tags.input_tags.sparse = False
        tags.target_tags.required = True
        tags.target_tags.one_d_labels = False
        tags.non_deterministic = False
        return tags
