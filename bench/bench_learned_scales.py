"""Learned prior scales by the Laplace evidence: the fitter's steps and MAP search coordinates
against MacKay's plain steps with strict prior-whitened MAPs, on CoNLL-2000 chunking.

The learned-scale model of ``examples/conll2000_posterior.py`` (one ``s ~ HalfNormal(1)`` per
feature template of ``pmc.datasets.token_features``, ``W ~ Normal(0, s[template])``, the
transitions with their own ``t ~ HalfNormal(1)``) on the first ``--train`` training sentences,
fitted by ``pmc.fit(method="laplace")`` with its defaults (the diagonal Laplace covariance at
these sizes). Three variants, one after the other in the same run: the default (MacKay's steps
with the pruned groups extrapolated, MAPs to ``scales.OUTER_GTOL`` until the last, each MAP at new
scales searched in the coordinates of the Laplace sds the last point predicts there,
``diagonal_laplace.search_scale``); the same with every MAP searched in prior-whitened
coordinates; and the reference, MacKay's plain steps with strict prior-whitened MAPs
(``scales._extrapolated_step`` replaced by one that never extrapolates).

Printed per size: outer iterations, Laplace evaluations (MAP + curvature at fixed scales), wall
time and the final type-II MAP objective ``F`` (log evidence + log hyperprior) of each, the time
ratios against the reference, and how many scales end at the lower bound. The MAP kernels are
compiled beforehand by a small warm-up fit.

``--refine N``: the exact-gradient ascent that ``refine=None`` adds on small dense models, on the
sketch of docs/bethe_laplace.md (the first N sentences, three templates: ``bias``, ``postag``,
``-1:postag``; 1,118 weights and 3 scales at N = 40): the default fit against the same fit with
the ascent's tolerances tightened to ``gtol`` 1e-7, ``ftol`` 1e-13 and against ``refine=False``.

Run:  .venv/bin/python bench/bench_learned_scales.py [--train 60 300] [--refine 40]
(needs ../shared/data/conll2000)
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm

import pymc_crf as pmc
from pymc_crf.datasets import data_dir, read_conll2000, token_features
from pymc_crf.features import encode_tags, sequence_batch
from pymc_crf.fitters.bethe_laplace import scales as S


def _model(n: int) -> pm.Model:
    words, pos, chunks = read_conll2000("train")
    classes = sorted({t for s in chunks for t in s})
    vec = pmc.FeatureVectorizer(min_freq=1)
    X = vec.fit_transform([token_features(a, b) for a, b in zip(words[:n], pos[:n], strict=True)])
    y, _ = encode_tags(chunks[:n], classes)
    F, K = X.shape[1], len(classes)
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0, shape=len(vec.templates_))
        W = pm.Normal("W", 0.0, s[vec.template_index_][:, None], shape=(F, K))
        t = pm.HalfNormal("t", 1.0)
        T = pm.Normal("T", 0.0, t, shape=(K, K))
        pmc.CRF("y", graphs=sequence_batch(words[:n]), node_features=X, node_weights=W,
                edge_weights=T, observed=y)
    return model


def _sketch_model(n: int) -> pm.Model:
    """docs/bethe_laplace.md's learned-scale sketch on three templates of n sentences."""
    words, pos, chunks = read_conll2000("train")
    keep = ("bias", "postag", "-1:postag")
    sents = [[{k: v for k, v in t.items() if k in keep} for t in token_features(a, b)]
             for a, b in zip(words[:n], pos[:n], strict=True)]
    vec = pmc.FeatureVectorizer()
    X = vec.fit_transform(sents)
    y, classes = encode_tags(chunks[:n])
    with pm.Model(coords={"feature": vec.feature_names_, "label": classes}) as model:
        s = pm.HalfNormal("s", 1.0, shape=len(vec.templates_))
        w = pm.Normal("w", 0.0, s[vec.template_index_][:, None], dims=("feature", "label"))
        t = pm.Normal("t", 0.0, 1.0, shape=(len(classes), len(classes)))
        pmc.CRF("y", graphs=sequence_batch(vec.lengths_), node_features=X, node_weights=w,
                edge_weights=t, observed=y)
    return model


def _refine_table(n: int) -> None:
    model = _sketch_model(n)
    print("| sentences | fit | Laplace evaluations | wall (s) | F | scales |")
    print("|---|---|---|---|---|---|")
    tols = S.REFINE_GTOL, S.REFINE_FTOL
    rows = {}
    for name, refine, (gtol, ftol) in (("default", None, tols),
                                       ("ascent to gtol 1e-7, ftol 1e-13", None, (1e-7, 1e-13)),
                                       ("refine=False", False, tols)):
        S.REFINE_GTOL, S.REFINE_FTOL = gtol, ftol
        try:
            rows[name] = r = _fit(model, refine=refine)
        finally:
            S.REFINE_GTOL, S.REFINE_FTOL = tols
        print(f"| {n} | {name} | {r['evaluations']} | {r['wall']:.1f} | {r['F']:.6f} | "
              f"{np.array2string(r['scales'], precision=4)} |", flush=True)
    a, b = rows["default"], rows["ascent to gtol 1e-7, ftol 1e-13"]
    print(f"| {n} | default: {b['wall'] / a['wall']:.2f}x faster than the tighter ascent, "
          f"F {a['F'] - b['F']:+.2e} | | | | |")


def _fit(model: pm.Model, refine: bool | None = None) -> dict:
    calls = [0]
    point = S.laplace_point

    def counted(*args, **kwargs):
        calls[0] += 1
        return point(*args, **kwargs)

    S.laplace_point = counted
    try:
        t0 = time.perf_counter()
        res = pmc.fit(model, method="laplace", draws=5, random_seed=0, progressbar=False,
                      log_likelihood=False, refine=refine)
        wall = time.perf_counter() - t0
    finally:
        S.laplace_point = point
    d = res["diagnostics"]
    scales = res["fit"]["scales"].values
    return {"iterations": d.sizes["outer_iteration"], "evaluations": calls[0], "wall": wall,
            "F": float(d["scale_objective"].values[-1]),
            "at bound": int(np.sum(scales <= 1.0001 * S.SCALE_BOUNDS[0])), "n": scales.size,
            "scales": scales}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, nargs="*", default=[60, 300])
    ap.add_argument("--refine", type=int, default=None, metavar="N",
                    help="time the exact evidence ascent on the docs' sketch of N sentences")
    args = ap.parse_args(argv)
    if not data_dir("conll2000").exists():
        print(f"skipped: {data_dir('conll2000')} not found")
        return
    warnings.filterwarnings("ignore", category=FutureWarning)
    _fit(_model(10))  # compile the MAP kernels
    if args.refine is not None:
        _refine_table(args.refine)
    if not args.train:
        return
    print("| sentences | steps | outer iterations | Laplace evaluations | wall (s) | F | "
          "scales at the bound |")
    print("|---|---|---|---|---|---|---|")
    extrapolated, outer, search = S._extrapolated_step, S.OUTER_GTOL, S.search_scale

    def prior_whitened(sd, *laplace):
        return sd

    variants = {"default": (extrapolated, outer, search),
                "default, MAPs prior-whitened": (extrapolated, outer, prior_whitened),
                "MacKay's plain steps, strict prior-whitened MAPs": (lambda *a: None, 0.0,
                                                                     prior_whitened)}
    for n in args.train:
        model = _model(n)
        rows = {}
        for name, (step, tol, coords) in variants.items():
            S._extrapolated_step, S.OUTER_GTOL, S.search_scale = step, tol, coords
            try:
                rows[name] = r = _fit(model)
            finally:
                S._extrapolated_step, S.OUTER_GTOL, S.search_scale = extrapolated, outer, search
            print(f"| {n} | {name} | {r['iterations']} | {r['evaluations']} | {r['wall']:.1f} | "
                  f"{r['F']:.3f} | {r['at bound']} of {r['n']} |", flush=True)
        names = list(variants)
        for a, b in ((0, 1), (0, 2), (1, 2)):
            x, y = rows[names[a]], rows[names[b]]
            print(f"| {n} | {names[a]}: {y['wall'] / x['wall']:.2f}x faster than {names[b]}, "
                  f"F {x['F'] - y['F']:+.4f} | | | | | |", flush=True)


if __name__ == "__main__":
    main()
