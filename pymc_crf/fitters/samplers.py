"""``method="bethe_mh" | "langevin_cd" | "exchange"``: ``pm.sample`` with a random-field step method
(:mod:`pymc_crf.step_methods`) on the weights (any other free variables get PyMC's default steps,
e.g. NUTS, in a compound step), returning the fit contract's DataTree: ``posterior``,
``sample_stats`` (the step's statistics), the per-graph ``log_likelihood``, ``observed_data``.

Options of every sampler fitter: ``draws``, ``tune``, ``chains``, ``cores``, ``random_seed``,
``progressbar``, ``initvals`` (as ``pm.sample``), and

- ``S`` (default ``"auto"``): the starting proposal of the step (its ``S``). ``"auto"`` is the
  Bethe-Laplace posterior covariance (BL-BP: MAP by BP gradients, linear-response covariance;
  Welling & Parise 2006, eq. (7)) wherever that approximation applies (fixed Normal weight priors,
  nothing else free or observed), and unit standard deviations otherwise; ``"laplace"`` insists
  on it; an array or None is passed on.
- ``start`` (default ``"auto"``): ``"laplace"`` starts each chain at its own draw from that
  Bethe-Laplace Gaussian (near the MAP, apart from the other chains), ``"auto"`` does so whenever
  the Laplace fit is available, None starts at the model's initial point; ``initvals`` overrides
  it. A random walk in tens of dimensions from the prior's centre spends a long tuning phase on
  the way to the posterior.

The Laplace fit's time is part of ``wall_time``; ``attrs["proposal"]`` and ``attrs["start"]``
say what was used. The remaining keyword arguments go to the step method."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import pymc as pm
from xarray import DataTree

import pymc_crf.step_methods as step_methods
from pymc_crf.fitters.laplace_proposal import LaplaceInit, laplace_init
from pymc_crf.fitters.registry import register
from pymc_crf.inference.base import warn_at_caller
from pymc_crf.model.options import check_step_options
from pymc_crf.model.results import build_result
from pymc_crf.step_methods.field import RandomFieldTerm
from pymc_crf.validation import generator, whole_number

if TYPE_CHECKING:
    from pymc.util import RandomGenerator

__all__ = ["fit_bethe_mh", "fit_exchange", "fit_langevin_cd"]


_AUTO = ("auto", "laplace")
_FITTER_OPTIONS = ("draws", "tune", "chains", "cores", "random_seed", "progressbar", "initvals",
                   "S", "start")


def _laplace(field: RandomFieldTerm, S, start) -> LaplaceInit | None:
    """The Bethe-Laplace fit of the random field ``field`` read when ``S`` or ``start`` asks for
    it (None where ``"auto"`` finds it does not apply; an error where ``"laplace"`` insists)."""
    wanted = [o for o in (S, start) if isinstance(o, str)]
    for o in wanted:
        if o not in _AUTO:
            raise ValueError(f"S and start take 'auto', 'laplace' or an explicit value; got {o!r}")
    if not wanted:
        return None
    try:
        return laplace_init(field.model, spec=field.spec)
    except ValueError as err:
        if "laplace" in wanted:
            raise
        warn_at_caller(f"{err}; the samplers start from unit proposals at the model's initial "
                       "point", UserWarning)
        return None


def _sample_with(step_name: str, method: str, model: pm.Model, draws: int, tune: int, chains: int,
                 cores: int, random_seed, progressbar: bool, initvals, S, start,
                 step_kwargs: dict) -> DataTree:
    step_cls = getattr(step_methods, step_name)
    t0 = time.perf_counter()
    draws = whole_number(draws, f"{method}: draws")
    # None: pm.sample's own defaults (tuning steps; max(2, cores) chains)
    if tune is not None:
        tune = whole_number(tune, f"{method}: tune", minimum=0)
    if chains is not None:
        chains = whole_number(chains, f"{method}: chains")
    if cores is not None:
        cores = whole_number(cores, f"{method}: cores")
    # what the step needs (the random field and every label, pm.Data included; free,
    # untransformed, distinct weights) is checked before the Bethe-Laplace proposal, whose
    # failure would otherwise only be a warning; the model is read here once, for the proposal,
    # the step and the result
    check_step_options(step_cls, step_kwargs, f"method={method!r}", _FITTER_OPTIONS,
                       managed=("S", "spec", "model", "rng", "initial_point", "tune", "blocked"))
    field = RandomFieldTerm(model, method)
    init = _laplace(field, S, start)
    proposal = "user"
    if isinstance(S, str):
        S, proposal = (init.covariance, "laplace") if init is not None else (None, "unit")
    elif S is None:
        proposal = "unit"
    starting = "initvals"
    if initvals is None:
        if start is not None and init is not None:
            rng = generator(random_seed[0] if np.ndim(random_seed) > 0 else random_seed,
                            "random_seed")  # a per-chain sequence starts from its first seed
            initvals, starting = init.starts(chains, rng), "laplace"
        else:
            starting = "initial_point"
    with model:
        step = step_cls(S=S, spec=field.spec, **step_kwargs)
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=cores, step=step,
                          random_seed=random_seed, progressbar=progressbar, initvals=initvals,
                          compute_convergence_checks=False)
    settings = {"draws": draws, "tune": tune, "chains": chains, "cores": cores,
                **{k: v for k, v in step_kwargs.items() if isinstance(v, int | float | str | bool)}}
    attrs = {"proposal": proposal, "start": starting}
    if isinstance(step, step_methods.Exchange):
        attrs["exact_auxiliary"] = int(step.exact_auxiliary)
    return build_result(model, idata, method, settings, time.perf_counter() - t0, attrs=attrs,
                        spec=field.spec)


@register("bethe_mh")
def fit_bethe_mh(model: pm.Model, *, draws: int = 1000, tune: int = 1000, chains: int = 2,
                 cores: int = 1, random_seed: RandomGenerator = None, progressbar: bool = True,
                 initvals=None, S="auto", start="auto", **step_kwargs) -> DataTree:
    """MC-BP: Metropolis-Hastings with Bethe log Z (:class:`~pymc_crf.step_methods.BetheMH`;
    ``S`` and ``start`` as the module says; ``step_kwargs`` go to the step: ``scaling``,
    ``damping``, ``tol``, ...)."""
    return _sample_with("BetheMH", "bethe_mh", model, draws, tune, chains, cores, random_seed,
                        progressbar, initvals, S, start, step_kwargs)


@register("langevin_cd")
def fit_langevin_cd(model: pm.Model, *, draws: int = 1000, tune: int = 1000, chains: int = 2,
                    cores: int = 1, random_seed: RandomGenerator = None, progressbar: bool = True,
                    initvals=None, S="auto", start="auto", **step_kwargs) -> DataTree:
    """LV-CD: brief Langevin with contrastive-divergence gradients
    (:class:`~pymc_crf.step_methods.LangevinCD`; ``step_kwargs``: ``cd_steps``, ``step_size``)."""
    return _sample_with("LangevinCD", "langevin_cd", model, draws, tune, chains, cores, random_seed,
                        progressbar, initvals, S, start, step_kwargs)


@register("exchange")
def fit_exchange(model: pm.Model, *, draws: int = 1000, tune: int = 1000, chains: int = 2,
                 cores: int = 1, random_seed: RandomGenerator = None, progressbar: bool = True,
                 initvals=None, S="auto", start="auto", **step_kwargs) -> DataTree:
    """The exchange algorithm (:class:`~pymc_crf.step_methods.Exchange`; ``step_kwargs``:
    ``sampler``, ``aux_sweeps``, ``scaling``); ``attrs["exact_auxiliary"]`` says whether the
    auxiliary draws were exact."""
    return _sample_with("Exchange", "exchange", model, draws, tune, chains, cores, random_seed,
                        progressbar, initvals, S, start, step_kwargs)
