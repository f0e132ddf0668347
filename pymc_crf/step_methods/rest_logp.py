"""The model's log density without its random-field likelihood term, as a function of the step's
raveled variables (the other variables are PyTensor shared variables that PyMC's
``ArrayStepShared.step`` sets from the current point)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.pytensorf import compile as pm_compile
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements

from pymc_crf.model.objective import GaussianLogPrior
from pymc_crf.step_methods.field import RandomFieldTerm

__all__ = ["RestLogp", "rest_logp"]

RestLogp = Callable[[np.ndarray], tuple[float, np.ndarray]]


class _Compiled:
    """Picklable wrapper of the compiled ``q -> (logp, dlogp)`` of the rest of the model."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = self.fn(np.asarray(q, dtype=np.float64))
        return float(value), np.asarray(grad, dtype=np.float64)


def rest_logp(model: pm.Model, field: RandomFieldTerm, vars: list, initial_point: dict,
              compile_kwargs: dict | None = None) -> tuple[RestLogp, dict]:
    """``(f, shared)``: ``f(q) -> (value, gradient)`` of every log-density term of ``model``
    except the random-field likelihood, in the raveled step variables ``vars`` (value variables in
    the flat weight order), and the shared replacements of the other value variables.

    When the only free variables are the weights with fixed Normal priors and the random field is
    the only observed variable, this is :class:`~pymc_crf.model.objective.GaussianLogPrior`
    (nothing to compile); otherwise PyMC compiles ``model.logp`` of the other terms.
    """
    spec = field.spec
    if (not spec.free_vars and len(model.observed_RVs) == 1 and not model.potentials
            and all(w.prior == "normal" for w in spec.weights)):
        return GaussianLogPrior(spec), {}
    shared = make_shared_replacements(initial_point, vars, model)
    # the potentials go through model.logp too: it writes them in the value variables (added
    # as they stand, they would hold the random variables and redraw them at every call)
    others = [rv for rv in model.free_RVs + model.observed_RVs if rv is not field.rv]
    logp = model.logp(vars=others + list(model.potentials), sum=True)
    grads = pt.grad(logp, vars, disconnected_inputs="ignore")
    dlogp = pt.concatenate([g.ravel() for g in grads])
    outs, inarray = join_nonshared_inputs(point=initial_point, outputs=[logp, dlogp], inputs=vars,
                                          shared_inputs=shared)
    fn = pm_compile([inarray], outs, **(compile_kwargs or {}))
    fn.trust_input = True
    return _Compiled(fn), shared
