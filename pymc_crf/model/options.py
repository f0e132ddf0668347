"""The check that every option a user passes to a fitter or predictor is one it takes."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable

__all__ = ["check_options"]


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
