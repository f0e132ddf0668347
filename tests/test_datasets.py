"""Built-in data sets: deterministic in their seed, documented shapes, reachable modules."""

import numpy as np
import pytest

import pymc_crf as pmc


def test_dataset_is_deterministic_and_documented_shape():
    a, _ = pmc.datasets.bcrf_synthetic("chain", n_train=5, n_test=0, seed=1)
    b, _ = pmc.datasets.bcrf_synthetic("chain", n_train=5, n_test=0, seed=1)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.edge_features, b.edge_features)
    assert a.true_weights["w"].size == 24 and a.graphs.is_chain
    with pytest.raises(ValueError, match="kind"):
        pmc.datasets.bcrf_synthetic("grid")


def test_generators_do_not_hide_their_modules():
    from pymc_crf.datasets import bcrf, hmm

    assert pmc.datasets.hmm_classes is hmm.hmm_classes
    assert pmc.datasets.bcrf_synthetic is bcrf.bcrf_synthetic
    assert pmc.datasets.SequenceData is hmm.SequenceData
    train, test = pmc.datasets.hmm_classes(2, 1, T=4, seed=0)
    assert isinstance(train, hmm.SequenceData) and train.labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert test.node_features.shape == (3 * 4, 2)
