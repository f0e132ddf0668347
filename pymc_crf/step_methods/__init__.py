"""PyMC step methods for the weights of random fields, whose likelihood has an intractable
normaliser (doubly-intractable posteriors): use them as ``pm.sample(step=...)`` or through
``pmc.fit(model, method="bethe_mh" | "langevin_cd" | "exchange")``.

- :class:`BetheMH` (MC-BP): Metropolis-Hastings with log Z from the Bethe free energy
  (Murray & Ghahramani 2004; Welling & Parise 2006, sec. 7).
- :class:`LangevinCD` (LV-CD): brief Langevin with contrastive-divergence gradients
  (Murray & Ghahramani 2004; Hinton 2002).
- :class:`Exchange`: the exchange algorithm with exact auxiliary draws (Murray, Ghahramani &
  MacKay 2006), or an approximate Gibbs variant beyond exact sampling.

Their proposals start from ``S``; the Bethe-Laplace covariance and chain starts that the fitters
use by default where they apply come from :func:`pymc_crf.fitters.laplace_init` (a fitter: this
layer sits below the fitters and imports none of them).
"""

from pymc_crf.step_methods.base import RandomFieldStep
from pymc_crf.step_methods.bethe_mh import BetheMH
from pymc_crf.step_methods.exchange import Exchange
from pymc_crf.step_methods.langevin_cd import LangevinCD

__all__ = ["BetheMH", "Exchange", "LangevinCD", "RandomFieldStep"]
