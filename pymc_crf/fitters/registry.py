"""The fitter registry: ``pmc.fit(model, method=...)`` and ``register(name)``.

A fitter is a function ``fn(model, **options) -> xarray.DataTree`` following the result contract of
``docs/fit_contract.md`` (build it with :func:`pymc_crf.model.results.build_result`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pymc as pm
from xarray import DataTree

from pymc_crf.fitters.progress import progress_flag
from pymc_crf.model.options import check_options
from pymc_crf.validation import fitting, flag, generator

__all__ = ["available", "fit", "fitter", "load_builtin", "register"]

_FITTERS: dict[str, Callable[..., DataTree]] = {}


def register(name: str) -> Callable[[Callable[..., DataTree]], Callable[..., DataTree]]:
    """Decorator registering ``fn(model, **options) -> DataTree`` as ``pmc.fit(method=name)``.

    A function of the same module and qualified name replaces its earlier definition (a notebook
    cell run again).

    Parameters
    ----------
    name : str
        The ``method`` name the fitter is registered under.

    Returns
    -------
    callable
        The decorator; it registers the function it decorates and returns it unchanged.

    Raises
    ------
    ValueError
        When the decorator is applied and ``name`` is taken by another function.
    """

    def decorator(fn: Callable[..., DataTree]) -> Callable[..., DataTree]:
        old = _FITTERS.get(name)
        redefined = old is not None and (
            (getattr(old, "__module__", None), getattr(old, "__qualname__", None))
            == (getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)))
        if old is not None and old is not fn and not redefined:
            raise ValueError(f"a fitter named {name!r} is already registered "
                             f"({getattr(old, '__module__', '?')}.{getattr(old, '__qualname__', '?')})")
        _FITTERS[name] = fn
        return fn

    return decorator


#: fitter modules (under ``pymc_crf.fitters``) that register fitters and predictors on import
BUILTIN = ("map", "nuts", "ep", "beta_process", "bethe_laplace", "evidence", "samplers",
           "randomized_map")


def available() -> list[str]:
    """Names of the registered fitters."""
    load_builtin()
    return sorted(_FITTERS)


def fitter(name: str) -> Callable[..., DataTree]:
    """The function registered as ``method=name`` (e.g. to read its options' names)."""
    load_builtin()
    if name not in _FITTERS:
        raise ValueError(f"unknown method {name!r}; available: {sorted(_FITTERS)}")
    return _FITTERS[name]


def load_builtin() -> None:
    """Import the built-in fitter modules (each registers its fitters and predictors)."""
    for mod in BUILTIN:
        try:
            importlib.import_module(f"pymc_crf.fitters.{mod}")
        except ModuleNotFoundError as err:
            if err.name != f"pymc_crf.fitters.{mod}":  # a fitter this install does not have
                raise


_load_builtin = load_builtin


def fit(model: pm.Model | None = None, method: str = "map", **options: Any) -> DataTree:
    """Fit the CRF model by ``method`` and return an ArviZ ``DataTree``.

    Parameters
    ----------
    model : pm.Model, optional
        The model; taken from the ``with`` context when omitted.
    method : str
        A registered fitter: ``"map"``, ``"nuts"``, ``"ep"``, ``"predictive_ard"``,
        ``"bethe_laplace"``, ``"laplace"``, ``"randomized_map"``, ``"bp_hcrf_vi"``,
        ``"bethe_mh"``, ``"langevin_cd"``, ``"exchange"`` (see :func:`available`).
    **options
        Passed to the fitter (see each fitter's docstring).

    Returns
    -------
    xarray.DataTree
        Groups ``posterior``, ``log_likelihood`` (one value per graph, per row for a
        ``pmc.MRF``; left out with ``log_likelihood=False``), ``observed_data``,
        ``constant_data`` (when the model has constant data, e.g. ``pm.Data``), and
        method-specific ones (``fit``, ``optimizer_result``, ``diagnostics``, ``sample_stats``);
        attrs ``method``, ``settings`` and ``wall_time``.
    """
    model = pm.modelcontext(model)
    load_builtin()
    if method not in _FITTERS:
        raise ValueError(f"unknown method {method!r}; available: {sorted(_FITTERS)}")
    fitter = _FITTERS[method]
    check_options(fitter, options, f"method={method!r}")  # a **kwargs fitter checks its own
    if "log_likelihood" in options:  # before the fit: "False" would be read as true after it
        flag(options["log_likelihood"], f"method={method!r}: log_likelihood")
    if "progressbar" in options:  # "no" would show the bars
        progress_flag(options["progressbar"], f"method={method!r}: progressbar")
    # the seed before the fit: some fitters draw from it only late or on some paths; the elements
    # of a per-chain list one by one (generator takes [1, True] as one sequence)
    seed = options.get("random_seed")
    for s in seed if isinstance(seed, list | tuple) else [seed]:
        generator(s, f"method={method!r}: random_seed")
    if not model.free_RVs:
        # PyMC's backends fail on such a model with an IndexError or a SamplingError
        what = ("the model is empty" if not model.named_vars else
                f"the model has no free variables (it has {list(model.named_vars)})")
        raise ValueError(f"pmc.fit(method={method!r}): {what}, so there is nothing to fit: give "
                         "the weights a prior (e.g. pm.Normal('w', 0, 1, shape=...)) instead of "
                         "fixed values")
    with fitting(method):  # refusals deep in the fitter name this method
        return fitter(model, **options)
