"""The CoNLL-2000 chunking data of the posterior benchmarks, read and encoded once.

``chunking(n_train, n_test, features)``: the first ``n_train`` training and ``n_test`` test
sentences, token feature dicts by ``features(words, pos)`` (CRFsuite's template,
``pmc.datasets.token_features``, by default) through one ``pmc.FeatureVectorizer`` fitted on
the training sentences, and the chunk tags encoded over the tags of both splits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import pymc_crf as pmc
from pymc_crf.datasets import read_conll2000, token_features
from pymc_crf.features import encode_tags, sequence_batch


@dataclass
class Chunking:
    """Training and test ``CRFData``, the vectorizer, the tags and the test chunk tags."""

    train: pmc.CRFData
    test: pmc.CRFData
    vectorizer: pmc.FeatureVectorizer
    classes: list[str]
    test_tags: list[list[str]]

    def tags(self, labels: np.ndarray) -> list[list[str]]:
        """Flat label ids of the test tokens as one tag list per test sentence."""
        out, i = [], 0
        for s in self.test_tags:
            out.append([self.classes[k] for k in labels[i:i + len(s)]])
            i += len(s)
        return out


def chunking(n_train: int, n_test: int,
             features: Callable = token_features) -> Chunking:
    words, pos, chunks = (a[:n_train] for a in read_conll2000("train"))
    twords, tpos, tchunks = (a[:n_test] for a in read_conll2000("test"))
    vec = pmc.FeatureVectorizer(min_freq=1)
    X = vec.fit_transform([features(w, p) for w, p in zip(words, pos, strict=True)])
    Xt = vec.transform([features(w, p) for w, p in zip(twords, tpos, strict=True)])
    classes = sorted({t for s in chunks + tchunks for t in s})
    y, _ = encode_tags(chunks, classes)
    yt, _ = encode_tags(tchunks, classes)
    K = len(classes)
    return Chunking(pmc.CRFData(sequence_batch(words), y, X, n_labels=K),
                    pmc.CRFData(sequence_batch(twords), yt, Xt, n_labels=K), vec, classes,
                    [list(t) for t in tchunks])
