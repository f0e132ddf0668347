"""Option names shared by the fitters (PyMC's: ``draws``, ``random_seed``) and their old aliases,
and the check that every option a user passes is one the method takes."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

__all__ = ["check_options", "renamed"]


def check_options(fn: Callable, options: Iterable[str], what: str) -> set[str] | None:
    """The names of ``fn``'s parameters, after raising a TypeError that names the options ``fn``
    has no parameter for and the ones it has; None, with nothing checked, when ``fn`` takes
    ``**kwargs`` (it hands them on or reads them itself)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    unknown = sorted(set(options) - {k for k, p in params.items() if p.kind is not p.VAR_KEYWORD})
    if unknown:
        known = sorted(k for k, p in params.items() if p.kind is p.KEYWORD_ONLY)
        raise TypeError(f"{what} has no option {', '.join(map(repr, unknown))}; its options: "
                        f"{', '.join(known) or 'none'}")
    return set(params)


def renamed(value: Any, old_value: Any, old: str, new: str, *, default: Any) -> Any:
    """``old_value`` with a FutureWarning when the caller used the old option name, else ``value``.

    The old name (default None) stays accepted for one release. Giving both names, the new one
    changed from its ``default``, is refused.
    """
    if old_value is None:
        return value
    same = value is default or (np.isscalar(value) and np.isscalar(default)
                                and bool(value == default))
    if not same:
        raise ValueError(f"give {new}= or its old name {old}=, not both ({new}={value!r}, "
                         f"{old}={old_value!r})")
    warnings.warn(f"{old}= is renamed {new}= (as in PyMC); {old}= will be removed in the next "
                  "release", FutureWarning, stacklevel=3)
    return old_value
