"""pymc_crf.features: FeatureVectorizer."""

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from pymc_crf.features import FeatureVectorizer


def test_inverse_transform_checks_fitted_and_the_number_of_columns():
    with pytest.raises(NotFittedError, match="not fitted"):
        FeatureVectorizer().inverse_transform(np.eye(2))
    vec = FeatureVectorizer().fit([[{"w": "a"}, {"w": "b"}]])  # bias, w=a, w=b
    assert vec.inverse_transform(np.eye(3)[1:]) == [{"w=a": 1.0}, {"w=b": 1.0}]
    # a matrix of other columns was named after the first columns of the vocabulary (one
    # column read as 'bias'), or failed on a list index (four columns)
    for width in (1, 4):
        with pytest.raises(ValueError, match=f"X has {width} columns; this vectorizer has 3"):
            vec.inverse_transform(np.ones((1, width)))
