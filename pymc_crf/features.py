"""Per-token feature dicts to a sparse feature matrix, the way sklearn-crfsuite users write features.

A sentence is a sequence of tokens, each token a dict of feature name -> value, as python-crfsuite
and sklearn-crfsuite take them::

    [{"word.lower()": "the", "postag": "DT", "word.istitle()": False, "len": 3}, ...]

:class:`FeatureVectorizer` maps these to a CSR matrix with one row per token (all sentences
stacked, as ``pmc.CRF`` takes node features) and one column per feature:

* a ``str`` value ``v`` of feature ``name`` is the indicator feature ``"name=v"`` (value 1);
* a ``bool`` or a number is the numeric feature ``"name"`` with that value (False and 0 are simply
  absent, as in CRFsuite);
* anything else (None, lists, dicts, non-finite numbers) is refused with an error naming the
  feature and the token.

``fit`` builds the vocabulary from training sentences, keeping features seen in at least
``min_freq`` tokens; ``transform`` applies the same columns to any sentences and ignores features
outside the vocabulary, counting them in ``n_unseen_`` (occurrences) and ``unseen_features_``
(distinct names) so the loss is visible. :func:`sequence_batch` gives the chain ``GraphBatch`` of the
sentences and :func:`encode_tags` the integer labels.
"""

from __future__ import annotations

import math
import numbers
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import NotFittedError

from pymc_crf.docstrings import fill_doc
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.validation import flag, whole_number

__all__ = ["CRFsuiteRun", "FeatureVectorizer", "crfsuite_fit_predict", "encode_tags",
           "sequence_batch"]

Sentence = Sequence[Mapping[str, Any]]

#: training-count buckets of :meth:`FeatureVectorizer.count_buckets` and their lower edges
COUNT_BUCKETS = ("1", "2-3", "4-15", "16+")
COUNT_EDGES = (2, 4, 16)


def _token_items(token: Mapping[str, Any], where: tuple[int, int]):
    """``(column name, value)`` pairs of one token dict (zeros dropped), with clear errors. A
    token given as a list of feature strings (python-crfsuite's form) has each string as a
    column of value 1."""
    if isinstance(token, list | tuple) and all(isinstance(f, str) for f in token):
        for name in token:
            yield name, 1.0
        return
    if not isinstance(token, Mapping):
        raise TypeError(f"token {where[1]} of sentence {where[0]} must be a dict of feature name "
                        f"-> value (or a list of feature strings); got {type(token).__name__}")
    for name, value in token.items():
        if isinstance(value, str):
            yield f"{name}={value}", 1.0
        elif isinstance(value, bool | np.bool_):
            if value:
                yield str(name), 1.0
        elif isinstance(value, numbers.Real):
            try:
                v = float(value)
            except OverflowError:
                v = math.inf  # an int beyond float range
            if not math.isfinite(v):
                raise ValueError(f"feature {name!r} of token {where[1]} in sentence {where[0]} is "
                                 f"{v}; numeric feature values must be finite")
            if v != 0.0:
                yield str(name), v
        else:
            raise TypeError(f"feature {name!r} of token {where[1]} in sentence {where[0]} has a "
                            f"{type(value).__name__} value {value!r}; values must be str "
                            "(an indicator name=value), bool, int or float")


def _check_user_bias(value: float, where: tuple[int, int]) -> None:
    """Refuse a user ``"bias"`` feature that would overwrite the built-in constant-1 column."""
    if value != 1.0:
        raise ValueError(f"token {where[1]} of sentence {where[0]} has its own feature 'bias' = "
                         f"{value}, which clashes with the vectorizer's built-in bias column "
                         "(constant 1): rename the feature, or use FeatureVectorizer(bias=False) "
                         "to keep it as an ordinary feature")


# what fit and transform take and refuse, and the refusals of the count groupings, worded once
# (``fill_doc``)
_VECTORIZER_DOCS = {
    "sentences": """
        sentences : iterable of sentences
            Each a sequence of tokens: dicts of feature name -> value (a str value ``v`` of
            feature ``f`` is the indicator column ``"f=v"``; bool and numbers are the column
            ``f`` with that value), or lists of feature strings, each a column of value 1, as
            python-crfsuite takes them. Read once, so a generator is fine.""",
    "user_bias": """
        ValueError
            If ``bias=True`` and a token has its own ``"bias"`` feature with a value other than 1:
            it would share column 0 with the built-in constant. A user ``"bias": 1.0`` (the
            sklearn-crfsuite tutorial's feature, and what :meth:`inverse_transform` gives back)
            is the built-in bias and is accepted.""",
    # count_buckets and template_count_groups
    "features_raises": """
        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the vectorizer is not fitted.
        ValueError
            When ``features`` has another number of columns than the vectorizer.""",
}


class FeatureVectorizer(TransformerMixin, BaseEstimator):
    """Map sentences of per-token feature dicts to a sparse (tokens, features) CSR matrix.

    Parameters
    ----------
    min_freq : int
        Keep a feature only if it occurs in at least this many training tokens.
    bias : bool
        Add a constant feature ``"bias"`` (column 0) to every token. A token's own ``"bias"``
        feature must then be 1 (it is the same column; any other value is an error); with
        ``bias=False`` it is an ordinary feature.
    templates : mapping or callable, optional
        How columns are grouped into templates (``templates_``, ``template_index_``). By default a
        column's template is the part of its name before the first ``=``: the feature name of an
        indicator column (``"word.lower()"`` for ``"word.lower()=the"``), and the whole name of
        a numeric or boolean column, which is its own template unless its name holds ``=``
        (``"x=y": 1.5`` is the column ``"x=y"``, the same one as ``{"x": "y"}``, in template
        ``"x"``); ``"bias"`` is ``"bias"``. A mapping renames feature names to template names (names it
        does not hold keep their own); a callable takes the column name and returns its template.

    Attributes
    ----------
    vocabulary_ : dict
        Feature name -> column, fixed by :meth:`fit`.
    feature_names_ : list of str
        Column names in column order.
    lengths_ : ndarray
        Number of tokens of each sentence of the last :meth:`transform`.
    n_unseen_ : int
        Occurrences of features outside the vocabulary in the last :meth:`transform` (ignored).
    unseen_features_ : set of str
        Their distinct names.
    bias_ : bool
        Whether column 0 is the built-in bias, fixed by :meth:`fit`.
    templates_ : list of str
        Template names in order of their first column, fixed by :meth:`fit`.
    template_index_ : ndarray of int
        The template of each column (an index into ``templates_``), so a prior with one learned
        scale per template is one line::

            s = pm.HalfNormal("s", 1.0, shape=len(vec.templates_))
            w = pm.Normal("w", 0.0, s[vec.template_index_][:, None], dims=("feature", "label"))

    Examples
    --------
    >>> vec = FeatureVectorizer(min_freq=1)
    >>> X = vec.fit_transform([[{"w": "a", "len": 1}, {"w": "b", "len": 1}]])
    >>> X.shape, sorted(vec.vocabulary_)
    ((2, 4), ['bias', 'len', 'w=a', 'w=b'])
    >>> vec.transform([[{"w": "c"}]]).toarray(), vec.n_unseen_
    (array([[1., 0., 0., 0.]]), 1)
    >>> vec.templates_, vec.template_index_.tolist()
    (['bias', 'len', 'w'], [0, 1, 2, 2])
    """

    def __init__(self, min_freq: int = 1, bias: bool = True,
                 templates: Mapping[str, str] | Callable[[str], str] | None = None):
        # stored as given and checked by fit, as scikit-learn estimators do (clone, set_params)
        self.min_freq = min_freq
        self.bias = bias
        self.templates = templates

    def _checked_params(self) -> tuple[int, bool]:
        """``min_freq`` and ``bias`` checked (clear errors for bad values), and ``templates``."""
        min_freq = whole_number(self.min_freq, "min_freq")
        bias = flag(self.bias, "bias")
        t = self.templates
        if t is not None and not (isinstance(t, Mapping) or callable(t)):
            raise TypeError("templates must be a mapping of feature name -> template name or a "
                            f"callable of the column name; got {type(t).__name__}")
        return min_freq, bias

    def _template(self, column: str) -> str:
        """The template (group) name of a column (class docstring, ``templates``)."""
        if callable(self.templates) and not isinstance(self.templates, Mapping):
            out = self.templates(column)
            if not isinstance(out, str):
                raise TypeError(f"templates({column!r}) must return a str template name; got "
                                f"{type(out).__name__}")
            return out
        name = column.split("=", 1)[0]
        return name if self.templates is None else str(self.templates.get(name, name))

    def _items(self, token: Mapping[str, Any], where: tuple[int, int], bias: bool):
        """The token's ``(name, value)`` features. With the built-in bias on, a user ``"bias"``
        (which must be 1) is that same column 0 and is left out here; with it off, ``"bias"`` is
        an ordinary feature."""
        for name, value in _token_items(token, where):
            if bias and name == "bias":
                _check_user_bias(value, where)
                continue
            yield name, value

    @fill_doc(_VECTORIZER_DOCS)
    def fit(self, sentences: Iterable[Sentence], y: Any = None) -> FeatureVectorizer:
        """Build the vocabulary from training sentences.

        Parameters
        ----------
        %(sentences)s
        y : ignored
            Accepted so that the vectorizer is a scikit-learn transformer (a ``Pipeline`` step).

        Returns
        -------
        FeatureVectorizer
            ``self``, fitted.

        Raises
        ------
        %(user_bias)s
        """
        return self.fit_counts(self.feature_counts(sentences))

    @fill_doc(_VECTORIZER_DOCS)
    def feature_counts(self, sentences: Iterable[Sentence]) -> Counter[str]:
        """The number of tokens of ``sentences`` in which each feature name occurs.

        What :meth:`fit` keeps by ``min_freq``; counts of parts of a corpus add up to the whole's
        (the Dask workers count their shards, :func:`pymc_crf.distributed.conll_vocabulary`).

        Parameters
        ----------
        %(sentences)s

        Returns
        -------
        collections.Counter of str
            Feature name -> number of tokens it occurs in (the built-in bias left out).

        Raises
        ------
        %(user_bias)s
        """
        bias = self._checked_params()[1]
        counts: Counter[str] = Counter()
        for s, sentence in enumerate(sentences):
            for t, token in enumerate(sentence):
                counts.update({name for name, _ in self._items(token, (s, t), bias)})
        return counts

    def fit_counts(self, counts: Mapping[str, int]) -> FeatureVectorizer:
        """Fix the vocabulary from feature counts.

        The columns are the names occurring in at least ``min_freq`` tokens, sorted, after the
        bias column.

        Parameters
        ----------
        counts : mapping of str to int
            Feature name -> number of tokens (:meth:`feature_counts`, possibly summed over parts
            of the corpus).

        Returns
        -------
        FeatureVectorizer
            ``self``, fitted.
        """
        min_freq, bias = self._checked_params()
        names = sorted(n for n, c in counts.items() if c >= min_freq)
        return self._with_columns(["bias", *names] if bias else names)

    def _with_columns(self, names: list[str]) -> FeatureVectorizer:
        """Fix the columns to ``names`` (in order) and their templates: what :meth:`fit` learns,
        and what a vectorizer restored from its column names (``CRFTagger.from_netcdf``) gets."""
        self.bias_ = self._checked_params()[1]
        self.feature_names_ = list(names)
        self.vocabulary_ = {n: i for i, n in enumerate(self.feature_names_)}
        order: dict[str, int] = {}
        index = [order.setdefault(self._template(n), len(order)) for n in self.feature_names_]
        self.templates_ = list(order)
        self.template_index_ = np.asarray(index, dtype=np.int64)
        return self

    @fill_doc(_VECTORIZER_DOCS)
    def count_buckets(self, features: scipy.sparse.spmatrix | np.ndarray) -> np.ndarray:
        """The bucket of each column by how many rows of ``features`` it is non-zero in.

        Parameters
        ----------
        features : scipy.sparse matrix or ndarray (tokens, features)
            The training matrix, in this vectorizer's columns.

        Returns
        -------
        ndarray (features,) int
            An index into :data:`COUNT_BUCKETS` (1, 2-3, 4-15, 16 or more; a column that is
            never non-zero there falls in the first) per column.

        %(features_raises)s
        """
        self._check_fitted()
        X = scipy.sparse.csr_matrix(features)
        if X.shape[1] != len(self.feature_names_):
            raise ValueError(f"features has {X.shape[1]} columns; this vectorizer has "
                             f"{len(self.feature_names_)}")
        count = np.asarray((X != 0).sum(axis=0)).ravel()
        return np.digitize(count, COUNT_EDGES)

    @fill_doc(_VECTORIZER_DOCS)
    def template_count_groups(self, features: scipy.sparse.spmatrix | np.ndarray) -> list[str]:
        """Each column's group, its template crossed with its training-count bucket.

        The grouping of ``CRFTagger(c2="learned")``'s prior scales. Features of one template
        seen once and features of it seen hundreds of times need different prior scales (a rare
        feature's weight is pinned by its prior, a frequent one's by the data).

        Parameters
        ----------
        features : scipy.sparse matrix or ndarray (tokens, features)
            The training matrix, in this vectorizer's columns (:meth:`count_buckets`).

        Returns
        -------
        list of str
            One group name per column, ``"template (count 2-3)"``.

        %(features_raises)s
        """
        bucket = self.count_buckets(features)
        return [f"{self.templates_[t]} (count {COUNT_BUCKETS[b]})"
                for t, b in zip(self.template_index_, bucket, strict=True)]

    def _check_fitted(self) -> None:
        if not hasattr(self, "vocabulary_"):
            raise NotFittedError("FeatureVectorizer is not fitted: call fit(training_sentences) "
                                 "first")

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """The column names (``feature_names_``) as an array, as scikit-learn transformers give them.

        Parameters
        ----------
        input_features : ignored
            Accepted as scikit-learn's transformers take it.

        Returns
        -------
        ndarray of object
            The column names in column order.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the vectorizer is not fitted.
        """
        self._check_fitted()
        return np.asarray(self.feature_names_, dtype=object)

    @fill_doc(_VECTORIZER_DOCS)
    def transform(self, sentences: Iterable[Sentence]) -> scipy.sparse.csr_matrix:
        """The (tokens, features) CSR matrix of ``sentences`` with the fitted columns.

        Features outside the vocabulary are ignored and counted (``n_unseen_``,
        ``unseen_features_``).

        Parameters
        ----------
        %(sentences)s

        Returns
        -------
        scipy.sparse.csr_matrix
            One row per token (all sentences stacked), one column per fitted feature.

        Raises
        ------
        ValueError
            If the vectorizer is not fitted.
        %(user_bias)s
        """
        self._check_fitted()
        vocab = self.vocabulary_
        # the bias fixed by fit; a vectorizer unpickled without bias_ uses its parameter
        bias = self.bias_ if hasattr(self, "bias_") else flag(self.bias, "bias")
        indptr, indices, data, lengths = [0], [], [], []
        unseen: Counter[str] = Counter()
        for s, sentence in enumerate(sentences):
            n = 0
            for t, token in enumerate(sentence):
                row: dict[int, float] = {}
                if bias:
                    row[0] = 1.0
                for name, value in self._items(token, (s, t), bias):
                    j = vocab.get(name)
                    if j is None:
                        unseen[name] += 1
                    else:  # names that coincide add up, as in scikit-learn's DictVectorizer
                        row[j] = row.get(j, 0.0) + value
                indices.extend(row)
                data.extend(row.values())
                indptr.append(len(indices))
                n += 1
            lengths.append(n)
        X = scipy.sparse.csr_matrix(
            (np.asarray(data, dtype=np.float64), np.asarray(indices, dtype=np.int64),
             np.asarray(indptr, dtype=np.int64)), shape=(len(indptr) - 1, len(vocab)))
        X.sort_indices()
        self.lengths_ = np.asarray(lengths, dtype=np.int64)
        self.n_unseen_ = int(sum(unseen.values()))
        self.unseen_features_ = set(unseen)
        return X

    def inverse_transform(self, X: scipy.sparse.spmatrix | np.ndarray) -> list[dict[str, float]]:
        """One ``{feature name: value}`` dict per row of a matrix in this vectorizer's columns.

        The kept features only, e.g. to give another CRF toolkit exactly the same features.

        Parameters
        ----------
        X : scipy.sparse matrix or ndarray (tokens, features)
            A matrix in this vectorizer's columns (duplicate sparse entries are summed).

        Returns
        -------
        list of dict of str to float
            One dict per row, of its stored entries.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the vectorizer is not fitted.
        ValueError
            When ``X`` has another number of columns than the vectorizer.
        """
        self._check_fitted()
        X = scipy.sparse.csr_matrix(X, copy=True)  # duplicate entries are summed in place below
        names = self.feature_names_
        # a narrower matrix would name its columns after the first ones of the vocabulary, and
        # a wider one fail on a list index
        if X.shape[1] != len(names):
            raise ValueError(f"X has {X.shape[1]} columns; this vectorizer has {len(names)}")
        X.sum_duplicates()
        return [{names[j]: float(v) for j, v in zip(X.indices[X.indptr[i]:X.indptr[i + 1]],
                                                     X.data[X.indptr[i]:X.indptr[i + 1]],
                                                     strict=True)}
                for i in range(X.shape[0])]

    def fit_transform(self, sentences: Iterable[Sentence], y: Any = None
                      ) -> scipy.sparse.csr_matrix:
        """:meth:`fit` then :meth:`transform` on the same sentences.

        Parameters
        ----------
        sentences : iterable of sentences
            Each a sequence of token dicts; a generator is fine (it is read into a list once).
        y : ignored

        Returns
        -------
        scipy.sparse.csr_matrix
            The training sentences' (tokens, features) matrix.
        """
        # fit and transform each read the sentences once: a one-shot iterator (a generator) would
        # be used up by fit and transform would silently give a (0, F) matrix
        if not isinstance(sentences, Sequence):
            sentences = list(sentences)
        return self.fit(sentences).transform(sentences)


def sequence_batch(lengths: Iterable[int] | Sequence[Sentence]) -> GraphBatch:
    """The chain ``GraphBatch`` of sentences (or of their lengths), one chain per sentence.

    Every sentence needs at least one token (drop empty ones first).

    Parameters
    ----------
    lengths : iterable of int, or sequence of sentences
        The number of tokens of each sentence, or the sentences themselves (their ``len`` is
        taken).

    Returns
    -------
    GraphBatch
        One chain per sentence, of its length.

    Raises
    ------
    ValueError
        When a sentence has no tokens.
    """
    lengths = [x if isinstance(x, numbers.Integral) else len(x) for x in lengths]
    empty = [i for i, n in enumerate(lengths) if n == 0]
    if empty:
        raise ValueError(f"sentence {empty[0]} has no tokens ({len(empty)} empty sentences in "
                         "all): a chain needs at least one node; drop empty sentences (and "
                         "their tags) before building the batch")
    return GraphBatch.chains(np.asarray(lengths, dtype=np.int64))


def encode_tags(tag_sequences: Iterable[Sequence[str]],
                classes: Sequence[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """Flat integer labels (all sentences stacked) and the class names.

    A test split may hold tags that training never shows (CoNLL-2000's ``I-LST``): build
    ``classes`` from the tags of both splits, as ``examples/conll2000_chunking.py`` does, so that
    the model has a (never observed) label for them and they count as errors.

    Parameters
    ----------
    tag_sequences : iterable of sequence of str
        The tags of each sentence.
    classes : sequence of str, optional
        Fixes the label order (for test data, pass the classes the model was built with); by
        default it is the sorted set of tags seen. Its names must be distinct.

    Returns
    -------
    labels : ndarray (N,) int64
        The index in ``classes`` of every tag, sentence after sentence.
    classes : list of str
        The class names, in label order.

    Raises
    ------
    ValueError
        When a tag is outside ``classes`` (the error names it), or ``classes`` repeats a name.
    """
    classes = None if classes is None else list(classes)
    if classes is not None and len(set(classes)) != len(classes):
        dup = sorted({c for c in classes if classes.count(c) > 1})
        raise ValueError(f"classes must be distinct; {dup[:5]} appear more than once")
    seqs = [list(s) for s in tag_sequences]
    if classes is None:
        classes = sorted({t for s in seqs for t in s})
    index = {c: i for i, c in enumerate(classes)}
    flat = [t for s in seqs for t in s]
    missing = sorted({t for t in flat if t not in index})
    if missing:
        raise ValueError(f"tags {missing[:5]} are not among the {len(classes)} classes "
                         f"{list(classes)[:10]}...")
    return np.fromiter((index[t] for t in flat), dtype=np.int64, count=len(flat)), list(classes)


@dataclass(frozen=True)
class CRFsuiteRun:
    """Predicted tags of a python-crfsuite model, its training time and L-BFGS iterations.

    Attributes
    ----------
    tags : list of list of str
        Predicted tags, one list per test sentence.
    wall_time : float
        Training wall time (s).
    cpu_time : float
        Training CPU time (s).
    n_iterations : int
        L-BFGS iterations.
    """

    tags: list[list[str]]
    wall_time: float
    cpu_time: float
    n_iterations: int


def _by_sentence(rows: list, lengths: Sequence[int]) -> list[list]:
    out, i = [], 0
    for n in lengths:
        out.append(rows[i:i + int(n)])
        i += int(n)
    return out


def crfsuite_fit_predict(vectorizer: FeatureVectorizer, X: scipy.sparse.spmatrix | np.ndarray,
                         lengths: Sequence[int], tags: Sequence[Sequence[str]],
                         X_test: scipy.sparse.spmatrix | np.ndarray, test_lengths: Sequence[int],
                         *, c2: float = 1.0, all_pairs: bool = True,
                         delta: float = 1e-5) -> CRFsuiteRun:
    """Train python-crfsuite on exactly the columns of ``X`` and tag ``X_test``.

    Training is L-BFGS with L2 coefficient ``c2``: the reference a ``pmc.CRF`` MAP fit is
    compared with. CRFsuite minimises ``-log L + c2 ||w||^2``, the MAP objective of a ``pmc.CRF``
    with ``Normal(0, sigma)`` weights, ``sigma^2 = 1 / (2 c2)``, when ``all_pairs`` gives it a
    weight for every attribute x label and label x label pair (``feature.possible_states`` /
    ``possible_transitions``). Needs python-crfsuite (the bench extra).

    Parameters
    ----------
    vectorizer : FeatureVectorizer
        The fitted vectorizer whose columns ``X`` and ``X_test`` are in (its
        :meth:`~FeatureVectorizer.inverse_transform` gives CRFsuite the features).
    X : scipy.sparse matrix or ndarray (tokens, features)
        Training features, sentence after sentence.
    lengths : sequence of int
        Number of tokens of each training sentence.
    tags : sequence of sequence of str
        Training tags, one sequence per sentence.
    X_test : scipy.sparse matrix or ndarray (tokens, features)
        Test features, sentence after sentence.
    test_lengths : sequence of int
        Number of tokens of each test sentence.
    c2 : float, default 1.0
        The L2 coefficient.
    all_pairs : bool, default True
        Give CRFsuite a weight for every attribute x label and label x label pair;
        ``all_pairs=False`` is CRFsuite's default, sparser feature set.
    delta : float, default 1e-5
        CRFsuite's stopping rule (relative improvement over 10 iterations).

    Returns
    -------
    CRFsuiteRun
        The predicted test tags, training wall and CPU time and L-BFGS iterations.
    """
    import pycrfsuite

    trainer = pycrfsuite.Trainer(verbose=False)
    for xs, ts in zip(_by_sentence(vectorizer.inverse_transform(X), lengths), tags, strict=True):
        trainer.append(xs, list(ts))
    trainer.select("lbfgs")
    trainer.set_params({"c1": 0.0, "c2": float(c2), "delta": float(delta),
                        "feature.possible_states": flag(all_pairs, "all_pairs"),
                        "feature.possible_transitions": flag(all_pairs, "all_pairs")})
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.crfsuite")
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.train(path)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        tagger = pycrfsuite.Tagger()
        tagger.open(path)
        pred = [tagger.tag(xs) for xs in _by_sentence(vectorizer.inverse_transform(X_test),
                                                       test_lengths)]
        tagger.close()
    return CRFsuiteRun(pred, wall, cpu, int(trainer.logparser.last_iteration["num"]))
