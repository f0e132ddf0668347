"""``method="randomized_map"``: posterior draws as MAPs of randomly perturbed objectives.

Randomized maximum likelihood (Oliver, He & Reynolds 1996; "randomize-then-optimize", Bardsley
et al. 2014; perturb-and-MAP, Papandreou & Yuille 2010): each draw is the maximiser of

    log p(D | w) + delta_s . w + log N(w; eps_s, S^2),

with a prior anchor ``eps_s ~ N(mu, S^2)`` (the prior's own draw) and a data perturbation
``delta_s = grad_w log p(y~_s | x, w*)``, the score of labellings ``y~_s`` drawn from the CRF at
its MAP ``w*`` (one per training graph, exact forward-filtering backward-sampling). For log-linear
potentials the score's covariance is the Fisher information ``Cov[phi(y~)] = H_lik(w*)``, so if
the log-likelihood were quadratic, ``w_s - w* = A^{-1} (delta_s + S^{-2} (eps_s - mu))`` with
``A = H_lik + S^{-2}`` would have covariance ``A^{-1} (H_lik + S^{-2}) A^{-1} = A^{-1}``: the
Laplace posterior's mean and covariance, exactly. A CRF's log-likelihood is not quadratic: the
weight of a (feature, label) pair that the rest of the model already predicts is flat on one
side of the mode and falls off on the other. Each draw re-optimises the real likelihood, so it
keeps that shape, where a Gaussian at the mode puts half its mass on the side the data exclude
(docs/bethe_laplace.md, "On CoNLL-2000").

Cost: one MAP per draw, warm-started at ``w*``, each independent of the others.

Learned prior scales (``W ~ N(0, s[group]^2)``, ``s`` free) are integrated over by default
(``scale_method="gibbs"``, ``gibbs.py``): Markov chains on (scales, weights) whose weight step is
a randomized MAP at the chain's scales and whose scale steps interweave the centred and the
non-centred conditional (Yu & Meng 2011). With ``scale_method="em"`` they are chosen first by
Monte Carlo EM on such draws (``scales.py``): the draws' squared weights estimate each group's
expected sum of squares, and the scales move to where it matches the prior's (Fisher's
identity), with Newton steps in ``log s`` (Louis's curvature) and the same seeds at every
iteration; every draw is then at those scales.
"""

from pymc_crf.fitters.randomized_map.draws import perturbed_objective, score_perturbation
from pymc_crf.fitters.randomized_map.fitter import fit_randomized_map
from pymc_crf.fitters.randomized_map.gibbs import sample_scales_by_gibbs
from pymc_crf.fitters.randomized_map.scales import learn_scales_by_draws

__all__ = ["fit_randomized_map", "perturbed_objective", "score_perturbation",
           "learn_scales_by_draws", "sample_scales_by_gibbs"]
