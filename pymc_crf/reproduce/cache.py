"""A disk cache of finished trials: one JSON file per trial, so an interrupted run resumes."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["TrialCache", "code_fingerprint", "environment_fingerprint", "trial_key"]

_PACKAGE = Path(__file__).resolve().parents[1]


def code_fingerprint(extra: Sequence[str | os.PathLike] = ()) -> str:
    """The hex SHA-256 of the package's Python sources and shipped data (every ``*.py`` under
    ``pymc_crf`` and every file under ``pymc_crf/datasets/data``, by relative path and content)
    and of the ``extra`` files that exist.

    Part of every trial key, so a cached trial is reused only by the code that computed it: a
    change to any module, even one a trial does not seem to call, makes a fresh trial (a
    conservative rule, since numbers move with numerics anywhere in the package).
    """
    h = hashlib.sha256()
    files = sorted([*_PACKAGE.rglob("*.py"),
                    *(p for p in (_PACKAGE / "datasets" / "data").rglob("*") if p.is_file())])
    for path in files:
        h.update(str(path.relative_to(_PACKAGE)).encode())
        h.update(path.read_bytes())
    for path in map(Path, extra):
        if path.is_file():
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def environment_fingerprint() -> str:
    """The hex SHA-256 of what besides the package's code moves the numbers: the Python and
    library versions (numpy, scipy, numba, PyTensor, PyMC, ArviZ, nutpie) and PyTensor's linker
    (the NUTS rows differ between the numba and C backends)."""
    import platform
    from importlib import metadata

    import pytensor

    parts = [platform.python_version(), str(pytensor.config.linker),
             _describe_mode(pytensor.config.mode)]
    for dist in ("numpy", "scipy", "numba", "pytensor", "pymc", "arviz", "nutpie"):
        try:
            parts.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist}=absent")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def _describe_mode(mode: Any) -> str:
    """A text for PyTensor's ``config.mode`` that is the same in every process for the same mode.

    ``config.mode`` is a name (``"Mode"``, ``"NUMBA"``, ``"FAST_RUN"``) or a ``Mode`` object;
    ``str`` of the object prints memory addresses and the rewrite database's set of names in
    hash order, so it differs from process to process, and a cache keyed on it is never read
    again. The object is described by its class, its linker's class and plain settings
    (``use_cloop``, ``c_thunks``, ...) and its rewrite query's included, required and excluded
    tags.
    """
    if isinstance(mode, str):
        return mode
    plain = (bool, int, float, str, type(None))
    parts = [type(mode).__name__]
    linker = getattr(mode, "linker", None)
    if linker is not None:
        parts.append(type(linker).__name__ + "(" + ", ".join(
            f"{k}={v!r}" for k, v in sorted(vars(linker).items()) if isinstance(v, plain)) + ")")
    query = getattr(mode, "provided_optimizer", None)
    if isinstance(query, str):
        parts.append(query)
    elif query is not None:
        parts.append(type(query).__name__ + "(" + ", ".join(
            f"{k}={sorted(map(str, getattr(query, k, ())))}"
            for k in ("include", "require", "exclude")) + ")")
    return "|".join(parts)


def trial_key(experiment: str, settings: dict[str, Any], seed: int, version: str) -> str:
    """The hex SHA-256 of the experiment name, settings, seed and code version (canonical
    JSON; the command passes the package version and :func:`code_fingerprint`), so a change to
    any of them is a different trial."""
    blob = json.dumps({"experiment": experiment, "settings": settings, "seed": int(seed),
                       "version": version}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class TrialCache:
    """Finished trials of one experiment under ``root / experiment``.

    Parameters
    ----------
    root : path
        The cache folder (``OUT/cache`` for the command).
    experiment : str
    version : str
        The code version, part of every key (the command uses ``"<package version>+<first 16
        hex digits of code_fingerprint>"``).
    """

    def __init__(self, root: str | os.PathLike, experiment: str, version: str) -> None:
        self.folder = Path(root) / experiment
        self.experiment, self.version = experiment, version

    def _path(self, settings: dict[str, Any], seed: int) -> Path:
        return self.folder / f"{trial_key(self.experiment, settings, seed, self.version)}.json"

    def load(self, settings: dict[str, Any], seed: int) -> dict[str, float] | None:
        """The cached values of the trial, or None when it has not finished."""
        path = self._path(settings, seed)
        if not path.exists():
            return None
        return json.loads(path.read_text())["values"]

    def store(self, settings: dict[str, Any], seed: int, values: dict[str, float]) -> None:
        """Write the trial's values (to a temporary file first, so a killed run never leaves a
        half-written entry)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._path(settings, seed)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"experiment": self.experiment, "settings": settings,
                                   "seed": int(seed), "version": self.version,
                                   "values": values}, sort_keys=True))
        os.replace(tmp, path)
