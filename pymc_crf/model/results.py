"""Building the ArviZ ``DataTree`` every fitter returns (the contract of ``docs/fit_contract.md``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import arviz as az
import numpy as np
import pymc as pm
import xarray as xr
from pymc.backends.arviz import (
    coords_and_dims_for_inferencedata,
    dict_to_dataset,
    find_constants,
    find_observations,
)

from pymc_crf.model.predictors import HCRF_WEIGHTS, crf_attrs, hcrf_layout
from pymc_crf.model.random_field import (
    MRFSpec,
    extract_mrf,
    random_field_pointwise_log_likelihood,
)
from pymc_crf.model.spec import CRFSpec, extract_crf, prior_fingerprint

__all__ = ["attach_log_likelihood", "build_result", "draws_from_gaussian", "gaussian_fit_group", "json_text",
           "record_crf_layout"]


def _record_hcrf_layout(idata: xr.DataTree, model: pm.Model) -> None:
    """The posterior names of the HCRF's three weights (``hcrf_weights``) or, when some weight is
    a constant or an unnamed expression, where each is (``hcrf_layout``, :func:`hcrf_layout`)."""
    try:
        layout = hcrf_layout(model)
    except ValueError:
        return
    names = [layout[k] for k in HCRF_WEIGHTS]
    if all(names) and all(n in idata["posterior"] for n in names):
        idata.attrs["hcrf_weights"] = names
    else:
        idata.attrs["hcrf_layout"] = json.dumps(layout)


def _record_mrf_log_z(idata: xr.DataTree, model: pm.Model) -> None:
    try:
        spec = extract_mrf(model)
    except ValueError:
        return
    info = spec.info
    idata.attrs["log_z"] = "exact" if info.exact else f"approximate ({info.engine_name})"
    idata.attrs["weight_prior"] = prior_fingerprint(spec)


def record_crf_layout(idata: xr.DataTree, model: pm.Model,
                      spec: CRFSpec | MRFSpec | None = None) -> None:
    """Store how the weights map to potentials (``attrs["crf"]``) so ``predict`` needs no model,
    and the digest of the weights' priors (``attrs["weight_prior"]``, :func:`~pymc_crf.model.
    spec.prior_fingerprint`) so that consumers given the model beside the result can check it.

    ``spec``: the model's random field as the fitter read it (else it is read here)."""
    if isinstance(spec, MRFSpec):
        idata.attrs["log_z"] = ("exact" if spec.info.exact
                                else f"approximate ({spec.info.engine_name})")
        idata.attrs["weight_prior"] = prior_fingerprint(spec)
        return
    if spec is None:
        try:
            spec = extract_crf(model)
        except ValueError:  # not a CRF model: an HCRF records the names of its three weights
            _record_hcrf_layout(idata, model)
            _record_mrf_log_z(idata, model)
            return
    idata.attrs["crf"] = crf_attrs(spec)
    idata.attrs["weight_prior"] = prior_fingerprint(spec)
    # Bethe / loopy-BP likelihoods make the whole posterior approximate: say so on the result.
    idata.attrs["log_z"] = "exact" if spec.exact else f"approximate ({spec.info.engine_name})"


def attach_log_likelihood(idata: xr.DataTree, model: pm.Model,
                          pointwise: Mapping[str, np.ndarray] | None = None,
                          spec: CRFSpec | MRFSpec | None = None) -> None:
    """Add the pointwise (per graph; per row for an MRF) ``log_likelihood`` group to ``idata``.

    ``pointwise`` ({observed name: (chains, draws, graphs)}) when the caller has it; else from the
    engine when the model is a CRF or MRF whose weights are free variables (nothing to compile); else
    ``pm.compute_log_likelihood``. Dims and coords are the observed variable's, as PyMC sets them.
    ``spec``: the model's random field as the fitter read it (else it is read here).
    """
    if pointwise is None:
        pointwise = random_field_pointwise_log_likelihood(model, idata["posterior"], spec)
    if pointwise is None:
        # PyMC's model-to-graph conversion refuses models with initvals, which only say where
        # a fit starts: the log-likelihood of draws does not depend on them
        saved = dict(model.rvs_to_initial_values)
        try:
            model.rvs_to_initial_values.update(dict.fromkeys(saved))
            pm.compute_log_likelihood(idata, model=model, progressbar=False)
        finally:
            model.rvs_to_initial_values.update(saved)
        return
    coords, dims = coords_and_dims_for_inferencedata(model)
    idata["log_likelihood"] = dict_to_dataset(
        {k: np.asarray(v) for k, v in pointwise.items()}, inference_library=pm, coords=coords,
        dims=dims, skip_event_dims=True)


def json_text(value: Any, other: Callable[[Any], Any] | None = None) -> str:
    """``value`` as JSON text, numpy scalars and arrays at any depth as their Python values
    (a grid search over ``np.arange`` sets numpy integers as options); any other object through
    ``other`` (``repr`` for a result's settings), a TypeError without it."""
    def plain(obj):
        if isinstance(obj, np.generic | np.ndarray):
            return obj.tolist()
        if other is not None:
            return other(obj)
        raise TypeError(f"{type(obj).__name__} is not JSON serialisable")

    return json.dumps(value, default=plain)


def gaussian_fit_group(mean_vector: np.ndarray, covariance_matrix: np.ndarray,
                       names: Sequence[str]) -> xr.Dataset:
    """The ``fit`` group of a Gaussian approximation, labelled by parameter names (as pymc-extras)."""
    names = list(names)
    return xr.Dataset(
        {"mean_vector": (("rows",), np.asarray(mean_vector)),
         "covariance_matrix": (("rows", "columns"), np.asarray(covariance_matrix))},
        coords={"rows": names, "columns": names})


def draws_from_gaussian(mean: np.ndarray, cov: np.ndarray, n_draws: int, n_chains: int,
                        rng: np.random.Generator) -> np.ndarray:
    """(chains, draws, d) draws from N(mean, cov): by the Cholesky factor, or by an
    eigendecomposition where ``cov`` is only semi-definite (a constant direction)."""
    sym = 0.5 * (cov + cov.T)
    try:
        root = np.linalg.cholesky(sym)
    except np.linalg.LinAlgError:
        vals, vecs = np.linalg.eigh(sym)
        root = vecs * np.sqrt(np.clip(vals, 0.0, None))
    z = rng.standard_normal((n_chains, n_draws, mean.size))
    return mean + z @ root.T


def _dataset(values: Mapping[str, Any], dim: str) -> xr.Dataset:
    out = {}
    for k, v in values.items():
        a = np.asarray(v)
        out[k] = ((dim,) if a.ndim == 1 else (() if a.ndim == 0 else
                  (dim, *[f"{k}_dim_{i}" for i in range(a.ndim - 1)])), a)
    return xr.Dataset(out)


def build_result(model: pm.Model, draws: Mapping[str, np.ndarray] | xr.DataTree, method: str,
                 settings: Mapping[str, Any], wall_time: float, *,
                 mean_vector: np.ndarray | None = None,
                 covariance_matrix: np.ndarray | None = None,
                 param_names: Sequence[str] | None = None,
                 diagnostics: Mapping[str, Any] | None = None,
                 diagnostics_group: str = "diagnostics",
                 log_marginal_likelihood: float | None = None,
                 sample_stats: Mapping[str, np.ndarray] | None = None,
                 log_likelihood: bool = True,
                 pointwise_log_likelihood: Mapping[str, np.ndarray] | None = None,
                 extra_groups: Mapping[str, xr.Dataset] | None = None,
                 attrs: Mapping[str, Any] | None = None,
                 spec: CRFSpec | MRFSpec | None = None) -> xr.DataTree:
    """Assemble a fitter's result.

    Parameters
    ----------
    model : pm.Model
    draws : dict name -> array (chains, draws, *shape), or DataTree
        Posterior draws of every free variable of the model (constrained space); or the
        ``DataTree`` ``pm.sample`` returned, whose groups (``posterior``, ``sample_stats``,
        ``observed_data``, warm-up groups ...) are kept as PyMC made them and completed here.
    method, settings, wall_time
        Stored as attrs (``settings`` as JSON).
    mean_vector, covariance_matrix, param_names
        For Gaussian approximations: the ``fit`` group.
    diagnostics : dict, optional
        Method-specific diagnostics; 1-d arrays get an ``iteration`` dimension.
    diagnostics_group : str
        Name of that group (``"optimizer_result"`` for MAP).
    log_marginal_likelihood : float, optional
        Evidence estimate, stored once, as ``attrs["log_marginal_likelihood"]`` (the place
        ``pmc.compare`` and every other reader takes it from).
    sample_stats : dict, optional
        Extra per-draw statistics (chains, draws).
    log_likelihood : bool
        Compute the pointwise (per graph) log-likelihood of the draws: from the engine for a CRF
        or MRF model whose weights are free variables
        (``random_field.random_field_pointwise_log_likelihood``, nothing to compile), else
        with ``pm.compute_log_likelihood``; unless ``pointwise_log_likelihood`` gives it.
    pointwise_log_likelihood : dict name -> array (chains, draws, graphs), optional
        The pointwise log-likelihood already computed by the fitter (e.g. from the engine);
        stored with the observed variable's dims, as ``pm.compute_log_likelihood`` would.
    extra_groups : dict, optional
        Further groups to attach as they are.
    attrs : dict, optional
        Further attrs of the method (e.g. the samplers' ``proposal`` and ``start``).
    spec : CRFSpec or MRFSpec, optional
        The model's random field as the fitter read it, for the layout attrs and the pointwise
        log-likelihood, so the model is read once per fit (read here when omitted).
    """
    if isinstance(draws, xr.DataTree):
        if sample_stats:
            raise ValueError("build_result: a pm.sample DataTree brings its own sample_stats; "
                             "sample_stats= is for draws given as arrays")
        idata = draws
    else:
        idata = _from_draws(model, draws, sample_stats)
    if log_likelihood or pointwise_log_likelihood is not None:
        attach_log_likelihood(idata, model, pointwise_log_likelihood, spec)
    if mean_vector is not None and covariance_matrix is not None:
        idata["fit"] = gaussian_fit_group(mean_vector, covariance_matrix, param_names or
                                          [f"w[{i}]" for i in range(len(mean_vector))])
    if diagnostics:
        idata[diagnostics_group] = _dataset(diagnostics, "iteration")
    for name, ds in (extra_groups or {}).items():
        idata[name] = ds
    idata.attrs.update({"method": method, "settings": json_text(dict(settings), repr),
                        "wall_time": float(wall_time), **(attrs or {})})
    record_crf_layout(idata, model, spec)
    if log_marginal_likelihood is not None:
        idata.attrs["log_marginal_likelihood"] = float(log_marginal_likelihood)
    return idata


def _from_draws(model: pm.Model, draws: Mapping[str, np.ndarray],
                sample_stats: Mapping[str, np.ndarray] | None) -> xr.DataTree:
    """The ``posterior``, ``observed_data``, ``constant_data`` and ``sample_stats`` groups of
    draws given as arrays, with the model's dims and coords."""
    coords, dims = coords_and_dims_for_inferencedata(model)
    groups: dict[str, dict] = {"posterior": {k: np.asarray(v) for k, v in draws.items()},
                               "observed_data": find_observations(model)}
    constants = find_constants(model)
    if constants:
        groups["constant_data"] = constants
    if sample_stats:
        groups["sample_stats"] = dict(sample_stats)
    return az.from_dict(groups, coords=coords, dims=dims)
