"""``method="bethe_mh" | "langevin_cd" | "exchange"``: ``pm.sample`` with a random-field step method
(:mod:`pymc_crf.step_methods`) on the weights (any other free variables get PyMC's default steps,
e.g. NUTS, in a compound step), returning the fit contract's DataTree: ``posterior``,
``sample_stats`` (the step's statistics), the per-graph ``log_likelihood``, ``observed_data``.

Options of every sampler fitter: ``draws``, ``tune``, ``chains``, ``cores``, ``random_seed``,
``progressbar``, ``initvals`` (as ``pm.sample``), ``log_likelihood`` (as every fitter), and

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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pymc as pm
from pymc.sampling.mcmc import _cpu_count
from xarray import DataTree

import pymc_crf.step_methods as step_methods
from pymc_crf.docstrings import fill_doc
from pymc_crf.fitters.laplace_proposal import LaplaceInit, laplace_init
from pymc_crf.fitters.registry import register
from pymc_crf.inference.base import warn_at_caller
from pymc_crf.model.options import check_step_options
from pymc_crf.model.results import build_result
from pymc_crf.step_methods.field import RandomFieldTerm
from pymc_crf.validation import check_initvals, generator, whole_number

if TYPE_CHECKING:
    from pymc.util import RandomGenerator

__all__ = ["fit_bethe_mh", "fit_exchange", "fit_langevin_cd"]


_AUTO = ("auto", "laplace")
_FITTER_OPTIONS = ("draws", "tune", "chains", "cores", "random_seed", "progressbar", "initvals",
                   "S", "start", "log_likelihood")

# the options and results of the three sampler fitters, worded once (``fill_doc``)
_SAMPLER_DOCS = {
    "sampler_parameters": """
        model : pm.Model
            A model with a ``pmc.CRF`` or ``pmc.MRF`` likelihood, every label observed
            (``pm.Data`` included) and free, untransformed, distinct weight variables; the step
            method samples the weights, any other free variables get PyMC's default steps (e.g.
            NUTS) in a compound step.
        draws : int, default 1000
            Draws per chain (``pm.sample``'s).
        tune : int or None, default 1000
            Tuning steps per chain (``pm.sample``'s); None: ``pm.sample``'s default.
        chains : int or None, default 2
            Number of chains; None: ``pm.sample``'s default (``max(2, cores)``).
        cores : int or None, default 1
            Chains run in parallel (``pm.sample``'s).
        random_seed : int, sequence of int, Generator or None, default None
            As ``pm.sample``; the Laplace starts are drawn from it (from its first seed when it
            is a per-chain sequence).
        progressbar : bool, default True
            As ``pm.sample``.
        log_likelihood : bool, default True
            Add the per-graph (per-row for ``pmc.MRF``) ``log_likelihood`` group.
        initvals : dict or sequence of dict, optional
            As ``pm.sample`` (one start, or one per chain); it overrides ``start``.
        S : {"auto", "laplace"}, ndarray or None, default "auto"
            The starting proposal of the step (its ``S``). ``"auto"`` is the Bethe-Laplace
            posterior covariance (BL-BP: MAP by BP gradients, linear-response covariance;
            Welling & Parise 2006, eq. (7)) wherever that approximation applies (fixed Normal
            weight priors, nothing else free or observed), and unit standard deviations
            otherwise (with a warning); ``"laplace"`` insists on it; an array or None is passed
            on.
        start : {"auto", "laplace"} or None, default "auto"
            ``"laplace"`` starts each chain at its own draw from that Bethe-Laplace Gaussian
            (near the MAP, apart from the other chains), ``"auto"`` does so whenever the
            Laplace fit is available, None starts at the model's initial point; ``initvals``
            overrides it.""",
    "sampler_result": """
        The fit contract's result: ``posterior``, ``sample_stats`` (the step's statistics),
        the per-graph ``log_likelihood`` (unless ``log_likelihood=False``), ``observed_data``;
        ``attrs["settings"]`` records ``draws``, ``tune``, ``chains``, ``cores`` and the step
        options that are numbers, strings or booleans; ``attrs["proposal"]`` (``"laplace"``, ``"unit"`` or
        ``"user"``) and ``attrs["start"]`` (``"laplace"``, ``"initvals"`` or
        ``"initial_point"``) say what was used. The Laplace fit's time is part of
        ``wall_time``.""",
    "sampler_raises": """
        Raises
        ------
        TypeError
            When a keyword is neither an option of the fitter nor of its step method.
        ValueError
            When ``S`` or ``start`` is a string other than ``"auto"`` or ``"laplace"``, when
            ``start`` is neither such a string nor None (starting values are ``initvals``), when
            one of them is ``"laplace"`` and the Bethe-Laplace fit does not apply, or when the
            model is not one the step method samples.""",
    # Returns and Raises of the fitters that return nothing more
    "sampler_sections": """
        Returns
        -------
        xarray.DataTree
            %(sampler_result)s

        %(sampler_raises)s""",
}
_sampler_doc = fill_doc(_SAMPLER_DOCS)


def _laplace(field: RandomFieldTerm, S, start) -> LaplaceInit | None:
    """The Bethe-Laplace fit of the random field ``field`` read when ``S`` or ``start`` asks for
    it (None where ``"auto"`` finds it does not apply; an error where ``"laplace"`` insists)."""
    if start is not None and not isinstance(start, str):
        # any other value (a dict of starting values, as method="map" takes) would be read as
        # "auto" and the chains would start at the Laplace draws instead
        raise ValueError(f"start takes 'auto', 'laplace' or None; got {type(start).__name__} "
                         f"{start!r}: give starting values as initvals= (one dict, or one per "
                         "chain)")
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
                 step_kwargs: dict, log_likelihood: bool = True) -> DataTree:
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
    check_initvals(model, initvals, f"method={method!r}")
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
            if chains is None:
                # one start per chain, so the number pm.sample would choose: max(2, cores),
                # cores defaulting to min(4, CPUs)
                chains = max(2, cores if cores is not None else min(4, _cpu_count()))
            initvals, starting = init.starts(chains, rng), "laplace"
        else:
            starting = "initial_point"
    with model:
        step = step_cls(S=S, spec=field.spec, **step_kwargs)
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=cores, step=step,
                          random_seed=random_seed, progressbar=progressbar, initvals=initvals,
                          compute_convergence_checks=False)
    # numpy scalars (np.int64(2), np.float32(0.3)) as their Python values, which JSON takes
    plain = {k: v.item() if isinstance(v, np.generic) else v for k, v in step_kwargs.items()}
    settings = {"draws": draws, "tune": tune, "chains": chains, "cores": cores,
                **{k: v for k, v in plain.items() if isinstance(v, int | float | str | bool)}}
    attrs = {"proposal": proposal, "start": starting}
    if isinstance(step, step_methods.Exchange):
        attrs["exact_auxiliary"] = int(step.exact_auxiliary)
    return build_result(model, idata, method, settings, time.perf_counter() - t0, attrs=attrs,
                        log_likelihood=log_likelihood, spec=field.spec)


@register("bethe_mh")
@_sampler_doc
def fit_bethe_mh(model: pm.Model, *, draws: int = 1000, tune: int | None = 1000,
                 chains: int | None = 2, cores: int | None = 1,
                 random_seed: RandomGenerator = None, progressbar: bool = True,
                 log_likelihood: bool = True,
                 initvals: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
                 S: str | np.ndarray | None = "auto", start: str | None = "auto",
                 **step_kwargs: Any) -> DataTree:
    """MC-BP: Metropolis-Hastings with Bethe log Z (:class:`~pymc_crf.step_methods.BetheMH`).

    ``S`` and ``start`` as the module says; ``step_kwargs`` go to the step: ``scaling``,
    ``damping``, ``tol``, ...

    Parameters
    ----------
    %(sampler_parameters)s
    **step_kwargs
        Options of :class:`~pymc_crf.step_methods.BetheMH`: ``scaling``, ``target_accept``,
        ``adapt_window``, ``damping``, ``tol``, ``max_iter``, ``schedule``,
        ``compile_kwargs``.

    %(sampler_sections)s
    """
    return _sample_with("BetheMH", "bethe_mh", model, draws, tune, chains, cores, random_seed,
                        progressbar, initvals, S, start, step_kwargs, log_likelihood)


@register("langevin_cd")
@_sampler_doc
def fit_langevin_cd(model: pm.Model, *, draws: int = 1000, tune: int | None = 1000,
                    chains: int | None = 2, cores: int | None = 1,
                    random_seed: RandomGenerator = None, progressbar: bool = True,
                    log_likelihood: bool = True,
                    initvals: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
                    S: str | np.ndarray | None = "auto", start: str | None = "auto",
                    **step_kwargs: Any) -> DataTree:
    """LV-CD: brief Langevin with contrastive-divergence gradients.

    The step is :class:`~pymc_crf.step_methods.LangevinCD`; ``step_kwargs``: ``cd_steps``,
    ``step_size``.

    Parameters
    ----------
    %(sampler_parameters)s
    **step_kwargs
        Options of :class:`~pymc_crf.step_methods.LangevinCD`: ``cd_steps``, ``step_size``,
        ``target_accept``, ``adapt_window``, ``max_energy_error``, ``compile_kwargs``.

    %(sampler_sections)s
    """
    return _sample_with("LangevinCD", "langevin_cd", model, draws, tune, chains, cores, random_seed,
                        progressbar, initvals, S, start, step_kwargs, log_likelihood)


@register("exchange")
@_sampler_doc
def fit_exchange(model: pm.Model, *, draws: int = 1000, tune: int | None = 1000,
                 chains: int | None = 2, cores: int | None = 1,
                 random_seed: RandomGenerator = None, progressbar: bool = True,
                 log_likelihood: bool = True,
                 initvals: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
                 S: str | np.ndarray | None = "auto", start: str | None = "auto",
                 **step_kwargs: Any) -> DataTree:
    """The exchange algorithm (:class:`~pymc_crf.step_methods.Exchange`).

    ``step_kwargs``: ``sampler``, ``aux_sweeps``, ``scaling``; ``attrs["exact_auxiliary"]``
    says whether the auxiliary draws were exact.

    Parameters
    ----------
    %(sampler_parameters)s
    **step_kwargs
        Options of :class:`~pymc_crf.step_methods.Exchange`: ``sampler``, ``aux_sweeps``,
        ``scaling``, ``target_accept``, ``adapt_window``, ``max_treewidth``,
        ``compile_kwargs``.

    Returns
    -------
    xarray.DataTree
        %(sampler_result)s
        ``attrs["exact_auxiliary"]`` (0 or 1) says whether the auxiliary draws were exact.

    %(sampler_raises)s
    """
    return _sample_with("Exchange", "exchange", model, draws, tune, chains, cores, random_seed,
                        progressbar, initvals, S, start, step_kwargs, log_likelihood)
