"""The CoNLL-2000 chunking data of the posterior benchmarks, read and encoded once.

``chunking(n_train, n_test, features, n_dev)``: the first ``n_train`` training and ``n_test``
test sentences (``n_train=None``: every training sentence but the dev split), and with ``n_dev``
a dev split of the last ``n_dev`` training sentences (disjoint from the training ones), token
feature dicts by ``features(words, pos)`` (CRFsuite's template,
``pmc.datasets.token_features``, by default) through one ``pmc.FeatureVectorizer`` fitted on
the training sentences, and the chunk tags encoded over the tags of both splits.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pymc as pm
import scipy.sparse

import pymc_crf as pmc
from pymc_crf.datasets import read_conll2000, token_features
from pymc_crf.features import COUNT_BUCKETS, encode_tags, sequence_batch


@dataclass
class Chunking:
    """Training and test ``CRFData``, the vectorizer, the tags and the test chunk tags."""

    train: pmc.CRFData
    test: pmc.CRFData
    dev: pmc.CRFData | None
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


def tagger_split(n_train: int, n_test: int) -> tuple[list, list, list, list]:
    """``(X, y, X_test, y_test)`` for ``pmc.CRFTagger``: per-token feature dicts (sklearn-crfsuite's
    tutorial features, ``token_features``) and chunk tags of the first ``n_train`` training and
    ``n_test`` test sentences."""
    words, pos, chunks = (a[:n_train] for a in read_conll2000("train"))
    twords, tpos, tchunks = (a[:n_test] for a in read_conll2000("test"))
    X = [token_features(w, p) for w, p in zip(words, pos, strict=True)]
    Xt = [token_features(w, p) for w, p in zip(twords, tpos, strict=True)]
    return X, [list(c) for c in chunks], Xt, [list(c) for c in tchunks]


def chunking(n_train: int | None, n_test: int,
             features: Callable = token_features, n_dev: int = 0) -> Chunking:
    words, pos, chunks = read_conll2000("train")
    if n_train is not None and n_train + n_dev > len(words):
        raise ValueError(f"{n_train} training and {n_dev} dev sentences: the training file has "
                         f"{len(words)}")
    dwords, dpos, dchunks = (a[len(a) - n_dev:] for a in (words, pos, chunks))
    stop = len(words) - n_dev if n_train is None else n_train
    words, pos, chunks = (a[:stop] for a in (words, pos, chunks))
    twords, tpos, tchunks = (a[:n_test] for a in read_conll2000("test"))
    vec = pmc.FeatureVectorizer(min_freq=1)
    X = vec.fit_transform([features(w, p) for w, p in zip(words, pos, strict=True)])
    Xt = vec.transform([features(w, p) for w, p in zip(twords, tpos, strict=True)])
    classes = sorted({t for s in chunks + tchunks + dchunks for t in s})
    y, _ = encode_tags(chunks, classes)
    yt, _ = encode_tags(tchunks, classes)
    K = len(classes)
    dev = None
    if n_dev:
        Xd = vec.transform([features(w, p) for w, p in zip(dwords, dpos, strict=True)])
        dev = pmc.CRFData(sequence_batch(dwords), encode_tags(dchunks, classes)[0], Xd,
                          n_labels=K)
    return Chunking(pmc.CRFData(sequence_batch(words), y, X, n_labels=K),
                    pmc.CRFData(sequence_batch(twords), yt, Xt, n_labels=K), dev, vec,
                    classes, [list(t) for t in tchunks])


def map_at_scales(data: pmc.CRFData, node_sd, edge_sd: float, n_labels: int):
    """The MAP of the chunking CRF whose node weights ``W[f, :]`` have the prior sd
    ``node_sd[f]`` (a scalar: every feature; (F, K): ``W[f, k]`` its own) and whose transition
    table has ``edge_sd``, with the wall time of its ``pmc.fit``."""
    F = data.node_features.shape[1]
    sd = np.asarray(node_sd, dtype=float)
    sd = sd if sd.ndim == 2 else np.broadcast_to(sd, (F,))[:, None] * np.ones((1, n_labels))
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, sd, shape=(F, n_labels))
        T = pm.Normal("T", 0.0, edge_sd, shape=(n_labels, n_labels))
        pmc.CRF("y", graphs=data.graphs, node_features=data.node_features, node_weights=W,
                edge_weights=T, observed=data.labels)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = pmc.fit(model, method="map", log_likelihood=False, progressbar=False)
    return fit, time.perf_counter() - t0


#: the training-count buckets of ``--groups template-frequency`` (1, 2-3, 4-15, 16 and more)


def group_names(data: Chunking, by: str = "template-frequency") -> list[str]:
    """Each feature's group: by ``"template-frequency"``, ``"template (count bucket)"``, its
    template and how many training tokens it fires on
    (``FeatureVectorizer.template_count_groups``); by ``"template"`` or ``"frequency"`` one of
    the two."""
    if by not in ("template-frequency", "template", "frequency"):
        raise ValueError(f"groups by 'template-frequency', 'template' or 'frequency', not {by!r}")
    vec = data.vectorizer
    if by == "template":
        return [vec.templates_[t] for t in vec.template_index_]
    if by == "frequency":
        return [f"count {COUNT_BUCKETS[b]}" for b in vec.count_buckets(data.train.node_features)]
    return vec.template_count_groups(data.train.node_features)


def seen_pair_groups(data: Chunking) -> tuple[list[str], np.ndarray]:
    """Groups of ``--groups template-frequency-seen``: each (feature, label) weight's template and
    count bucket, split by whether the feature fires on a training token of that label (the
    pairs CRFsuite makes state features of, its default ``feature.possible_states=0``) or not:
    ``(names, index (F, K) into names)``."""
    X, y = data.train.node_features, data.train.labels
    K = len(data.classes)
    hits = scipy.sparse.csr_matrix((np.ones(y.size), (np.arange(y.size), y)), shape=(y.size, K))
    seen = np.asarray((abs(X).T @ hits).todense()) > 0
    names, group = np.unique(group_names(data), return_inverse=True)
    codes, index = np.unique(group[:, None] * 2 + ~seen, return_inverse=True)
    labelled = [f"{names[c // 2]}, label {'unseen' if c % 2 else 'seen'}" for c in codes]
    return labelled, index.reshape(seen.shape)


def scales_by_group(data: Chunking, saved: dict, default: float):
    """Per-feature prior sds from saved per-group scales (``conll_learned_scales.py
    --save-scales``): ``(node_sd (F,), transition sd, groups missing from saved)``; a group the
    saved scales lack takes ``default``."""
    if saved.get("groups") != "template-frequency":
        raise ValueError(f"scales per template and count bucket are needed (--groups "
                         f"template-frequency); got {saved.get('groups')!r}")
    names = group_names(data)
    sd = np.array([saved["scales"].get(n, default) for n in names])
    missing = sum(n not in saved["scales"] for n in set(names))
    return sd, float(saved["transition"]), missing
