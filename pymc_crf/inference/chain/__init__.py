"""Exact inference on chains: forward-backward, Viterbi, forward-filtering backward-sampling.

Every graph of the batch must be a canonical chain (``GraphBatch.chains``): node ``t`` of graph
``g`` is ``node_offsets[g] + t`` and edge ``(t-1, t)`` is ``edge_offsets[g] + t - 1``.

The hot kernel (log Z and marginals) is forward-backward with per-step scaling (Rabiner 1989): each
node row and edge table is exponentiated once after subtracting its maximum, and the forward
messages are renormalised at every step, so no exp of an unbounded score is taken. Every step
checks that no state's message lost relative accuracy to underflow (the test and its proof are
above ``scaling._threshold``); then the result equals the log-space recursion to rounding for any
range of log-potentials. A chain that fails the test (messages spanning more than about 1e307,
which needs node-row plus table ranges above about 700) is recomputed in log space.

Up to 64 chains run in lockstep, the chain index innermost, so the K x K products vectorise
across chains (``lanes``); with per-edge tables each lane has its own table per step. Log-linear
per-edge tables given as edge features and weights (``log_z_and_feature_marginals``) are formed
block by block inside the same kernel, and the gradient in the weights (the expected edge
features) is summed there too, so neither the (E, K, K) tables nor their marginals are made: for
49,000 edges and K = 10 those are two 39 MB arrays, written and read again by the feature
products, which cost more than the recursions. Chains too long for the lane blocks (over 81
positions at K = 10) form their own tables and marginals, one chain at a time (``features``).

A batch with enough lane-block work is split into parts of whole blocks (``blocks._block_plan``:
about equal work, at most eight, fixed by the batch alone) that run on the worker threads of
``pymc_crf.threads`` (``parts``); each part sums its shared-table and edge-feature terms apart,
and the parts' sums are added in part order, so the numbers do not depend on the number of
threads. The lane tier's driver is Python: it runs the lane kernel once a part and the per-graph
kernels only for the chains that need them (too long for the blocks, or failing the exactness
test), so numba compiles each kernel on its own, and a batch that needs no per-graph kernel
never compiles one. Compiled PyTensor functions reach the kernels through an object-mode
hand-off (``dispatch``). The default is one thread (why, and when more pay:
``pymc_crf.threads``); a caller that finds another call's parts on the helper threads (nutpie
runs its chains in threads) runs its parts in its own thread.

Modules, in the order they build on each other:

* ``small``: the numpy tier, for the smallest batches (nothing to compile);
* ``scaling``: the exp of non-positive arguments, shifted tables and the exactness test;
* ``log_space``: log-space forward-backward of one chain (the fallback) and its tangent;
* ``per_graph``: scaled forward-backward one chain at a time (the per-graph tier);
* ``features``: edge tables from edge features, one chain at a time;
* ``lanes``: the lane-block kernel;
* ``blocks``: the lane kernel of a run of blocks, and a batch's split into blocks and parts;
* ``parts``: a batch in lane blocks, its parts on one or more threads (the lane tier);
* ``dispatch``: which tier runs a batch, from Python or from compiled code;
* ``sampling``: Viterbi and forward-filtering backward-sampling;
* ``engine``: ``ChainEngine``.
"""

from pymc_crf.inference.chain.engine import ChainEngine

__all__ = ["ChainEngine"]
