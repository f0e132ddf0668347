"""Reading a CRF model back out of a PyMC model, for fitters that work on the weights directly.

Everything comes from the CRF variable's own node (its Op's settings and its inputs: features and
weight tensors) and from the model's ``rvs_to_values``, so a model rebuilt by ``pm.do``,
``pm.observe`` or ``pymc.model.fgraph.clone_model`` reads back like the original.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pymc as pm
from pytensor.graph.traversal import ancestors
from pytensor.scalar import Cast
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.random.basic import NormalRV
from pytensor.tensor.random.op import RandomVariable

from pymc_crf.distributions.crf import CRFRV, CRFInfo, refuse_inf_labels, unpad_labels
from pymc_crf.distributions.hcrf import HCRFRV, find_hcrf
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.validation import refusal

__all__ = ["CRFSpec", "WeightSpec", "check_observed_labels", "extract_crf", "observed_labels", "observes",
           "other_model_terms", "require_all_labels", "require_gaussian_prior",
           "require_sole_likelihood", "single_observed"]


@dataclass(frozen=True)
class WeightSpec:
    """One weight tensor of the CRF: its PyMC variable and prior.

    ``prior`` is ``"normal"`` when the tensor is a free ``pm.Normal`` with constant mu and sigma
    (then ``prior_mean`` / ``prior_sd`` are arrays of the weight's shape), else ``"other"``.
    """

    name: str | None
    shape: tuple[int, ...]
    dims: tuple[str, ...] | None
    prior: str
    prior_mean: np.ndarray | None = None
    prior_sd: np.ndarray | None = None
    reason: str = ""

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


@dataclass(frozen=True)
class CRFSpec:
    """Everything a weight-space fitter needs about one CRF likelihood in a model.

    The flat weight vector is ``concat(node_weights.ravel(), edge_weights.ravel())``.
    """

    model: pm.Model
    observed_name: str
    batch: GraphBatch
    labels: np.ndarray
    n_labels: int
    potential: str
    epsilon: float
    node_features: np.ndarray | None
    edge_features: np.ndarray | None
    node_weights: WeightSpec | None
    edge_weights: WeightSpec | None
    free_vars: tuple[str, ...]
    info: CRFInfo = field(repr=False)

    @property
    def engine(self):
        """The inference engine of the model's CRF variable."""
        return self.model[self.observed_name].owner.op.engine

    @property
    def exact(self) -> bool:
        """Whether the engine computes log Z exactly."""
        return bool(self.info.exact)

    @property
    def weights(self) -> list[WeightSpec]:
        return [w for w in (self.node_weights, self.edge_weights) if w is not None]

    @property
    def flat_size(self) -> int:
        return sum(w.size for w in self.weights)

    @property
    def shared_edge_table(self) -> bool:
        """True when the edge weights are one (K, K) table shared by all edges."""
        return self.edge_weights is not None and self.edge_features is None

    def unflatten(self, w_flat: np.ndarray) -> dict[str, np.ndarray]:
        """Split a flat weight vector (..., d) into named arrays of the weights' shapes."""
        w_flat = np.asarray(w_flat)
        out, i = {}, 0
        for w in self.weights:
            out[w.name] = w_flat[..., i:i + w.size].reshape(*w_flat.shape[:-1], *w.shape)
            i += w.size
        return out

    def flatten(self, values: dict[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(values[w.name]).reshape(-1) for w in self.weights])

    def param_names(self) -> list[str]:
        """``"W[0, 1]"``-style names of the flat weight entries, in flat order."""
        names = []
        for w in self.weights:
            names += [f"{w.name}[{', '.join(map(str, idx))}]" for idx in np.ndindex(*w.shape)]
        return names


def _weight_spec(model: pm.Model, tensor, role: str) -> WeightSpec | None:
    if tensor is None:
        return None
    shape = tuple(int(s) for s in tensor.shape.eval()) if tensor.type.shape.count(None) \
        else tuple(int(s) for s in tensor.type.shape)
    if tensor not in model.rvs_to_values or tensor in model.observed_RVs:
        return WeightSpec(None, shape, None, "other",
                          reason=f"{role} is a constant or an expression, not a free PyMC "
                                 "variable")
    dims = model.named_vars_to_dims.get(tensor.name)
    op = tensor.owner.op
    if not isinstance(op, NormalRV):
        return WeightSpec(tensor.name, shape, dims, "other",
                          reason=f"its prior is {type(op).__name__.removesuffix('RV')}, not Normal")
    mu, sigma = op.dist_params(tensor.owner)
    if any(v.owner is not None and isinstance(v.owner.op, RandomVariable)
           for v in ancestors([mu, sigma])):
        return WeightSpec(tensor.name, shape, dims, "other",
                          reason="its Normal prior's mu/sigma depend on other random variables")
    try:
        mu_v = np.broadcast_to(np.asarray(mu.eval(), dtype=np.float64), shape).copy()
        sd_v = np.broadcast_to(np.asarray(sigma.eval(), dtype=np.float64), shape).copy()
    except Exception:  # noqa: BLE001 - depends on other free variables (hierarchical)
        return WeightSpec(tensor.name, shape, dims, "other",
                          reason="its Normal prior's mu/sigma depend on other random variables")
    if model.rvs_to_transforms.get(tensor) is not None:
        return WeightSpec(tensor.name, shape, dims, "other", reason="it has a transform")
    # PyMC's own logp is -inf (or NaN) here; a fitter would return NaN or use another prior
    bad = ~(np.isfinite(mu_v) & np.isfinite(sd_v) & (sd_v > 0))
    if bad.any():
        i = int(np.flatnonzero(bad.ravel())[0])
        raise ValueError(f"{tensor.name!r}: a Normal prior needs a finite mu and a finite sigma "
                         f"> 0; entry {i} has mu={float(mu_v.flat[i])}, sigma={float(sd_v.flat[i])}")
    return WeightSpec(tensor.name, shape, dims, "normal", mu_v, sd_v)


def weight_specs(model: pm.Model, node_tensor, edge_tensor
                 ) -> tuple[WeightSpec | None, WeightSpec | None]:
    """The WeightSpecs of a random field's node and edge weight tensors. One variable given as
    both (tied weights) would fill two slots of the flat weight vector that weight-space fitters
    move independently: both are then marked ``"other"``, which those fitters refuse (NUTS and
    the compiled MAP take the model as written)."""
    nw = _weight_spec(model, node_tensor, "node_weights")
    ew = _weight_spec(model, edge_tensor, "edge_weights")
    if nw is not None and ew is not None and node_tensor is edge_tensor:
        reason = (f"the same variable {nw.name!r} is both the node and the edge weights (tied "
                  "weights), which a flat weight vector with one slot per tensor cannot express")
        nw = replace(nw, prior="other", reason=reason)
        ew = replace(ew, prior="other", reason=reason)
    return nw, ew


def observes(model: pm.Model, op_type: type) -> bool:
    """Whether ``model`` has an observed variable whose Op is an ``op_type``."""
    return any(isinstance(rv.owner.op, op_type) for rv in model.observed_RVs)


def single_observed(model: pm.Model, op_type: type, label: str):
    """The one observed variable of ``model`` whose Op is an ``op_type`` (``label`` names it in
    the one-line error raised when there is none or more than one)."""
    found = [rv for rv in model.observed_RVs if isinstance(rv.owner.op, op_type)]
    if not found:
        others = [f"{rv.name} ({type(rv.owner.op).__name__.removesuffix('RV')})"
                  for rv in model.observed_RVs]
        raise ValueError(refusal(f"a model with an observed {label} likelihood",
                                 f"this model observes {others or 'nothing'}"))
    if len(found) > 1:
        raise ValueError(refusal(f"a model with exactly one {label} likelihood",
                                 f"this model has {len(found)} ({[rv.name for rv in found]})"))
    return found[0]


def observed_labels(model: pm.Model, rv, info: CRFInfo | None = None) -> np.ndarray:
    """The observed labels (N,) of the CRF variable ``rv``, read from the model's data now and
    validated as the static path validates them (shape, the range 0..K-1); missing labels
    (-1 or NaN) are returned as -1.

    Labels given through ``pm.Data`` can change after the model is built, so every fitter reads
    them here, at fit time, and a bad label is a one-line ``ValueError`` naming its graph and node.
    """
    if info is None:
        info = rv.owner.op.info(rv.owner.op.dist_params(rv.owner))
    obs = model.rvs_to_values[rv]
    while obs.owner is not None and _is_cast(obs.owner.op):  # PyMC casts float data to int64
        obs = obs.owner.inputs[0]
    if hasattr(obs, "get_value"):  # pm.Data: a masked array where pm.set_data was given NaN
        padded = np.ma.filled(np.ma.asarray(obs.get_value()).astype(np.float64), np.nan)
    else:
        padded = np.asarray(obs.data if hasattr(obs, "data") else obs.eval())
    flat = unpad_labels(info.batch, padded)
    try:
        refuse_inf_labels(info.batch, flat)
    except ValueError as err:
        raise ValueError(f"observed labels of {rv.name!r}: {err}") from None
    # -1 and NaN mark missing labels (summed out of the likelihood); the rest must be in range
    missing = (np.isnan(flat) | (flat == -1)) if flat.dtype.kind == "f" else flat == -1
    try:
        labels = info.batch.check_labels(np.where(missing, 0, flat), info.n_labels)
    except ValueError as err:
        raise ValueError(f"observed labels of {rv.name!r}: {err}") from None
    return np.where(missing, -1, labels)


def _is_cast(op) -> bool:
    return isinstance(op, Elemwise) and isinstance(op.scalar_op, Cast)


def check_observed_labels(model: pm.Model) -> None:
    """Validate the observed labels of every ``pmc.CRF`` (:func:`observed_labels`) and
    ``pmc.HCRF`` in ``model``: for fitters that hand the model to a sampler, which would report a
    bad label as a failed initialisation."""
    for rv in model.observed_RVs:
        if isinstance(rv.owner.op, CRFRV):
            observed_labels(model, rv)
        elif isinstance(rv.owner.op, HCRFRV):
            find_hcrf(model)  # checks the class labels


def extract_crf(model: pm.Model | None = None) -> CRFSpec:
    """The single CRF likelihood of ``model`` and its weights (raises if there is none or several)."""
    model = pm.modelcontext(model)
    rv = single_observed(model, CRFRV, "pmc.CRF")
    op: CRFRV = rv.owner.op
    info: CRFInfo = op.info(op.dist_params(rv.owner))
    labels = observed_labels(model, rv, info)
    nw, ew = weight_specs(model, info.node_weights, info.edge_weights)
    weights = {info.node_weights, info.edge_weights}
    free = tuple(v.name for v in model.free_RVs if v not in weights)
    return CRFSpec(model, rv.name, info.batch, labels, info.n_labels, info.potential,
                   info.epsilon, info.node_features, info.edge_features, nw, ew, free, info)


def require_gaussian_prior(spec: CRFSpec, method: str) -> None:
    """Raise a clear error unless every weight has a fixed Normal prior and nothing else is free."""
    extra = (f"; this model also has free variables {list(spec.free_vars)}"
             if spec.free_vars else "")
    for w in spec.weights:
        if w.prior != "normal":
            raise ValueError(f"method={method!r} needs a fixed Gaussian prior on the CRF weights "
                             f"({w.name or 'weights'}): {w.reason}{extra}. Use method='nuts' or "
                             "'map' for other priors.")
    if spec.free_vars:
        raise ValueError(f"method={method!r} handles models whose only free variables are the CRF "
                         f"weights; this model also has {list(spec.free_vars)}. Use "
                         "method='nuts' or 'map' for such models.")


def other_model_terms(spec) -> str:
    """Why the random field of ``spec`` is not the model's whole likelihood ("" when it is): other
    observed variables or ``pm.Potential`` terms, which a fitter of the field's weights alone would
    leave out."""
    model = spec.model
    others = [rv.name for rv in model.observed_RVs if rv.name != spec.observed_name]
    if others:
        return f"this model also observes {others}"
    if model.potentials:
        return f"this model has pm.Potential terms {[p.name for p in model.potentials]}"
    return ""


def require_sole_likelihood(spec, method: str) -> None:
    """Raise a clear error unless the random field of ``spec`` is the model's only likelihood term
    (see :func:`other_model_terms`)."""
    reason = other_model_terms(spec)
    if reason:
        raise ValueError(f"method={method!r} approximates a model whose only likelihood is the "
                         f"random field; {reason}, which it would leave out. Use method='nuts' or "
                         "'map' for such models.")


def require_all_labels(spec, method: str) -> None:
    """Raise a clear error when the random field of ``spec`` has missing (masked / -1) labels,
    for fitters whose approximation needs every label observed."""
    n_missing = int((np.asarray(spec.labels) < 0).sum())
    if n_missing:
        raise ValueError(f"method={method!r} needs every label observed; this model has "
                         f"{n_missing} missing (masked / -1) labels. method='map' and 'nuts' sum "
                         "missing labels out of the likelihood.")
