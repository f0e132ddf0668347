"""Reading a CRF model back out of a PyMC model, for fitters that work on the weights directly.

Everything comes from the CRF variable's own node (its Op's settings and its inputs: features and
weight tensors) and from the model's ``rvs_to_values``, so a model rebuilt by ``pm.do``,
``pm.observe`` or ``pymc.model.fgraph.clone_model`` reads back like the original.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.distributions.distribution import SymbolicRandomVariable
from pytensor.graph.replace import clone_replace
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import NormalRV
from pytensor.tensor.random.op import RandomVariable

from pymc_crf.distributions.crf import CRFRV, CRFInfo, is_cast, refuse_inf_labels, unpad_labels
from pymc_crf.distributions.hcrf import HCRFRV, find_hcrf
from pymc_crf.docstrings import fill_doc
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.validation import refusal

if TYPE_CHECKING:
    from pymc_crf.model.random_field import MRFSpec

__all__ = ["CRFSpec", "ScaleVariable", "WeightSpec", "check_observed_labels", "extract_crf",
           "free_scales", "observed_labels", "observes", "other_model_terms", "prior_fingerprint",
           "refuse_free_scales",
           "require_all_labels", "require_gaussian_prior", "require_learnable_scales",
           "require_sole_likelihood", "single_observed", "with_scales"]


# the parameter of the model readers (extract_crf, and extract_mrf / extract_random_field in
# random_field.py), worded once (``fill_doc``)
MODEL_DOCS = {
    "model_parameters": """
        Parameters
        ----------
        model : pm.Model, optional
            The model; default the model of the current context (``pm.modelcontext``).""",
}
model_doc = fill_doc(MODEL_DOCS)


@dataclass(frozen=True)
class WeightSpec:
    """One weight tensor of the CRF: its PyMC variable and prior.

    ``prior`` is ``"normal"`` when the tensor is a free ``pm.Normal`` with constant mu and sigma
    (then ``prior_mean`` / ``prior_sd`` are arrays of the weight's shape); ``"normal_scaled"`` when
    mu is constant and sigma is a free positive scale variable indexed by constants
    (``sigma = s``, ``s[idx]``, ``s[idx][:, None]``, ...): then ``prior_mean`` is set,
    ``scale_name`` names the scale variable and ``scale_index`` (int, the weight's shape) gives the
    entry of the flattened scale each weight uses; else ``"other"`` (``reason`` says why).

    Attributes
    ----------
    name : str or None
        The weight variable's name in the model.
    shape : tuple of int
        Its shape (``()`` for a 0-d weight).
    dims : tuple of str or None
        Its dims in the model, if it has any.
    prior : {"normal", "normal_scaled", "other"}
        The kind of prior, as above.
    prior_mean, prior_sd : ndarray or None
        The Normal prior's mean and sd, arrays of the weight's shape (``prior_sd`` is None for
        ``"normal_scaled"``, whose sd is the scale variable).
    reason : str
        Why the prior is ``"other"`` (empty otherwise).
    scale_name : str or None
        ``"normal_scaled"``: the free scale variable's name.
    scale_index : ndarray of int or None
        ``"normal_scaled"``: the entry of the flattened scale each weight uses.
    """

    name: str | None
    shape: tuple[int, ...]
    dims: tuple[str, ...] | None
    prior: str
    prior_mean: np.ndarray | None = None
    prior_sd: np.ndarray | None = None
    reason: str = ""
    scale_name: str | None = None
    scale_index: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


@dataclass(frozen=True)
class CRFSpec:
    """Everything a weight-space fitter needs about one CRF likelihood in a model.

    The flat weight vector is ``concat(node_weights.ravel(), edge_weights.ravel())``.

    Attributes
    ----------
    model : pm.Model
        The model it was read from.
    observed_name : str
        The name of the observed ``pmc.CRF`` variable.
    batch : GraphBatch
        Its graphs.
    labels : ndarray (N,) int
        The observed labels in the batch's node order, -1 where a label is missing.
    n_labels : int
        K, the number of labels.
    potential : {"loglinear", "probit"}
        The potential of the weights' scores.
    epsilon : float
        Label-noise level of the robust probit (0 for log-linear potentials).
    node_features, edge_features : ndarray, scipy.sparse matrix or None
        The features (N, F) and (E, Fe); None when the CRF has none (a shared edge table).
    node_weights, edge_weights : WeightSpec or None
        The weight tensors and their priors (None where the CRF has no such weights).
    free_vars : tuple of str
        The model's free variables other than the weights (e.g. learned prior scales).
    info : CRFInfo
        How the CRF variable is built, read back from its node.
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
        """Split a flat weight vector (..., d) into named arrays of the weights' shapes (0-d
        weights, such as an MRF's shared Ising coupling, included)."""
        w_flat = np.asarray(w_flat)
        out, i = {}, 0
        for w in self.weights:
            out[w.name] = w_flat[..., i:i + w.size].reshape(w_flat.shape[:-1] + w.shape)
            i += w.size
        return out

    def flatten(self, values: dict[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(values[w.name]).reshape(-1) for w in self.weights])

    def param_names(self) -> list[str]:
        """``"W[0, 1]"``-style names of the flat weight entries, in flat order (``"w"`` for a
        0-d weight, an MRF's shared coupling)."""
        names = []
        for w in self.weights:
            names += [f"{w.name}[{', '.join(map(str, idx))}]" if idx else str(w.name)
                      for idx in np.ndindex(*w.shape)]
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
    if _random_ancestors(mu):
        return WeightSpec(tensor.name, shape, dims, "other",
                          reason="its Normal prior's mu/sigma depend on other random variables")
    if _random_ancestors(sigma):
        return _scaled_weight_spec(model, tensor, mu, sigma, shape, dims)
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


def _random_ancestors(var) -> list:
    """The random variables ``var`` is computed from."""
    return [v for v in ancestors([var])
            if v.owner is not None and isinstance(v.owner.op, RandomVariable
                                                  | SymbolicRandomVariable)]


def _scaled_weight_spec(model: pm.Model, tensor, mu, sigma, shape, dims) -> WeightSpec:
    """The WeightSpec of a Normal weight whose sigma depends on random variables: a
    ``"normal_scaled"`` one when sigma is one free positive scale variable indexed by constants
    (any grouping written by integer indexing, broadcasting or reshaping), else ``"other"`` with
    the reason (which keeps the words "depend on other random variables")."""
    name = tensor.name

    def other(why: str) -> WeightSpec:
        return WeightSpec(name, shape, dims, "other",
                          reason="its Normal prior's mu/sigma depend on other random variables "
                                 f"({why})")

    rvs = _random_ancestors(sigma)
    if len(rvs) != 1:
        return other(f"sigma depends on {len(rvs)} random variables "
                     f"{sorted(str(v.name) for v in rvs)}; learned prior scales need sigma to be "
                     "one free scale variable, indexed")
    scale = rvs[0]
    if scale not in model.free_RVs:
        return other(f"sigma depends on {scale.name!r}, which is not a free variable of the model")
    if _random_ancestors_of_params(scale):
        return other(f"the scale {scale.name!r} has a prior whose parameters are themselves "
                     "random variables; learned prior scales take one level (a scale with a "
                     "fixed prior)")
    transform = model.rvs_to_transforms.get(scale)
    if type(transform).__name__ != "LogTransform":
        dist = type(scale.owner.op).__name__.removesuffix("RV")
        support = ("a discrete prior" if scale.type.dtype.startswith("int")
                   else "no log transform, i.e. a support that is not (0, inf)")
        return other(f"the scale {scale.name!r} is used as a Normal sigma but has a {dist} prior "
                     f"with {support}; a learned scale needs a continuous prior on (0, inf) such "
                     "as pm.HalfNormal, pm.Exponential, pm.InverseGamma, pm.HalfCauchy or pm.Gamma")
    s_shape = (tuple(int(v) for v in scale.type.shape) if None not in scale.type.shape
               else tuple(int(v) for v in scale.shape.eval()))
    size = int(np.prod(s_shape))
    try:
        marks = np.arange(1.0, size + 1.0).reshape(s_shape)
        # in the scale's dtype (float32 under floatX="float32"), so that an indexing gives the
        # probe back exactly rather than rounded to the scale's precision
        probe = np.random.default_rng(0).uniform(0.5, 2.0, size).astype(scale.dtype).reshape(
            s_shape)
        got = [np.broadcast_to(np.asarray(_evaluate_unrewritten(
            clone_replace(sigma, {scale: pt.constant(v, dtype=scale.dtype)})),
            dtype=np.float64), shape) for v in (marks, probe)]
    except IndexError as err:
        raise ValueError(f"{name!r}: its prior sd indexes the scale {scale.name!r} (shape "
                         f"{s_shape}) out of range: {err}") from None
    except Exception as err:  # noqa: BLE001 - an expression that does not broadcast, etc.
        return other(f"sigma could not be evaluated as an indexing of {scale.name!r}: {err}")
    index = np.rint(got[0]).astype(np.int64) - 1
    if not (np.all(got[0] == index + 1) and np.all((index >= 0) & (index < size))
            and np.allclose(got[1], probe.reshape(-1)[index], rtol=1e-12, atol=0.0)):
        return other(f"sigma is an expression of {scale.name!r} other than an indexing of it "
                     f"(learned prior scales take sigma = {scale.name}, {scale.name}[idx], "
                     f"{scale.name}[idx][:, None], ...)")
    try:
        mu_v = np.broadcast_to(np.asarray(mu.eval(), dtype=np.float64), shape).copy()
    except Exception:  # noqa: BLE001
        return other("its mu could not be evaluated")
    if not np.all(np.isfinite(mu_v)):
        raise ValueError(f"{name!r}: a Normal prior needs a finite mu")
    if model.rvs_to_transforms.get(tensor) is not None:
        return WeightSpec(name, shape, dims, "other", reason="it has a transform")
    return WeightSpec(name, shape, dims, "normal_scaled", mu_v, None,
                      reason=f"its Normal prior's mu/sigma depend on other random variables (the "
                             f"free scale {scale.name!r}: learned prior scales are fitted by "
                             "method='laplace' or 'bethe_laplace')",
                      scale_name=scale.name, scale_index=index)


def _evaluate_unrewritten(expr) -> np.ndarray:
    """The value of a constant expression, computed as written by PyTensor's Python linker: no
    rewrites, so an index out of range is numpy's IndexError here, not a logged constant-folding
    failure followed by a value from wherever the rewritten graph ends up."""
    from pytensor import function
    from pytensor.compile.mode import Mode

    return function([], expr, mode=Mode(linker="py", optimizer=None))()


def _random_ancestors_of_params(rv) -> list:
    return [v for p in rv.owner.inputs for v in _random_ancestors(p)]


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
    while obs.owner is not None and is_cast(obs.owner.op):  # PyMC casts float data to int64
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


def check_observed_labels(model: pm.Model) -> None:
    """Validate the observed labels of every ``pmc.CRF`` (:func:`observed_labels`) and
    ``pmc.HCRF`` in ``model``: for fitters that hand the model to a sampler, which would report a
    bad label as a failed initialisation."""
    for rv in model.observed_RVs:
        if isinstance(rv.owner.op, CRFRV):
            observed_labels(model, rv)
        elif isinstance(rv.owner.op, HCRFRV):
            find_hcrf(model)  # checks the class labels


@model_doc
def extract_crf(model: pm.Model | None = None) -> CRFSpec:
    """The single CRF likelihood of ``model`` and its weights (raises if there is none or several).

    %(model_parameters)s

    Returns
    -------
    CRFSpec
        The observed ``pmc.CRF`` variable's graphs, labels, features, weights and the model's
        other free variables.

    Raises
    ------
    ValueError
        When the model has no observed ``pmc.CRF`` or several, or its observed labels are not
        valid.
    """
    model = pm.modelcontext(model)
    rv = single_observed(model, CRFRV, "pmc.CRF")
    op: CRFRV = rv.owner.op
    info: CRFInfo = op.info(op.dist_params(rv.owner))
    labels = observed_labels(model, rv, info)
    nw, ew = weight_specs(model, info.node_weights, info.edge_weights)
    _check_weight_shapes(info, nw, ew)
    weights = {info.node_weights, info.edge_weights}
    free = tuple(v.name for v in model.free_RVs if v not in weights)
    return CRFSpec(model, rv.name, info.batch, labels, info.n_labels, info.potential,
                   info.epsilon, info.node_features, info.edge_features, nw, ew, free, info)


def _check_weight_shapes(info: CRFInfo, nw: WeightSpec | None, ew: WeightSpec | None) -> None:
    """Weights sized by ``dims`` have no static shape, so the CRF checks them only where its
    compiled logp runs; a weight-space fitter reads the model without compiling it, and a
    coordinate that does not match the data (another vocabulary's features, another tag set)
    failed there with numpy's "shapes not aligned" or "cannot reshape array" or an engine's
    "out must be a C-contiguous float64 array"."""
    K = info.n_labels
    want = {"node_weights": None if info.node_features is None
            else (int(info.node_features.shape[1]), K),
            "edge_weights": (K, K) if info.edge_features is None
            else (int(info.edge_features.shape[1]), K, K)}
    for key, w in (("node_weights", nw), ("edge_weights", ew)):
        if w is None or want[key] is None or tuple(w.shape) == want[key]:
            continue
        what = ("(node features, labels)" if key == "node_weights" else
                "(labels, labels)" if info.edge_features is None
                else "(edge features, labels, labels)")
        raise ValueError(f"the CRF's {key} {w.name!r} have shape {tuple(w.shape)}; the data and "
                         f"n_labels={K} need {want[key]} {what}: check the coords of its dims "
                         "against the features' columns and the labels")


def prior_fingerprint(spec: CRFSpec | MRFSpec) -> str:
    """A digest of the weights' priors as ``spec`` reads them: each weight's name, shape and
    prior kind, its Normal mean, and its fixed sd or the name of its learned scale.

    Fitters store it on their results (``attrs["weight_prior"]``) so that consumers which take
    the model beside a result (``pmc.loo``'s log posterior of each draw) can refuse a model whose
    prior is not the one the result was fitted with, instead of computing with it.
    """
    digest = hashlib.sha1()
    for w in spec.weights:
        digest.update(f"{w.name}|{tuple(w.shape)}|{w.prior}|".encode())
        if w.prior_mean is not None:
            digest.update(np.ascontiguousarray(w.prior_mean, dtype=np.float64).tobytes())
        if w.prior == "normal" and w.prior_sd is not None:
            digest.update(np.ascontiguousarray(w.prior_sd, dtype=np.float64).tobytes())
        elif w.prior == "normal_scaled":
            digest.update(f"|{w.scale_name}|".encode())
            if w.scale_index is not None:
                digest.update(np.ascontiguousarray(w.scale_index, dtype=np.int64).tobytes())
    return digest.hexdigest()


def require_gaussian_prior(spec: CRFSpec | MRFSpec, method: str) -> None:
    """Raise a clear error unless every weight has a fixed Normal prior and nothing else is free.

    Parameters
    ----------
    spec : CRFSpec or MRFSpec
        The model's random field (:func:`extract_crf`, :func:`extract_random_field`).
    method : str
        The fitter's name, for the error message.

    Raises
    ------
    ValueError
        When a weight's prior is not a fixed Normal, or the model has free variables other than
        the weights.
    """
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


@dataclass(frozen=True)
class ScaleVariable:
    """A free prior-scale variable of the weights: its name, shape and distribution, and where
    its entries sit in the flat scale vector (``offset`` .. ``offset + size``)."""

    name: str
    shape: tuple[int, ...]
    distribution: str
    offset: int

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def entry_names(self) -> list[str]:
        """``"s[0]"``-style names of the flat entries (``"s"`` for a scalar)."""
        return [f"{self.name}[{', '.join(map(str, i))}]" if i else self.name
                for i in np.ndindex(*self.shape)]


def free_scales(spec) -> tuple[list[ScaleVariable], np.ndarray]:
    """The free scale variables of the weights of ``spec`` (a CRF or MRF spec) and, for every
    flat weight, the index of its scale in the flat scale vector (concatenation of the scale
    variables in order of first use), -1 for weights with a fixed sd.

    Returns ``([], all -1)`` when no weight has a learned scale.
    """
    model = spec.model
    scales: list[ScaleVariable] = []
    offsets: dict[str, int] = {}
    parts = []
    for w in spec.weights:
        if w.prior != "normal_scaled":
            parts.append(np.full(w.size, -1, dtype=np.int64))
            continue
        if w.scale_name not in offsets:
            rv = model[w.scale_name]
            shape = (tuple(int(v) for v in rv.type.shape) if None not in rv.type.shape
                     else tuple(int(v) for v in rv.shape.eval()))
            off = sum(v.size for v in scales)
            scales.append(ScaleVariable(w.scale_name, shape,
                                        type(rv.owner.op).__name__.removesuffix("RV"), off))
            offsets[w.scale_name] = off
        parts.append(offsets[w.scale_name] + np.asarray(w.scale_index).reshape(-1))
    index = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return scales, index


def with_scales(spec, scale_values: np.ndarray):
    """``spec`` with its learned scales fixed at ``scale_values`` (the flat scale vector of
    :func:`free_scales`): every ``"normal_scaled"`` weight becomes ``"normal"`` with
    ``prior_sd = scale_values[scale_index]``, and the scale variables leave ``free_vars``, so
    the fixed-prior machinery (``GaussianLogPrior``, ``require_gaussian_prior``) takes it."""
    scales, _ = free_scales(spec)
    values = np.asarray(scale_values, dtype=np.float64).reshape(-1)
    total = sum(v.size for v in scales)
    if values.shape != (total,):
        raise ValueError(f"scale_values must have {total} entries (the flat scale vector); got "
                         f"shape {np.shape(scale_values)}")
    offsets = {v.name: v.offset for v in scales}
    fixed = {}
    for slot in ("node_weights", "edge_weights"):
        w = getattr(spec, slot)
        if w is not None and w.prior == "normal_scaled":
            sd = values[offsets[w.scale_name] + np.asarray(w.scale_index)]
            fixed[slot] = replace(w, prior="normal", prior_sd=sd, reason="")
    names = set(offsets)
    return replace(spec, **fixed, free_vars=tuple(v for v in spec.free_vars if v not in names))


def _spec_or_none(spec_or_model):
    if not isinstance(spec_or_model, pm.Model):
        return spec_or_model
    from pymc_crf.model.random_field import extract_random_field

    try:
        return extract_random_field(spec_or_model)
    except ValueError:  # no random field (or several): the fitter says so itself
        return None


def refuse_free_scales(spec_or_model, method: str) -> None:
    """Raise a clear error when the random field's weights have learned (free) prior scales, for
    a fitter that cannot fit them: ``map`` (whose joint mode collapses the scales), EP, evidence
    estimates at fixed priors. Takes a spec or a model (a model without one random field passes:
    the fitter reports that itself)."""
    spec = _spec_or_none(spec_or_model)
    if spec is None:
        return
    scaled = [w for w in spec.weights if w.prior == "normal_scaled"]
    if not scaled:
        return
    names = sorted({w.scale_name for w in scaled})
    which = ", ".join(f"{w.name!r} (sd {w.scale_name!r})" for w in scaled)
    if method == "map":
        why = ("the joint mode of weights and scales is at s -> 0: with the weights at their "
               "prior mean the log prior -n log s grows without bound as s shrinks while the "
               "likelihood stays finite, so a MAP collapses the scales (to ~1e-8)")
    else:
        why = "this method needs a fixed Gaussian prior (fixed prior scales)"
    raise ValueError(
        f"method={method!r} cannot fit a model whose weight prior scales are free variables "
        f"{names} (weights {which}): {why}. Choose the scales by their evidence with "
        "method='laplace' or method='bethe_laplace' (type-II maximum likelihood / empirical "
        "Bayes; integrate_scales='grid' integrates over up to 3 of them), integrate over many "
        "scales with method='randomized_map' (Gibbs sweeps over weights and scales), or, for "
        "small models, sample the full model with method='nuts' and a non-centred prior "
        "(z = pm.Normal('z', 0, 1, ...); w = pm.Deterministic('w', s[idx] * z)).")


def require_learnable_scales(spec, method: str) -> None:
    """Raise a clear error unless every weight has a Normal prior with a fixed sd or a learned
    scale (:func:`free_scales`), the only other free variables are those scales, and every scale
    entry scales at least one weight."""
    scales, index = free_scales(spec)
    fixed = with_scales(spec, np.ones(sum(v.size for v in scales)))
    for w in fixed.weights:
        if w.prior != "normal":
            raise ValueError(f"method={method!r} needs a Normal prior on the CRF weights with a "
                             f"fixed or a learned (free, indexed) sd ({w.name or 'weights'}): "
                             f"{w.reason}. Use method='nuts' for other priors.")
    if fixed.free_vars:
        raise ValueError(f"method={method!r} handles models whose free variables are the CRF "
                         f"weights and their prior scales; this model also has "
                         f"{list(fixed.free_vars)}")
    for v in scales:
        _require_proper_scale_prior(spec.model, v, method)
    used = np.zeros(sum(v.size for v in scales), dtype=bool)
    used[index[index >= 0]] = True
    for v in scales:
        unused = np.flatnonzero(~used[v.offset:v.offset + v.size])
        if unused.size:
            raise ValueError(f"the scale {v.name!r} has {v.size} entries but entries "
                             f"{unused[:10].tolist()} scale no weight (the index in its "
                             "sigma never selects them); their evidence is flat, so they cannot "
                             f"be learned: size {v.name!r} to the groups the index uses")


def _require_proper_scale_prior(model: pm.Model, scale: ScaleVariable, method: str) -> None:
    """Raise a clear error when the prior of a learned scale has parameters outside its
    distribution's domain (``pm.HalfNormal("s", 0)``: a point mass at 0; a negative or NaN
    parameter): its log density is not finite at positive scales, so neither the evidence nor
    the scales' conditionals are defined, with or without the hyperprior's density."""
    from pymc.logprob.utils import ParameterValueError

    rv = model[scale.name]
    try:
        logp = np.asarray(_evaluate_unrewritten(pm.logp(rv, np.ones(scale.shape, rv.dtype))))
    except ParameterValueError as err:
        raise ValueError(f"method={method!r}: the prior of the learned scale {scale.name!r} "
                         f"({scale.distribution}) has invalid parameters ({err} does not "
                         "hold): a scale prior must be a proper density on (0, inf), e.g. "
                         "pm.HalfNormal with sigma > 0") from None
    if not np.all(np.isfinite(logp)):
        raise ValueError(f"method={method!r}: the prior of the learned scale {scale.name!r} "
                         f"({scale.distribution}) has log density "
                         f"{logp.ravel()[~np.isfinite(logp.ravel())][0]} at s = 1: a scale prior must be "
                         "a proper density on (0, inf), e.g. pm.HalfNormal with sigma > 0")


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
        # map refuses learned scales (refuse_free_scales), so it is no alternative there
        others = ("method='nuts' sums" if any(w.prior == "normal_scaled" for w in spec.weights)
                  else "method='map' and 'nuts' sum")
        raise ValueError(f"method={method!r} needs every label observed; this model has "
                         f"{n_missing} missing (masked / -1) labels. {others} missing labels "
                         "out of the likelihood.")
