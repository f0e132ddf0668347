"""Imported first (before numpy) by the benchmarks that time compiled PyMC models beside numpy
code in one rotation.

numpy and scipy each load their own OpenBLAS. Compiled PyMC models (numba mode) multiply
through scipy's (numba's ``np.dot`` calls ``scipy.linalg.cython_blas``), numpy's ``X @ W``
through numpy's, and after each call an OpenBLAS worker thread spins for about 2^28 cycles
before it sleeps. Timed in turn on two cores, each library's spinning worker then takes a core
from the other's next call and from the serial kernels: in one process, the BLAS reference went
from 5.7 to 11 ms and the per-edge objective from 14.8 to 26.5 ms as soon as the compiled model
joined the rotation. An MCMC run multiplies through scipy's only, and the engine objective of a
MAP fit through numpy's (its chain kernel calls scipy's only for edge-feature chains too long
for a lane block). ``OPENBLAS_THREAD_TIMEOUT=4`` (2^4 cycles; both libraries read it when they
load) lets the workers sleep at once: every row, the reference included, is then timed as it
runs on its own, at the cost of a thread wake-up per BLAS call (the reference alone: 6.1-6.5 ms
against 5.7-5.8 ms with the default spin). A value already set in the environment is kept.
"""

import os

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
SETTING = f"OPENBLAS_THREAD_TIMEOUT={os.environ['OPENBLAS_THREAD_TIMEOUT']}"
