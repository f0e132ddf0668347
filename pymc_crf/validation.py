"""Checks of option values shared by the engines, fitters and data generators."""

from __future__ import annotations

import argparse
import numbers
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

__all__ = ["check_initvals", "class_indices", "fitting", "fitting_method", "flag", "generator",
           "int_at_least", "name_list", "positive_number", "real_number", "refusal", "whole_number"]


def whole_number(value, name: str, minimum: int = 1) -> int:
    """``value`` as an int when it is a whole number >= ``minimum`` (``3`` and ``3.0`` pass;
    ``2.7``, ``True``, ``"3"`` and NaN do not; numpy scalars and 0-d arrays count as their
    value), else a ValueError naming ``name``."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool)
          and value == value and abs(value) != float("inf") and int(value) == value
          and value >= minimum)
    if not ok:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def class_indices(values, what: str, locate=None, hint: str = "") -> np.ndarray:
    """``values`` as an int64 array of class indices: integer and boolean arrays pass, as do
    floats that are whole numbers (``1.0``); NaN, inf, fractions and other dtypes are refused
    with a ValueError naming ``what``, the first offending entry and its value. ``locate`` turns
    that entry's index (a tuple) into words (default ``"entry i, j"``); ``hint`` ends the
    message on a NaN or inf (a missing-label marker, where the caller may say what to use
    instead), not on a fraction or another dtype. The label range is the caller's check: its
    message names what a label indexes."""
    arr = np.asarray(values)
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr)
        bad[~bad] = arr[~bad] != np.round(arr[~bad])
        if bad.any():
            idx = tuple(int(k[0]) for k in np.nonzero(bad))
            where = locate(idx) if locate is not None else "entry " + ", ".join(map(str, idx))
            v = float(arr[idx])
            if not np.isfinite(v):
                raise ValueError(f"{what} contain {'NaN' if np.isnan(v) else v} at {where}{hint}")
            raise ValueError(f"{what} must be whole numbers; {where} is {v!r} (class indices)")
    elif arr.dtype.kind not in "iub":
        raise ValueError(f"{what} must be integers (class indices); got dtype {arr.dtype}")
    return arr.astype(np.int64)


def real_number(value, name: str) -> float:
    """``value`` as a float when it is a real number other than NaN (``True`` and strings do not
    pass), else a ValueError naming ``name``."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if not (isinstance(value, numbers.Real) and not isinstance(value, bool) and value == value):
        raise ValueError(f"{name} must be a number; got {value!r}")
    return float(value)


def flag(value, name: str) -> bool:
    """``value`` as a bool when it is one (numpy's and 0-d arrays too) or the integer 0 or 1,
    else a ValueError naming ``name`` (the string ``"False"`` is true in Python, so it is
    refused rather than read)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{name} must be True or False; got {value!r}")


def positive_number(value, name: str, *, allow_zero: bool = False,
                    allow_inf: bool = False) -> float:
    """``value`` as a float when it is a real number > 0 (>= 0 with ``allow_zero``; ``inf``
    only with ``allow_inf``), else a ValueError naming ``name``. ``True``, strings and NaN do
    not pass."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and value == value
    if ok:
        ok = (value >= 0 if allow_zero else value > 0) and (allow_inf or value != float("inf"))
    if not ok:
        what = ">= 0" if allow_zero else "> 0"
        finite = "" if allow_inf else " and finite"
        raise ValueError(f"{name} must be a number {what}{finite}; got {value!r}")
    return float(value)


def generator(seed, name: str) -> np.random.Generator:
    """A numpy Generator from ``seed``: a Generator (returned as it is), None, a non-negative
    integer, a sequence of them, a SeedSequence or a BitGenerator, as ``np.random.default_rng``
    takes; anything else (``2.5``, ``-1``, ``True``, a string) is refused with an error naming
    ``name`` rather than numpy's "SeedSequence expects int"."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.ndarray) and seed.ndim == 0:
        seed = seed.item()
    message = (f"{name} must be None, a non-negative integer (or a sequence of them) or a numpy "
               f"Generator; got {seed!r}")
    if isinstance(seed, bool | np.bool_):
        raise TypeError(message)
    try:
        return np.random.default_rng(seed)
    except (TypeError, ValueError) as err:
        raise type(err)(message) from None


def name_list(value, name: str) -> list[str] | None:
    """``value`` (None or a sequence of names) as a list; a lone str is refused, not split into
    its characters."""
    if value is None:
        return None
    if isinstance(value, str):
        raise TypeError(f"{name} must be a list of names; got the str {value!r} "
                        f"(write [{value!r}])")
    if not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of names; got {type(value).__name__}")
    return list(value)


def int_at_least(minimum: int):
    """An argparse type: an integer >= ``minimum`` (a one-line error otherwise), for the
    command line's counts."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


# The method of the pmc.fit call running now: a model that a fitter cannot take is found deep
# inside it (reading the model back, in layers that know nothing of fitters), and the refusal
# should name the method the user chose rather than "this fitter".
_FITTING: ContextVar[str | None] = ContextVar("pymc_crf_fitting_method", default=None)


def fitting_method() -> str | None:
    """The ``method`` of the :func:`pymc_crf.fit` call running now (None outside one)."""
    return _FITTING.get()


@contextmanager
def fitting(method: str) -> Iterator[None]:
    """Mark ``method`` as the running fit's (:func:`fitting_method`) inside the ``with`` block."""
    token = _FITTING.set(method)
    try:
        yield
    finally:
        _FITTING.reset(token)


def refusal(needs: str, found: str, alternatives: Iterable[str] = ("map", "nuts")) -> str:
    """A one-line refusal: ``pmc.fit(method='ep') needs {needs}; {found}. method='map' and
    'nuts' ...`` naming the running fit's method (:func:`fitting_method`) and the
    ``alternatives`` (other than it) that take any PyMC model. Outside a fit (``pmc.predict``,
    the queries, ``pmc.impute``) the caller is not choosing a fitter, so no alternative is
    named."""
    method = fitting_method()
    who = f"pmc.fit(method={method!r})" if method else "this function"
    others = [a for a in alternatives if a != method] if method else []
    tail = ""
    if others:
        names = " and ".join(repr(a) for a in others)
        tail = (f". method={names} take{'s' if len(others) == 1 else ''} any PyMC model "
                "(pmc.fit(model, method=...))")
    return f"{who} needs {needs}; {found}{tail}"


def check_initvals(model, initvals, where: str) -> None:
    """Refuse ``initvals`` (``pm.sample``'s: a dict, or one per chain) that name no variable of
    ``model``: PyMC fails on them with a bare ``KeyError``."""
    if initvals is None:
        return
    chains = list(initvals) if isinstance(initvals, list | tuple) else [initvals]
    free = [rv.name for rv in model.free_RVs]
    for start in chains:
        if start is None:
            continue
        if not isinstance(start, dict):
            raise TypeError(f"{where}: initvals must be a dict of starting values (or one per "
                            f"chain); got {type(start).__name__}")
        for key in start:
            if isinstance(key, str) and key not in model.named_vars:
                raise ValueError(f"{where}: initvals names {key!r}, which is not a variable of "
                                 f"the model; its free variables are {free}")
