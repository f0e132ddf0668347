"""The check that every option a user passes to a fitter or predictor is one it takes."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable

__all__ = ["RENAMED", "check_options", "check_step_options"]

#: names users bring from other libraries for options the fitters call otherwise
RENAMED = {"seed": "random_seed", "n_draws": "draws", "n_chains": "chains"}


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


def check_step_options(step_cls: type, options: Iterable[str], what: str,
                       fitter_options: Iterable[str], managed: Iterable[str] = ()) -> None:
    """A TypeError for options that neither a sampler fitter (``fitter_options``) nor its step
    method's constructor takes (the ones the fitter sets itself, ``managed``, excluded), naming
    the right name where the option is a known rename (``seed`` for ``random_seed``): checked
    before the fit's preparation, not when the step is built after it."""
    params = inspect.signature(step_cls.__init__).parameters
    skip = {"self", "vars", *managed}
    takes = sorted(k for k, p in params.items() if p.kind is p.KEYWORD_ONLY and k not in skip)
    for key in options:
        if key in takes:
            continue
        if key in RENAMED:
            raise TypeError(f"{what} takes {RENAMED[key]!r}, not {key!r}")
        raise TypeError(f"{what} has no option {key!r}; its options: "
                        f"{', '.join(list(fitter_options) + takes)}")
