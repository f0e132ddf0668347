"""Japanese Vowels: speaker identification from short utterances (Kudo, Toyama & Shimbo 1999).

Nine male speakers each uttered the vowel pair /ae/; every utterance is a series of 12 LPC
cepstrum coefficients per analysis frame (7-29 frames), and the task is to name the speaker from
the whole series: sequence classification, one class per chain, as ``pmc.HCRF`` models it. The
data (UCI Machine Learning Repository, CC BY 4.0) ship with the package (``datasets/data``).
"""

from __future__ import annotations

import gzip
from importlib import resources

import numpy as np

from pymc_crf.datasets.hmm import SequenceData
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.validation import flag

__all__ = ["japanese_vowels"]

N_FEATURES = 12
N_SPEAKERS = 9


def _read(split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sequence ids (N,), speaker 1..9 (N,), LPC features (N, 12)) of one split, frame rows."""
    path = resources.files("pymc_crf.datasets").joinpath(f"data/japanese_vowels_{split}.csv.gz")
    with path.open("rb") as raw, gzip.open(raw, "rt") as f:
        table = np.loadtxt(f, delimiter=",", skiprows=1)
    return table[:, 0].astype(np.int64), table[:, 1].astype(np.int64), table[:, 3:]


def _sequences(split: str, standardise: tuple[np.ndarray, np.ndarray] | None):
    seq, speaker, X = _read(split)
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    lengths = np.diff(np.r_[starts, seq.size])
    labels = speaker[starts] - 1
    if standardise is not None:
        X = (X - standardise[0]) / standardise[1]
    G = lengths.size
    return SequenceData(
        graphs=GraphBatch.chains(lengths), node_features=X, labels=labels,
        n_classes=N_SPEAKERS,
        coords={"feature": [f"lpc_{i + 1}" for i in range(N_FEATURES)],
                "class": [f"speaker{c + 1}" for c in range(N_SPEAKERS)], "graph": np.arange(G)})


def japanese_vowels(standardise: bool = True) -> tuple[SequenceData, SequenceData]:
    """The fixed train (270 utterances) and test (370) splits of Japanese Vowels.

    Parameters
    ----------
    standardise : bool
        Centre and scale each LPC coefficient by the training frames' mean and standard deviation
        (the same constants for both splits).

    Returns
    -------
    (SequenceData, SequenceData)
        ``graphs`` one chain per utterance, ``node_features`` (frames, 12), ``labels`` the speaker
        0..8 per utterance, ``n_classes`` 9.

    Notes
    -----
    Kudo, Toyama & Shimbo, Multidimensional curve classification using passing-through regions,
    Pattern Recognition Letters 20 (1999) 1103-1111. The training set is balanced (30 per
    speaker); the test set is not (24-88 per speaker).
    """
    scale = None
    if flag(standardise, "standardise"):
        X = _read("train")[2]
        scale = (X.mean(axis=0), X.std(axis=0))
    return _sequences("train", scale), _sequences("test", scale)
