"""``method="nuts"``: a thin call of ``pm.sample`` (NUTS on the exact posterior)."""

from __future__ import annotations

import difflib
import inspect
import time
from typing import TYPE_CHECKING, Any

import pymc as pm

from pymc_crf.fitters.registry import register
from pymc_crf.model.options import RENAMED
from pymc_crf.model.random_field import find_random_field
from pymc_crf.model.results import build_result
from pymc_crf.validation import check_initvals, flag, real_number, whole_number

if TYPE_CHECKING:
    from pymc.util import RandomState
    from xarray import DataTree

__all__ = ["fit_nuts"]


@register("nuts")
def fit_nuts(model: pm.Model, *, draws: int = 1000, tune: int | None = 1000,
             chains: int | None = 2, random_seed: RandomState = None, progressbar: bool = True,
             log_likelihood: bool = True, **sample_kwargs: Any) -> DataTree:
    """NUTS via ``pm.sample`` (nutpie when installed, as PyMC's default), plus the per-graph
    log-likelihood, and attrs ``method``/``wall_time`` like every other fitter.

    ``log_likelihood``: add the per-graph ``log_likelihood`` group (the option every fitter
    takes; not ``pm.sample``'s). ``progressbar`` is ``pm.sample``'s (its own bar, or nutpie's;
    ``False`` silences it); ``cores`` is ``pm.sample``'s too, whose default is half the CPU count
    (one chain at a time on a 2-core machine: pass ``cores=2`` there); the other
    keyword arguments go to ``pm.sample`` too. A keyword that is none of ``pm.sample``'s own but
    close to one (``drawz=``) is taken for a typo and refused: ``pm.sample`` would hand it to the
    step method or nutpie, whose errors do not name the intended option.

    Parameters
    ----------
    model : pm.Model
        Any PyMC model; the observed labels of its random fields are checked before sampling.
    draws : int, default 1000
        Draws per chain (``pm.sample``'s).
    tune : int or None, default 1000
        Tuning steps per chain; None: ``pm.sample``'s default.
    chains : int or None, default 2
        Number of chains; None: ``pm.sample``'s default (``max(2, cores)``).
    random_seed : int, sequence of int, Generator or None, default None
        As ``pm.sample``.
    progressbar : bool, default True
        ``pm.sample``'s (its own bar, or nutpie's; ``False`` silences it).
    log_likelihood : bool, default True
        Add the per-graph ``log_likelihood`` group (the option every fitter takes; not
        ``pm.sample``'s).
    **sample_kwargs
        Further ``pm.sample`` keyword arguments (``cores``, ``target_accept``, ``nuts``,
        ``nuts_sampler``, ...); ``cores`` defaults to half the CPU count there.

    Returns
    -------
    xarray.DataTree
        ``pm.sample``'s groups (``posterior``, ``sample_stats``, ``observed_data``, ...) with
        the per-graph ``log_likelihood``; attrs ``method`` (``"nuts"``), ``settings``
        (``draws``, ``tune``, ``chains``) and ``wall_time``.

    Raises
    ------
    ValueError
        When a keyword is a known other name of a ``pm.sample`` option or close to one of them
        (a typo), when ``draws``, ``tune``, ``chains`` or ``cores`` is not a whole number (at
        least 1; ``tune`` at least 0), or when ``target_accept`` (or ``nuts["target_accept"]``)
        is outside (0, 1).
    """
    t0 = time.perf_counter()
    _refuse_typos(sample_kwargs)
    log_likelihood = flag(log_likelihood, "method='nuts': log_likelihood")
    # checked here: PyMC and nutpie fail on these with errors that do not name them (chains=0
    # a ZeroDivisionError) or run with them (target_accept=1.5)
    draws = whole_number(draws, "method='nuts': draws")
    # None: pm.sample's own defaults (tuning steps; max(2, cores) chains)
    if tune is not None:
        tune = whole_number(tune, "method='nuts': tune", minimum=0)
    if chains is not None:
        chains = whole_number(chains, "method='nuts': chains")
    if sample_kwargs.get("cores") is not None:
        whole_number(sample_kwargs["cores"], "method='nuts': cores")
    nuts_kwargs = sample_kwargs.get("nuts")
    for where, value in (("target_accept", sample_kwargs.get("target_accept")),
                         ("nuts['target_accept']", nuts_kwargs.get("target_accept")
                          if isinstance(nuts_kwargs, dict) else None)):
        if value is not None:
            ta = real_number(value, f"method='nuts': {where}")
            if not 0.0 < ta < 1.0:
                raise ValueError(f"method='nuts': {where} must lie in (0, 1); got {ta}")
    check_initvals(model, sample_kwargs.get("initvals"), "method='nuts'")
    field = find_random_field(model)  # read once (labels checked), for the result's layout
    with model:
        idata = pm.sample(draws=draws, tune=tune, chains=chains, random_seed=random_seed,
                          progressbar=progressbar, **sample_kwargs)
    settings = {"draws": draws, "tune": tune, "chains": chains}
    return build_result(model, idata, "nuts", settings, time.perf_counter() - t0, spec=field,
                        log_likelihood=log_likelihood)


def _refuse_typos(sample_kwargs: dict) -> None:
    """Names other tools use for pm.sample's options (``RENAMED``) and near-typos of them, which
    pm.sample would pass on to its step methods, which ignore them."""
    known = [p for p in inspect.signature(pm.sample).parameters if p != "kwargs"]
    for key in sample_kwargs:
        if key in known:
            continue
        if key in RENAMED:
            raise ValueError(f"method='nuts' takes pm.sample's {RENAMED[key]!r}, not {key!r}")
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
        if close:
            raise ValueError(f"method='nuts' has no option {key!r}; did you mean {close[0]!r}? "
                             "(the options are pm.sample's, and step-method settings such as "
                             "target_accept)")
