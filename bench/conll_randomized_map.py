"""CoNLL-2000 chunking: the randomized-MAP posterior at learned scales against the MAPs and NUTS.

The chunking CRF of ``examples/conll2000_chunking.py`` on the first ``--train`` training sentences
(``all``: every one but the dev split), its node weights' prior sds one per feature template and
training-count bucket, read from ``--scales`` (the JSON ``bench/conll_learned_scales.py
--groups template-frequency --nuts N --save-scales FILE`` writes: NUTS's posterior-mean scales of
the hierarchical model on its subset); without ``--scales``, CRFsuite's c2 = 1 (sd 0.707) for
every weight. Scored on the first ``--test`` test sentences:

* MAP, c2 = 1 and its temperature-scaled version (temperature fitted on the dev split);
* ``--refine N``: N HMC transitions from each randomized MAP (``refine=N``);
* ``--unseen-sd S``: the (feature, label) weights whose feature never fires on a training token
  of that label get the prior sd S (0.001 pins them near 0: CRFsuite's default feature set);
* with ``--learn``, the hierarchical model instead: one ``s ~ HalfNormal(1)`` per template and
  count bucket (``--groups``: per template, or per count bucket; ``template-frequency-seen``:
  per template, count bucket and whether the (feature, label) pair is seen in training), the
  transitions'
  ``t ~ HalfNormal(1)``, the scales learned by the fitter's Monte
  Carlo EM (``--scale-draws`` draws; printed beside ``--scales``' when given, e.g. NUTS's),
  or with ``--scale-method gibbs`` integrated over by ``--chains`` Gibbs chains of ``--tune``
  + ``--draws`` sweeps (the MAP row then at the posterior-mean scales);
* ``pmc.fit(method="randomized_map")`` at the scales: its own MAP (the centre of its
  perturbations) as the MAP at the scales, and its ``--draws`` draws (``--antithetic``;
  ``--workers``: on a local Dask cluster), their marginals averaged over the first 10, 30, ...
  draws (the Monte Carlo error of an average of few widely spread draws is a bias upwards in
  log loss); Viterbi labels at the MAP.

Printed: token log loss, token accuracy, ECE (10 bins), chunk F1, span ECE (the probability that
each predicted chunk is exactly right, averaged over the draws), wall times, and issue 40's
criteria for the averaged marginals against the MAP at c2 = 1 and the MAP at the scales.

Run:  .venv/bin/python bench/conll_randomized_map.py [--train 300] [--test 2012]
      [--scales bench/results_conll_nuts_scales_300.json] [--draws 100] [--antithetic]
      [--save-draws FILE.npy] [--workers 2] [--refine 20] [--unseen-sd 0.001]
      [--learn [--groups frequency] [--scale-draws 16] [--save-scales F] [--init-from-scales]
      [--scale-maxiter 30] [--scale-method gibbs --chains 2 --tune 40]] [--progress]
(needs ../shared/data/conll2000)
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from contextlib import contextmanager

import numpy as np
import pymc as pm
from conll_data import chunking, group_names, map_at_scales, scales_by_group, seen_pair_groups
from conll_learned_scales import SIGMA, _checks, _point, _row

import pymc_crf as pmc
from pymc_crf.calibration import fit_temperature, tempered
from pymc_crf.datasets import data_dir


@contextmanager
def _client(workers: int):
    """A local Dask cluster of ``workers`` processes (one thread each), or None for 0."""
    if not workers:
        yield None
        return
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


def _report_scales(res, names, saved: dict | None, save: str | None, train: str,
                   groups: str) -> None:
    """Print the learned scales (beside ``saved``'s, e.g. NUTS's) and the iterations; save them
    as ``conll_learned_scales.py --save-scales`` does."""
    d = res["diagnostics"]
    learned = res["fit"]["scales"].values
    if "outer_iteration" in d.sizes:
        print(f"scales: {d.sizes['outer_iteration']} iterations, converged "
              f"{bool(d['scales_converged'])}, MAP iterations per iteration "
              f"{d['outer_map_iterations'].values.tolist()}, draw iterations "
              f"{d['outer_draw_iterations'].values.tolist()}")
    else:  # scale_method="gibbs": posterior means, and how far the chains agree
        kept = np.log(np.concatenate([res["posterior"][v].values.reshape(
            *res["posterior"][v].shape[:2], -1) for v in ("s", "t")], axis=-1))
        by_chain = kept.mean(axis=1)
        spread = np.abs(by_chain - by_chain.mean(axis=0)).max(axis=0) / np.maximum(
            kept.std(axis=(0, 1)), 1e-12)
        print(f"scales: posterior means over {kept.shape[0]} x {kept.shape[1]} kept sweeps; "
              f"between-chain difference of "
              f"the means of log s in posterior sds: median {np.median(spread):.2f}, largest "
              f"{spread.max():.2f}; non-centred step's acceptance "
              f"{float(np.nanmean(d['scale_acceptance'].values)):.2f}")
    rows = [*zip([*names, "transition"], learned, strict=True)]
    if saved is not None:
        ref = [saved["scales"].get(n, np.nan) for n in names] + [saved["transition"]]
        ratio = learned / np.asarray(ref)
        ok = np.isfinite(ratio)
        print(f"learned / saved scales: median {np.median(ratio[ok]):.2f}, "
              f"range {ratio[ok].min():.2f} .. {ratio[ok].max():.2f}, "
              f"median |log ratio| {np.median(np.abs(np.log(ratio[ok]))):.2f}")
    for i, (n, v) in enumerate(rows):
        extra = f" (saved {ref[i]:.3g})" if saved is not None else ""
        print(f"  {n}: {v:.3g}{extra}")
    if save:
        with open(save, "w") as f:
            json.dump({"groups": groups, "train": train,
                       "transition": float(learned[-1]),
                       "scales": dict(zip(names, map(float, learned[:-1]), strict=True))}, f,
                      indent=1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default="300")
    ap.add_argument("--test", type=int, default=2012)
    ap.add_argument("--dev", type=int, default=500)
    ap.add_argument("--scales", default=None)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--antithetic", action="store_true")
    ap.add_argument("--rule", choices=["delta", "strict"], default="delta")
    ap.add_argument("--gtol", type=float, default=1e-3, help="with --rule strict")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save-draws", default=None)
    ap.add_argument("--workers", type=int, default=0,
                    help="run the draws on a local Dask cluster of this many processes")
    ap.add_argument("--learn", action="store_true",
                    help="learn the scales (one per template and count bucket) by the fitter")
    ap.add_argument("--groups", choices=["template-frequency", "template", "frequency",
                                         "template-frequency-seen"],
                    default="template-frequency",
                    help="with --learn: one scale per template and count bucket, or per either; "
                         "template-frequency-seen: per template, count bucket and whether the "
                         "(feature, label) pair is seen in training")
    ap.add_argument("--scale-draws", type=int, default=16)
    ap.add_argument("--scale-method", choices=["em", "gibbs"], default="em",
                    help="with --learn: one value of the scales (Monte Carlo EM) or the scales "
                         "integrated over (Gibbs sweeps; --chains, --tune)")
    ap.add_argument("--chains", type=int, default=1)
    ap.add_argument("--tune", type=int, default=50)
    ap.add_argument("--refine", type=int, default=0,
                    help="HMC transitions from each randomized MAP (the fitter's refine)")
    ap.add_argument("--progress", action="store_true", help="the fitter's progress bars")
    ap.add_argument("--scale-maxiter", type=int, default=30)
    ap.add_argument("--init-from-scales", action="store_true",
                    help="with --learn and --scales: start the scale search at those scales")
    ap.add_argument("--save-scales", default=None,
                    help="with --learn: JSON file for the learned scales by group name")
    ap.add_argument("--unseen-sd", type=float, default=None,
                    help="without --learn: this prior sd for every (feature, label) weight whose "
                         "feature never fires on a training token of that label (0.001: "
                         "CRFsuite's default feature set, the seen pairs only)")
    args = ap.parse_args(argv)
    if not data_dir("conll2000").exists():
        print(f"skipped: {data_dir('conll2000')} not found")
        return
    data = chunking(None if args.train == "all" else int(args.train), args.test, n_dev=args.dev)
    test, K = data.test, len(data.classes)
    X, batch = data.train.node_features, data.train.graphs
    F = X.shape[1]
    saved = None
    if args.scales:
        with open(args.scales) as f:
            saved = json.load(f)
        node_sd, edge_sd, missing = scales_by_group(data, saved, SIGMA)
        where = f"scales learned on {saved['train']} sentences ({missing} groups not among them)"
    else:
        node_sd, edge_sd, where = np.full(F, SIGMA), SIGMA, "c2 = 1"
    if args.unseen_sd is not None:
        if args.learn:
            ap.error("--unseen-sd fixes the scales; it does not go with --learn")
        pair_names, pair_group = seen_pair_groups(data)
        seen = np.array([n.endswith("label seen") for n in pair_names])[pair_group]
        node_sd = np.where(seen, np.broadcast_to(node_sd, (F,))[:, None], args.unseen_sd)
        where += (f"; the {seen.size - seen.sum()} unseen (feature, label) pairs' sd "
                  f"{args.unseen_sd:g} ({seen.sum()} seen)")
    if args.learn:
        if args.groups == "template-frequency-seen":
            names, group = seen_pair_groups(data)  # group: (F, K)
        else:
            names, group = np.unique(group_names(data, args.groups), return_inverse=True)
            group = np.repeat(group[:, None], K, axis=1)
        where = (f"{len(names)} scales ({args.groups}) and the transitions' learned "
                 f"from {args.scale_draws} draws")
    print(f"{batch.n_graphs} training sentences, {F * K + K * K} weights; {where}; test "
          f"{args.test} sentences, {test.node_features.shape[0]} tokens")
    print("| fit | token log loss | token accuracy | ECE | chunk F1 | span ECE | wall time (s) |")
    print("|---|---|---|---|---|---|---|")
    fit, wall = map_at_scales(data.train, SIGMA, SIGMA, K)
    viterbi = pmc.predict(fit, test, "map").labels
    rows = {"map": _row("MAP, c2 = 1", fit, pmc.predict(fit, test, "bpe").marginals, viterbi,
                        data, None, wall)}
    temperature = fit_temperature(fit, data.dev)
    hot = tempered(fit, temperature)
    rows["tempered"] = _row(f"MAP, c2 = 1, temperature {temperature:.3f} (dev)", hot,
                            pmc.predict(hot, test, "bpe").marginals, viterbi, data, None, wall)
    with pm.Model() as model:
        if args.learn:
            s = pm.HalfNormal("s", 1.0, shape=len(names))
            t = pm.HalfNormal("t", 1.0)
            W = pm.Normal("W", 0.0, s[group], shape=(F, K))
            T = pm.Normal("T", 0.0, t, shape=(K, K))
        else:
            W = pm.Normal("W", 0.0, node_sd if node_sd.ndim == 2
                          else node_sd[:, None] * np.ones((1, K)), shape=(F, K))
            T = pm.Normal("T", 0.0, edge_sd, shape=(K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T,
                observed=data.train.labels)
    init = 1.0
    if args.learn and args.init_from_scales and saved is not None:
        init = np.array([saved["scales"].get(n, 1.0) for n in names] + [saved["transition"]])
    t0 = time.perf_counter()
    with warnings.catch_warnings(), _client(args.workers) as client:
        warnings.simplefilter("ignore")
        res = pmc.fit(model, method="randomized_map", draws=args.draws, random_seed=args.seed,
                      antithetic=args.antithetic, rule=args.rule,
                      gtol=args.gtol if args.rule == "strict" else None,
                      client=client, log_likelihood=False, progressbar=args.progress,
                      scale_draws=args.scale_draws, refine=args.refine, scale_init=init,
                      scale_maxiter=args.scale_maxiter, chains=args.chains,
                      scale_method=args.scale_method, tune=args.tune)
    wall = time.perf_counter() - t0
    gibbs = args.learn and args.scale_method == "gibbs"
    if gibbs:  # no single centre: the MAP at the posterior-mean scales
        mean = res["fit"]["scales"].values
        fit_at, _ = map_at_scales(data.train, mean[group], float(mean[-1]), K)
        what = "MAP at the posterior-mean scales"
    else:
        fit_at = _point(res, F, K, "map_vector")  # the centre of the perturbations
        what = "MAP at the scales (the randomized MAP's centre)"
    viterbi_at = pmc.predict(fit_at, test, "map").labels
    rows["map_ls"] = _row(what, fit_at, pmc.predict(fit_at, test, "bpe").marginals, viterbi_at,
                          data, None, 0.0)
    d = res["diagnostics"]
    n_total = args.draws * args.chains
    print(f"randomized MAP: {wall:.0f} s, L-BFGS iterations per draw "
          f"{float(d['draw_iterations'].mean()):.0f} (MAP "
          f"{float(d['map_iterations'].mean()):.0f}{' per sweep' if gibbs else ''}), "
          f"{int(d['draw_success'].sum())} of {n_total} draws converged"
          + ("" if gibbs else f", rms move {float(d['draw_rms_move'].mean()):.2f} prior sds")
          + (f", HMC acceptance {float(d['draw_acceptance'].mean()):.2f}"
             if "draw_acceptance" in d else ""), flush=True)
    if args.learn:
        _report_scales(res, names, saved, args.save_scales, args.train, args.groups)
    if args.save_draws:
        np.save(args.save_draws, np.concatenate(
            [res["posterior"][v].values.reshape(n_total, -1) for v in ("W", "T")], axis=1))
    prefixes = [n for n in (10, 30, 100, 300) if n < args.draws] + [args.draws]
    for n in prefixes:
        part = res.copy()
        part["posterior"] = res["posterior"].to_dataset().isel(draw=slice(0, n))
        name = (f"Gibbs (scales integrated), averaged over {args.chains} x {n} sweeps" if gibbs
                else f"randomized MAP at the scales, averaged over {n * args.chains} draws")
        rows[f"rml{n}"] = _row(name, part, pmc.predict(part, test, "average", draws=None).marginals,
                               viterbi_at, data, None, wall)
    print(f"randomized MAP ({n_total} draws) against the MAPs:")
    _checks(rows, f"rml{args.draws}", "map_ls")


if __name__ == "__main__":
    main()
