import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("default", deadline=None, max_examples=25, derandomize=True)
settings.load_profile("default")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
