"""Option names shared by the fitters (PyMC's: ``draws``, ``random_seed``) and their old aliases."""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["renamed"]


def renamed(value: Any, old_value: Any, old: str, new: str) -> Any:
    """``old_value`` with a FutureWarning when the caller used the old option name, else ``value``.

    The old name (default None) stays accepted for one release.
    """
    if old_value is None:
        return value
    warnings.warn(f"{old}= is renamed {new}= (as in PyMC); {old}= will be removed in the next "
                  "release", FutureWarning, stacklevel=3)
    return old_value
