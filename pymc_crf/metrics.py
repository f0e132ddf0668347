"""Scores of labellings: chunk F1 (conlleval) and the calibration of predicted marginals.

* :func:`bio_chunks` / :func:`chunk_f1`: chunk-level precision, recall and F1 of BIO tag
  sequences with the rules of the CoNLL-2000 ``conlleval`` script (Tjong Kim Sang & Buchholz 2000):
  a chunk is a maximal run ``B-X I-X ... I-X``; an ``I-X`` after ``O`` or after a tag of another type
  starts a new chunk of type ``X``; a predicted chunk is correct only when its type, first and last
  token all equal a gold chunk's. BIOES tags (also ``E-X``, ``S-X``) are read by the same rule
  (:class:`pymc_crf.inference.spans.ChunkScheme`, which span probabilities use): an ``E-X``
  continues a ``B-X`` or ``I-X`` and ends its chunk, an ``S-X`` is a chunk of one token; as in
  conlleval, an ``I-X`` or ``E-X`` that continues nothing opens a chunk.
* :func:`reliability_curve` / :func:`expected_calibration_error`: how well the confidence of a
  prediction (the largest marginal) matches its accuracy, over equal-width confidence bins
  ``((m - 1) / M, m / M]`` (Guo et al. 2017, sec. 2; a confidence of exactly 0 goes to the first
  bin), and their ECE: the bin-size-weighted mean of ``|accuracy - confidence|``;
  :func:`confidence_reliability` the same for any confidences of yes/no events (a predicted
  span's probability and whether the span is right).
* :func:`selective_curve`: accuracy against coverage when the predictions of lowest confidence are
  abstained on (selective prediction, El-Yaniv & Wiener 2010), and the area under that curve.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from pymc_crf.docstrings import fill_doc
from pymc_crf.inference.spans import _PREFIXES, ChunkScheme
from pymc_crf.validation import whole_number

__all__ = ["ChunkScore", "Reliability", "SelectiveCurve", "bio_chunks", "chunk_f1",
           "confidence_reliability", "expected_calibration_error", "reliability_curve",
           "selective_curve"]


def _check_tag(tag: str, scheme: str) -> None:
    """Raise when ``tag`` is not ``O`` or ``PREFIX-TYPE`` with a prefix of ``scheme``."""
    if not isinstance(tag, str):  # label indices (ints): named here, not by str.partition
        raise TypeError(f"tag {tag!r} is a {type(tag).__name__}; chunk tags are str (O, B-TYPE "
                        "or I-TYPE): map label indices to their tags first")
    if tag == "O":
        return
    prefix, _, kind = tag.partition("-")
    if prefix not in _PREFIXES[scheme] or not kind:
        allowed = ", ".join(f"{p}-TYPE" for p in _PREFIXES[scheme])
        raise ValueError(f"tag {tag!r} is not {scheme} (O, {allowed})")


def _scheme(scheme: str | None, *tag_lists: Iterable[str]) -> str:
    """``scheme``, checked; None: ``"BIOES"`` when a tag is ``E-X`` or ``S-X``, else ``"BIO"``
    (conlleval reads both kinds of tags)."""
    if scheme is None:
        return "BIOES" if any(isinstance(t, str) and t[:2] in ("E-", "S-")
                              for tags in tag_lists for t in tags) else "BIO"
    if scheme not in _PREFIXES:
        raise ValueError(f"scheme must be 'BIO', 'BIOES' or None; got {scheme!r}")
    return scheme


class _Chunker:
    """The chunks of tag sequences over one tag set, by :class:`ChunkScheme`'s rule (one
    reading of chunks for span probabilities and for chunk scores)."""

    def __init__(self, tags: Iterable[str], scheme: str):
        tags = list(tags)
        for t in tags:
            _check_tag(t, scheme)
        # ChunkScheme needs two distinct tags: "B-_" pads a set of only "O"
        names = list(dict.fromkeys(["O", *tags, "B-_"]))
        self.index = {t: k for k, t in enumerate(names)}
        self.scheme = ChunkScheme(names, scheme)

    def chunks(self, tags: Sequence[str]) -> set[tuple[str, int, int]]:
        labels = np.fromiter((self.index[t] for t in tags), np.int64, len(tags))
        types = self.scheme.types
        return {(types[k], a, b) for k, a, b in self.scheme.chunks(labels)}


def bio_chunks(tags: Sequence[str], scheme: str | None = "BIO") -> set[tuple[str, int, int]]:
    """Chunks ``(type, first, last)`` (inclusive token positions) of one BIO or BIOES tag sequence.

    Parameters
    ----------
    tags : sequence of str
        The tags of one sentence, each ``O``, ``B-TYPE`` or ``I-TYPE`` (conlleval's chunk rules,
        module docstring), or also ``E-TYPE`` and ``S-TYPE`` with ``scheme="BIOES"``.
    scheme : {"BIO", "BIOES"} or None, default "BIO"
        The tag scheme; None reads the tags as BIOES when one of them is ``E-TYPE`` or
        ``S-TYPE``, else as BIO.

    Returns
    -------
    set of tuple (str, int, int)
        The chunks ``(type, first, last)``, with inclusive token positions.

    Raises
    ------
    ValueError
        When a tag is not of the scheme (BIO: ``O``, ``B-TYPE`` or ``I-TYPE``), ``scheme`` is
        not one of the above, or ``tags`` is one str.
    TypeError
        When a tag is not a str (label indices: map them to their tags first).
    """
    if isinstance(tags, str):  # a str is a sequence of str: its characters would be read as tags
        raise ValueError(f"bio_chunks takes a sequence of tags, not one str ({tags!r}): pass "
                         "[tag, ...] (tags.split() for space-separated tags)")
    tags = list(tags)
    return _Chunker(tags, _scheme(scheme, tags)).chunks(tags)


@dataclass(frozen=True)
class ChunkScore:
    """Chunk counts and scores (precision, recall and F1 in percent, as conlleval prints them).

    Attributes
    ----------
    n_gold : int
        Number of gold chunks.
    n_pred : int
        Number of predicted chunks.
    n_correct : int
        Number of predicted chunks that equal a gold chunk (type, first and last token).
    """

    n_gold: int
    n_pred: int
    n_correct: int

    @property
    def precision(self) -> float:
        return 100.0 * self.n_correct / self.n_pred if self.n_pred else 0.0

    @property
    def recall(self) -> float:
        return 100.0 * self.n_correct / self.n_gold if self.n_gold else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def chunk_f1(gold: Iterable[Sequence[str]], predicted: Iterable[Sequence[str]],
             scheme: str | None = None) -> ChunkScore:
    """Chunk precision / recall / F1 over sentences of gold and predicted BIO or BIOES tags.

    Parameters
    ----------
    gold : iterable of sequence of str
        The gold tags, one sequence per sentence (for one sentence pass ``[tags]``).
    predicted : iterable of sequence of str
        The predicted tags, one sequence per sentence, in the order of ``gold``.
    scheme : {"BIO", "BIOES"} or None, default None
        The tag scheme (:func:`bio_chunks`); None: BIOES when a gold or predicted tag is
        ``E-TYPE`` or ``S-TYPE`` (as conlleval scores both kinds of tags), else BIO.

    Returns
    -------
    ChunkScore
        The chunk counts summed over the sentences, and their precision, recall and F1.

    Raises
    ------
    ValueError
        When ``gold`` or ``predicted`` is a list of str (one sentence's tags rather than a list
        of sentences), when they hold different numbers of sentences or a sentence has different
        numbers of gold and predicted tags, when a tag is not of the scheme, or when
        ``scheme`` is not one of the above.
    TypeError
        When a tag is not a str (label indices: map them to their tags first).
    """
    gold, predicted = list(gold), list(predicted)
    for name, seqs in (("gold", gold), ("predicted", predicted)):
        if seqs and isinstance(seqs[0], str):  # one sentence: its tags would be read as words
            raise ValueError(f"chunk_f1: {name} must be a list of sentences, each a list of "
                             f"tags; got a list of str ({seqs[0]!r} ...): for one sentence "
                             "pass [tags]")
    if len(gold) != len(predicted):
        raise ValueError(f"chunk_f1: {len(gold)} gold sentences but {len(predicted)} predicted")
    gold = [g if isinstance(g, list) else list(g) for g in gold]
    predicted = [p if isinstance(p, list) else list(p) for p in predicted]
    every = {t for seqs in (gold, predicted) for tags in seqs for t in tags}
    chunker = _Chunker(sorted(every, key=str), _scheme(scheme, every))
    n_gold = n_pred = n_correct = 0
    for s, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        if len(g) != len(p):
            raise ValueError(f"sentence {s}: {len(g)} gold tags but {len(p)} predicted")
        cg, cp = chunker.chunks(g), chunker.chunks(p)
        n_gold += len(cg)
        n_pred += len(cp)
        n_correct += len(cg & cp)
    return ChunkScore(n_gold, n_pred, n_correct)


@dataclass(frozen=True)
class Reliability:
    """Per-bin mean confidence, accuracy and count of a reliability curve (empty bins: NaN, 0).

    Attributes
    ----------
    edges : ndarray (M + 1,)
        The bin edges ``m / M`` of [0, 1].
    confidence : ndarray (M,)
        Mean confidence of each bin (NaN for an empty bin).
    accuracy : ndarray (M,)
        Accuracy of each bin (NaN for an empty bin).
    count : ndarray (M,) int
        Number of predictions in each bin.
    """

    edges: np.ndarray
    confidence: np.ndarray
    accuracy: np.ndarray
    count: np.ndarray

    @property
    def ece(self) -> float:
        """Expected calibration error: sum over bins of ``count / n * |accuracy - confidence|``."""
        used = self.count > 0
        return float(np.sum(self.count[used] * np.abs(self.accuracy[used]
                                                      - self.confidence[used]))
                     / self.count.sum())


#: how far probabilities may stray from [0, 1] (entries) or from 1 (row sums) by rounding, before
#: they are clipped: marginals of log-potentials in the thousands come out of exp(a + b - log Z)
#: up to ~1e-8 above 1
ROUNDING = 1e-6

# what the reliability functions take and return, worded once (``fill_doc``)
_RELIABILITY_DOCS = {
    "n_bins": """
        n_bins : int, default 10
            Number of equal-width confidence bins (an integer >= 1).""",
    "reliability_returns": """
        Returns
        -------
        Reliability
            Per-bin mean confidence, accuracy and count; its ``ece`` is the expected calibration
            error.""",
}
_reliability_doc = fill_doc(_RELIABILITY_DOCS)


def as_array(values, name: str, what: str, dtype=None, missing=None) -> np.ndarray:
    """``np.asarray(values, dtype)``, or an error naming ``what`` and ``name``.

    A masked array's masked entries are not dropped by ``np.asarray``, which reads the values
    under the mask: they become ``missing`` (the missing-label marker, where the caller has
    one), or are refused. Ragged input (per-sentence arrays of different lengths) and entries
    that are not numbers are refused with the reason rather than numpy's message, which names
    neither the function nor the argument.
    """
    if np.ma.isMaskedArray(values):
        mask = np.ma.getmaskarray(values)
        if mask.any():
            if missing is None:
                raise ValueError(f"{what}: {name} is a masked array with {int(mask.sum())} "
                                 "masked entries, whose hidden values would be read: drop "
                                 "those positions first")
            if values.dtype.kind == "u":  # an unsigned array cannot hold the marker -1
                values = values.astype(np.int64)
            values = values.filled(missing)
        else:
            values = values.data
    try:
        return np.asarray(values, dtype=dtype)
    except (ValueError, TypeError) as err:
        raise type(err)(f"{what}: {name} must be one array of numbers ({err}); per-sentence "
                        "arrays of different lengths are joined with np.concatenate") from err


def checked_marginals(marginals, labels, what: str, missing_ok: bool = False
                      ) -> tuple[np.ndarray, np.ndarray]:
    """``(marginals, labels)`` as (N, K) float and (N,) int arrays, or a ValueError naming the
    problem: the rows must be probability vectors (entries in [0, 1] summing to 1: scores or
    log-probabilities would give an ECE above 1 or a wrong log loss), the labels integers in
    0..K-1 (-1, missing, as well with ``missing_ok``)."""
    marginals = as_array(marginals, "marginals", what, np.float64)
    labels = as_array(labels, "labels", what, missing=-1 if missing_ok else None)
    if marginals.ndim != 2 or labels.shape != (marginals.shape[0],):
        raise ValueError(f"{what}: marginals must be (N, K) and labels (N,); got "
                         f"{marginals.shape} and {labels.shape}")
    if marginals.shape[0] == 0:
        raise ValueError(f"{what}: no predictions (N = 0)")
    if not np.isfinite(marginals).all():
        raise ValueError(f"{what}: marginals contain NaN or inf")
    off = (np.abs(marginals.sum(axis=1) - 1.0) > ROUNDING) \
        | (marginals < -ROUNDING).any(axis=1) | (marginals > 1.0 + ROUNDING).any(axis=1)
    if off.any():
        row = int(np.flatnonzero(off)[0])
        raise ValueError(f"{what}: each row of marginals must be probabilities summing to 1; "
                         f"row {row} is {np.array2string(marginals[row], precision=4)} (sum "
                         f"{marginals[row].sum():.6g})")
    K = marginals.shape[1]
    low = -1 if missing_ok else 0
    if not (np.issubdtype(labels.dtype, np.integer) and labels.min() >= low
            and labels.max() < K):
        raise ValueError(f"{what}: labels must be integers in 0..{K - 1}"
                         f"{' (-1: missing)' if missing_ok else ''}; got "
                         + (f"dtype {labels.dtype}" if not np.issubdtype(labels.dtype, np.integer)
                            else f"values from {labels.min()} to {labels.max()}")
                         + ("" if missing_ok else " (drop missing labels, -1, first)"))
    if missing_ok and (labels < 0).all():
        raise ValueError(f"{what}: every label is missing (-1)")
    return np.clip(marginals, 0.0, 1.0), labels


@_reliability_doc
def reliability_curve(marginals: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> Reliability:
    """Reliability curve of (N, K) predicted marginals against true labels (N,) in 0..K-1.

    Predictions are the argmax, their confidence the largest marginal, binned into ``n_bins``
    equal bins ``(a, b]`` of [0, 1] (module docstring). Drop unlabelled positions (the package's
    missing label -1) before calling.

    Parameters
    ----------
    marginals : ndarray (N, K)
        Predicted marginals: each row probabilities summing to 1 (entries are clipped to [0, 1]
        after a rounding tolerance of ``ROUNDING``).
    labels : ndarray (N,) int
        True labels in 0..K-1.
    %(n_bins)s

    %(reliability_returns)s

    Raises
    ------
    ValueError
        When ``n_bins`` is not an integer >= 1, the shapes are not (N, K) and (N,) (ragged
        per-sentence arrays included), N is 0, the marginals hold NaN or inf or a row that is
        not probabilities summing to 1, a label is not an integer in 0..K-1 (a missing label,
        -1, included), or an input is a masked array with masked entries.
    """
    n_bins = whole_number(n_bins, "n_bins")
    marginals, labels = checked_marginals(marginals, labels, "reliability_curve")
    conf = marginals.max(axis=1)
    correct = (marginals.argmax(axis=1) == labels).astype(np.float64)
    return _binned(conf, correct, n_bins)


def _binned(conf: np.ndarray, correct: np.ndarray, n_bins: int) -> Reliability:
    """The reliability curve of confidences in [0, 1] and 0/1 outcomes (checked inputs)."""
    # edges m / M by one division each, so a confidence equal to m / M (a vote fraction k / S,
    # say) meets its edge exactly; np.linspace's edges can be one rounding step off it
    edges = np.arange(n_bins + 1) / n_bins
    b = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, n_bins - 1)
    count = np.bincount(b, minlength=n_bins).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.bincount(b, conf, minlength=n_bins) / count
        acc = np.bincount(b, correct, minlength=n_bins) / count
    return Reliability(edges, mean_conf, acc, count)


@_reliability_doc
def expected_calibration_error(marginals: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> float:
    """ECE of (N, K) marginals against labels (N,) over ``n_bins`` equal confidence bins.

    Parameters
    ----------
    marginals : ndarray (N, K)
        Predicted marginals, each row probabilities summing to 1.
    labels : ndarray (N,) int
        True labels in 0..K-1 (drop missing labels, -1, first).
    %(n_bins)s

    Returns
    -------
    float
        ``reliability_curve(marginals, labels, n_bins).ece``.

    Raises
    ------
    ValueError
        As :func:`reliability_curve`.
    """
    return reliability_curve(marginals, labels, n_bins).ece


def _confidence_outcome(confidence, correct, what: str) -> tuple[np.ndarray, np.ndarray]:
    conf = as_array(confidence, "confidence", what, np.float64)
    ok = as_array(correct, "correct", what)
    if conf.ndim != 1 or ok.shape != conf.shape:
        raise ValueError(f"{what}: confidence and correct must be 1-d arrays of one length; got "
                         f"{conf.shape} and {ok.shape}")
    if conf.size == 0:
        raise ValueError(f"{what}: no predictions (confidence is empty)")
    if not (np.isfinite(conf).all() and conf.min() >= -ROUNDING
            and conf.max() <= 1.0 + ROUNDING):
        raise ValueError(f"{what}: confidence must be probabilities in [0, 1]")
    if not (ok.dtype == bool or np.isin(ok, (0, 1)).all()):
        raise ValueError(f"{what}: correct must be booleans (or 0 / 1)")
    return np.clip(conf, 0.0, 1.0), ok.astype(np.float64)


@_reliability_doc
def confidence_reliability(confidence: np.ndarray, correct: np.ndarray,
                           n_bins: int = 10) -> Reliability:
    """Reliability curve of confidences (n,) in [0, 1] against outcomes ``correct`` (n,) bool.

    The bins and ECE of :func:`reliability_curve`, for predictions that are yes/no events with a
    probability (a predicted span and its span probability).

    Parameters
    ----------
    confidence : ndarray (n,)
        Probability of each event, in [0, 1].
    correct : ndarray (n,) bool
        Whether each event happened (booleans, or 0 / 1).
    %(n_bins)s

    %(reliability_returns)s

    Raises
    ------
    ValueError
        When ``n_bins`` is not an integer >= 1, ``confidence`` and ``correct`` are not 1-d arrays
        of one length (ragged per-sentence arrays included), they are empty, a confidence is not
        a probability in [0, 1], ``correct`` is not booleans (or 0 / 1), or an input is a masked
        array with masked entries.
    """
    n_bins = whole_number(n_bins, "n_bins")
    conf, ok = _confidence_outcome(confidence, correct, "confidence_reliability")
    return _binned(conf, ok, n_bins)


@dataclass(frozen=True)
class SelectiveCurve:
    """Accuracy against coverage of selective prediction.

    ``coverage[m]`` is the fraction of predictions kept when every prediction of confidence at
    least ``threshold[m]`` is kept, ``accuracy[m]`` the accuracy of those kept (one point per
    distinct confidence, most confident first; the last point keeps everything); ``area`` the area
    under the accuracy-coverage step curve, ``sum_m (coverage[m] - coverage[m - 1]) accuracy[m]``:
    with distinct confidences, the mean over ``c = 1..n`` of the accuracy of the ``c`` most
    confident predictions (1 - the AURC of Geifman et al. 2019 with the 0/1 loss).

    Attributes
    ----------
    coverage : ndarray (P,)
        Fraction of predictions kept at each point (increasing; the last is 1).
    accuracy : ndarray (P,)
        Accuracy of the predictions kept at each point.
    threshold : ndarray (P,)
        The confidence at or above which predictions are kept at each point.
    area : float
        Area under the accuracy-coverage step curve.
    """

    coverage: np.ndarray
    accuracy: np.ndarray
    threshold: np.ndarray
    area: float

    def accuracy_at(self, coverage: float) -> float:
        """Accuracy at the smallest curve point whose coverage is at least ``coverage``.

        Parameters
        ----------
        coverage : float
            The fraction of predictions kept, in (0, 1].

        Returns
        -------
        float
            The accuracy of that curve point.

        Raises
        ------
        ValueError
            When ``coverage`` is not in (0, 1].
        """
        if not 0.0 < coverage <= 1.0:
            raise ValueError(f"coverage must be in (0, 1]; got {coverage}")
        return float(self.accuracy[np.searchsorted(self.coverage, coverage - 1e-12)])


def selective_curve(confidence: np.ndarray, correct: np.ndarray) -> SelectiveCurve:
    """Accuracy against coverage when abstaining on the least confident predictions.

    Parameters
    ----------
    confidence : ndarray (n,)
        Confidence of each prediction in [0, 1]: the largest marginal of a token, the
        probability of a predicted span.
    correct : ndarray (n,) bool
        Whether each prediction is right.

    Returns
    -------
    SelectiveCurve
        One point per distinct confidence (predictions of equal confidence are kept or abstained
        on together), and the area under the curve.
    """
    conf, ok = _confidence_outcome(confidence, correct, "selective_curve")
    order = np.argsort(-conf, kind="stable")
    conf, ok = conf[order], ok[order]
    last = np.flatnonzero(np.r_[conf[1:] != conf[:-1], True])  # the end of each tie group
    kept = last + 1
    coverage = kept / conf.size
    accuracy = np.cumsum(ok)[last] / kept
    area = float(np.sum(np.diff(np.r_[0.0, coverage]) * accuracy))
    return SelectiveCurve(coverage, accuracy, conf[last], area)
