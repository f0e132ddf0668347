"""pymc_crf.metrics on the inputs users pass: masked arrays, ragged per-sentence arrays and a
str where a sequence of tags is expected are refused by name instead of scored wrongly or failing
inside numpy."""

import numpy as np
import pytest

from pymc_crf.metrics import (
    bio_chunks,
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
