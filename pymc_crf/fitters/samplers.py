"""``method="bethe_mh" | "langevin_cd" | "exchange"``: ``pm.sample`` with a random-field step method
(:mod:`pymc_crf.step_methods`) on the weights (any other free variables get PyMC's default steps,
e.g. NUTS, in a compound step), returning the fit contract's DataTree: ``posterior``,
``sample_stats`` (the step's statistics), the per-graph ``log_likelihood``, ``observed_data``.

Options of every sampler fitter: ``draws``, ``tune``, ``chains``, ``cores``, ``random_seed``,
``progressbar``, ``initvals`` (as ``pm.sample``: e.g. a mode from ``method="bethe_laplace"``, since a
random walk in many dimensions spends long on the way from the prior's centre to the posterior);
the remaining keyword arguments go to the step method."""

from __future__ import annotations

import json
import time

import pymc as pm
from xarray import DataTree

from pymc_crf.fitters.registry import register
from pymc_crf.fitters.results import attach_log_likelihood, record_crf_layout
from pymc_crf.fitters.spec import check_observed_labels
from pymc_crf.step_methods import BetheMH, Exchange, LangevinCD

__all__ = ["fit_bethe_mh", "fit_exchange", "fit_langevin_cd"]


def _sample_with(step_cls, method: str, model: pm.Model, draws: int, tune: int, chains: int,
                 cores: int, random_seed, progressbar: bool, initvals,
                 step_kwargs: dict) -> DataTree:
    t0 = time.perf_counter()
    check_observed_labels(model)
    with model:
        step = step_cls(**step_kwargs)
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=cores, step=step,
                          random_seed=random_seed, progressbar=progressbar, initvals=initvals,
                          compute_convergence_checks=False)
    attach_log_likelihood(idata, model)
    record_crf_layout(idata, model)
    settings = {"draws": draws, "tune": tune, "chains": chains, "cores": cores,
                **{k: v for k, v in step_kwargs.items() if isinstance(v, int | float | str | bool)}}
    idata.attrs.update({"method": method, "wall_time": time.perf_counter() - t0,
                        "settings": json.dumps(settings)})
    if isinstance(step, Exchange):
        idata.attrs["exact_auxiliary"] = int(step.exact_auxiliary)
    return idata


@register("bethe_mh")
def fit_bethe_mh(model: pm.Model, *, draws: int = 1000, tune: int = 1000, chains: int = 2,
                 cores: int = 1, random_seed=None, progressbar: bool = True, initvals=None,
                 **step_kwargs) -> DataTree:
    """MC-BP: Metropolis-Hastings with Bethe log Z (:class:`~pymc_crf.step_methods.BetheMH`;
    ``step_kwargs`` go to it: ``scaling``, ``damping``, ``tol``, ...)."""
    return _sample_with(BetheMH, "bethe_mh", model, draws, tune, chains, cores, random_seed,
                        progressbar, initvals, step_kwargs)


@register("langevin_cd")
def fit_langevin_cd(model: pm.Model, *, draws: int = 1000, tune: int = 1000, chains: int = 2,
                    cores: int = 1, random_seed=None, progressbar: bool = True, initvals=None,
                    **step_kwargs) -> DataTree:
    """LV-CD: brief Langevin with contrastive-divergence gradients
    (:class:`~pymc_crf.step_methods.LangevinCD`; ``step_kwargs``: ``cd_steps``, ``step_size``)."""
    return _sample_with(LangevinCD, "langevin_cd", model, draws, tune, chains, cores, random_seed,
                        progressbar, initvals, step_kwargs)


@register("exchange")
def fit_exchange(model: pm.Model, *, draws: int = 1000, tune: int = 1000, chains: int = 2,
                 cores: int = 1, random_seed=None, progressbar: bool = True, initvals=None,
                 **step_kwargs) -> DataTree:
    """The exchange algorithm (:class:`~pymc_crf.step_methods.Exchange`; ``step_kwargs``:
    ``sampler``, ``aux_sweeps``, ``scaling``); ``attrs["exact_auxiliary"]`` says whether the
    auxiliary draws were exact."""
    return _sample_with(Exchange, "exchange", model, draws, tune, chains, cores, random_seed,
                        progressbar, initvals, step_kwargs)
