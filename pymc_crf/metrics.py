"""Scores of labellings: chunk F1 (conlleval) and the calibration of predicted marginals.

* :func:`bio_chunks` / :func:`chunk_f1`: chunk-level precision, recall and F1 of BIO tag
  sequences with the rules of the CoNLL-2000 ``conlleval`` script (Tjong Kim Sang & Buchholz 2000):
  a chunk is a maximal run ``B-X I-X ... I-X``; an ``I-X`` after ``O`` or after a tag of another type
  starts a new chunk of type ``X``; a predicted chunk is correct only when its type, first and last
  token all equal a gold chunk's.
* :func:`reliability_curve` / :func:`expected_calibration_error`: how well the confidence of a
  prediction (the largest marginal) matches its accuracy, over equal-width confidence bins
  ``((m - 1) / M, m / M]`` (Guo et al. 2017, sec. 2; a confidence of exactly 0 goes to the first
  bin), and their ECE: the bin-size-weighted mean of ``|accuracy - confidence|``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from pymc_crf.validation import whole_number

__all__ = ["ChunkScore", "Reliability", "bio_chunks", "chunk_f1", "expected_calibration_error",
           "reliability_curve"]


def _split(tag: str) -> tuple[str, str]:
    """``("B", "NP")`` from ``"B-NP"``; ``("O", "")`` for ``"O"``."""
    if tag == "O":
        return "O", ""
    prefix, _, kind = tag.partition("-")
    if prefix not in ("B", "I") or not kind:
        raise ValueError(f"tag {tag!r} is not BIO (O, B-TYPE or I-TYPE)")
    return prefix, kind


def bio_chunks(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """Chunks ``(type, first, last)`` (inclusive token positions) of one BIO tag sequence."""
    chunks = set()
    start, kind = None, ""
    for i, tag in enumerate([*tags, "O"]):  # a final O closes the last chunk
        prefix, k = _split(tag)
        begins = prefix == "B" or (prefix == "I" and (start is None or k != kind))
        if start is not None and (prefix != "I" or begins):
            chunks.add((kind, start, i - 1))
            start = None
        if begins:
            start, kind = i, k
    return chunks


@dataclass(frozen=True)
class ChunkScore:
    """Chunk counts and scores (precision, recall and F1 in percent, as conlleval prints them)."""

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


def chunk_f1(gold: Iterable[Sequence[str]], predicted: Iterable[Sequence[str]]) -> ChunkScore:
    """Chunk precision / recall / F1 over sentences of gold and predicted BIO tags."""
    gold, predicted = list(gold), list(predicted)
    if len(gold) != len(predicted):
        raise ValueError(f"chunk_f1: {len(gold)} gold sentences but {len(predicted)} predicted")
    n_gold = n_pred = n_correct = 0
    for s, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        if len(g) != len(p):
            raise ValueError(f"sentence {s}: {len(g)} gold tags but {len(p)} predicted")
        cg, cp = bio_chunks(g), bio_chunks(p)
        n_gold += len(cg)
        n_pred += len(cp)
        n_correct += len(cg & cp)
    return ChunkScore(n_gold, n_pred, n_correct)


@dataclass(frozen=True)
class Reliability:
    """Per-bin mean confidence, accuracy and count of a reliability curve (empty bins: NaN, 0)."""

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


def reliability_curve(marginals: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> Reliability:
    """Reliability curve of (N, K) predicted marginals against true labels (N,) in 0..K-1:
    predictions are the argmax, their confidence the largest marginal, binned into ``n_bins``
    equal bins ``(a, b]`` of [0, 1] (module docstring). Drop unlabelled positions (the package's
    missing label -1) before calling."""
    n_bins = whole_number(n_bins, "n_bins")
    marginals = np.asarray(marginals, dtype=np.float64)
    labels = np.asarray(labels)
    if marginals.ndim != 2 or labels.shape != (marginals.shape[0],):
        raise ValueError(f"marginals must be (N, K) and labels (N,); got {marginals.shape} and "
                         f"{labels.shape}")
    if marginals.shape[0] == 0:
        raise ValueError("reliability_curve: no predictions (N = 0)")
    if not np.isfinite(marginals).all():
        raise ValueError("reliability_curve: marginals contain NaN or inf")
    K = marginals.shape[1]
    if not (np.issubdtype(labels.dtype, np.integer) and labels.min() >= 0 and labels.max() < K):
        raise ValueError(f"reliability_curve: labels must be integers in 0..{K - 1}; got values "
                         f"from {labels.min()} to {labels.max()} (drop missing labels, -1, "
                         "first)")
    conf = marginals.max(axis=1)
    correct = (marginals.argmax(axis=1) == labels).astype(np.float64)
    # edges m / M by one division each, so a confidence equal to m / M (a vote fraction k / S,
    # say) meets its edge exactly; np.linspace's edges can be one rounding step off it
    edges = np.arange(n_bins + 1) / n_bins
    b = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, n_bins - 1)
    count = np.bincount(b, minlength=n_bins).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.bincount(b, conf, minlength=n_bins) / count
        acc = np.bincount(b, correct, minlength=n_bins) / count
    return Reliability(edges, mean_conf, acc, count)


def expected_calibration_error(marginals: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> float:
    """ECE of (N, K) marginals against labels (N,) over ``n_bins`` equal confidence bins."""
    return reliability_curve(marginals, labels, n_bins).ece
