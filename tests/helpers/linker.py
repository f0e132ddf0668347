"""How the tests run compiled PyTensor graphs (``PYMC_CRF_TEST_LINKER``), in one place for the
test process (``conftest.py``) and the child processes some tests start.

By default ("py"): with PyTensor's fast_run rewrites (those of the NUMBA mode users run, less
numba's own fusions, whose inner graphs the Python VM would link with compiled C), executed by
PyTensor's Python VM (each Op's ``perform``) instead of numba code generation. numba compiles each
new graph in about 2 s (it optimises the graph's function together with every Op's code again),
and the suite builds over a thousand graphs: on a machine with empty caches that alone was most of
the suite's time. Our Ops' numba implementations are checked by the tests that ask for
``mode="NUMBA"`` or the ``numba_mode`` fixture, and the whole suite runs in the NUMBA mode with
``PYMC_CRF_TEST_LINKER=numba`` (CI runs it so after the default run: .ci/run).
"""

import os

import pytensor
from pytensor.compile.mode import Mode
from pytensor.graph.rewriting.db import RewriteDatabaseQuery
from pytensor.link.vm import VMLinker

TEST_LINKER = os.environ.get("PYMC_CRF_TEST_LINKER", "py")
if TEST_LINKER not in ("py", "numba"):
    raise ValueError(f"PYMC_CRF_TEST_LINKER must be 'py' or 'numba'; got {TEST_LINKER!r}")


def use_test_linker() -> None:
    """Make ``TEST_LINKER``'s mode PyTensor's default in this process."""
    if TEST_LINKER == "py":
        pytensor.config.mode = Mode(VMLinker(use_cloop=False, c_thunks=False),
                                    RewriteDatabaseQuery(include=["fast_run"],
                                                         exclude=["cxx_only"]))
