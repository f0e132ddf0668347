"""pymc_crf.metrics on the inputs users pass: masked arrays, ragged per-sentence arrays and a
str where a sequence of tags is expected are refused by name instead of scored wrongly or failing
inside numpy; BIO and BIOES chunks against conlleval's rules."""

import numpy as np
import pytest

from pymc_crf.metrics import (
    bio_chunks,
    chunk_f1,
    confidence_reliability,
    expected_calibration_error,
    reliability_curve,
    selective_curve,
)

MARG = np.array([[0.9, 0.1], [0.9, 0.1], [0.2, 0.8]])


def test_masked_labels_are_refused_not_read_under_the_mask():
    # np.asarray drops the mask: the masked label (1) was scored, ECE 0.200 instead of the
    # 0.150 of the two unmasked positions
    labels = np.ma.masked_array([0, 1, 1], mask=[False, True, False])
    with pytest.raises(ValueError, match="reliability_curve: labels is a masked array with 1 "
                                         "masked entries"):
        expected_calibration_error(MARG, labels, 2)
    with pytest.raises(ValueError, match="marginals is a masked array"):
        reliability_curve(np.ma.masked_array(MARG, mask=MARG < 0.15), [0, 1, 1], 2)
    with pytest.raises(ValueError, match="selective_curve: correct is a masked array"):
        selective_curve([0.9, 0.8], np.ma.masked_array([True, False], mask=[False, True]))
    # a masked array with nothing masked is its data
    unmasked = np.ma.masked_array([0, 1, 1], mask=False)
    assert expected_calibration_error(MARG, unmasked, 2) == pytest.approx(0.2)
    assert expected_calibration_error(MARG[[0, 2]], [0, 1], 2) == pytest.approx(0.15)


def test_ragged_per_sentence_arrays_are_refused_by_name():
    per_sentence = [np.full((2, 2), 0.5), np.full((3, 2), 0.5)]
    with pytest.raises(ValueError, match="reliability_curve: marginals must be one array of "
                                         "numbers .* np.concatenate"):
        reliability_curve(per_sentence, np.zeros(5, int))
    with pytest.raises(ValueError, match="selective_curve: confidence must be one array"):
        selective_curve([np.array([0.9, 0.5]), np.array([0.3])], [True, False, True])
    with pytest.raises(ValueError, match="confidence_reliability: correct must be one array"):
        confidence_reliability([0.9, 0.5, 0.3], [np.array([1, 0]), np.array([1])])
    with pytest.raises(TypeError, match="reliability_curve: marginals must be one array"):
        reliability_curve([[{"O": 0.9, "B-NP": 0.1}]], [0])
    joined = reliability_curve(np.concatenate(per_sentence), np.zeros(5, int), 2)
    np.testing.assert_array_equal(joined.count, [5, 0])


def test_bio_chunks_refuses_one_str():
    # a str is a sequence of str: "B-NP" was read as the tags "B", "-", "N", "P" (a "not BIO"
    # error about tag 'B'), and "OOO" as three O tags (no chunks, silently)
    with pytest.raises(ValueError, match=r"not one str \('B-NP'\)"):
        bio_chunks("B-NP")
    with pytest.raises(ValueError, match="not one str"):
        bio_chunks("OOO")
    assert bio_chunks(("B-NP", "I-NP")) == {("NP", 0, 1)}


def _conlleval_chunks(tags):
    """Chunks by conlleval's startOfChunk / endOfChunk (Tjong Kim Sang & Buchholz 2000), which
    read B, I, E, S and O tags alike; the end of the sentence is an O."""
    def parts(t):
        return ("O", "") if t == "O" else tuple(t.split("-", 1))

    chunks, start, prev, prev_type = set(), None, "O", ""
    for i, t in enumerate([*tags, "O"]):
        tag, typ = parts(t)
        end = (prev in ("E", "S") or (prev in ("B", "I") and tag in ("B", "S", "O"))
               or (prev != "O" and prev_type != typ))
        begin = (tag in ("B", "S") or (prev in ("E", "S", "O") and tag in ("E", "I"))
                 or (tag != "O" and prev_type != typ))
        if start is not None and end:
            chunks.add((prev_type, start, i - 1))
            start = None
        if begin:
            start = i
        prev, prev_type = tag, typ
    return chunks


def test_bioes_chunks_and_f1_follow_conlleval():
    rng = np.random.default_rng(0)
    bio = ["O", "B-A", "I-A", "B-B", "I-B"]
    bioes = [*bio, "E-A", "S-A", "E-B", "S-B"]
    for tags_of, scheme in ((bio, "BIO"), (bioes, "BIOES")):
        gold, pred, n_gold = [], [], 0
        for _ in range(400):
            n = int(rng.integers(0, 9))
            g = [tags_of[k] for k in rng.integers(0, len(tags_of), n)]
            p = [tags_of[k] for k in rng.integers(0, len(tags_of), n)]
            assert bio_chunks(g, scheme) == _conlleval_chunks(g), g
            gold.append(g)
            pred.append(p)
            n_gold += len(_conlleval_chunks(g))
        score = chunk_f1(gold, pred)  # the scheme read from the tags
        assert score == chunk_f1(gold, pred, scheme)
        assert score.n_gold == n_gold
        assert score.n_correct == sum(len(_conlleval_chunks(g) & _conlleval_chunks(p))
                                      for g, p in zip(gold, pred, strict=True))
    assert bio_chunks(["B-A", "E-A", "S-A", "I-A", "E-A"], None) == {
        ("A", 0, 1), ("A", 2, 2), ("A", 3, 4)}
    with pytest.raises(ValueError, match=r"'E-A' is not BIO \(O, B-TYPE, I-TYPE\)"):
        chunk_f1([["B-A", "E-A"]], [["B-A", "E-A"]], scheme="BIO")
    with pytest.raises(ValueError, match="scheme must be"):
        chunk_f1([["O"]], [["O"]], scheme="IOB2")
