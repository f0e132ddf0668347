"""A disk cache of finished trials: one JSON file per trial, so an interrupted run resumes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["TrialCache", "trial_key"]


def trial_key(experiment: str, settings: dict[str, Any], seed: int, version: str) -> str:
    """The hex SHA-256 of the experiment name, settings, seed and package version (canonical
    JSON), so a change to any of them is a different trial."""
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
        The package version, part of every key.
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
