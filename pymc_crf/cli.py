"""The ``pymc-crf`` command.

Subcommands: ``demo`` (fitters compared on the synthetic BCRF data; the default, so ``pymc-crf``
and ``pymc-crf --kind loop`` run it too), ``bench`` (the benchmark scripts of a source checkout),
``train`` / ``tag`` / ``evaluate`` (a :class:`pymc_crf.CRFTagger` on CoNLL column files or
crfsuite attribute files, see ``docs/tagger.md`` and :mod:`pymc_crf.columns`) and, where the
package ``pymc_crf.reproduce`` is installed, ``reproduce``.

Nothing heavy is imported before the first line is printed: PyMC, ArviZ and numba take many
seconds to import, and a first NUTS fit compiles the model (and, on a machine's first use, the
engine's kernels).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from pymc_crf.validation import int_at_least

__all__ = ["bench_scripts", "build_parser", "load_model", "main", "run_demo", "save_model"]

#: subcommands that live in their own subpackage ``pymc_crf.<name>``, exposing
#: ``add_arguments(parser)`` and ``run(args) -> int``; registered only where the package exists
PLUGINS = {"reproduce": "reproduce the papers' tables and figures"}

#: fitters the demo's model (a CRF) cannot run: the beta-process VI fits hidden CRFs only
DEMO_EXCLUDED = ("bp_hcrf_vi",)


def _fit_options(method: str, **candidates) -> dict:
    """The ``candidates`` the fitter ``method`` takes as keyword arguments."""
    from pymc_crf.fitters.registry import fitter

    params = inspect.signature(fitter(method)).parameters
    return {k: v for k, v in candidates.items() if k in params}


def run_demo(kind: str = "chain", n_train: int = 30, n_test: int = 1000, seed: int = 0,
             methods: tuple[str, ...] = ("map", "nuts"), draws: int = 1000, tune: int = 1000,
             chains: int = 2, out=None, progressbar: bool = True):
    """Fit the synthetic BCRF data by each method and print one comparison table.

    Each step is announced before it starts (a first NUTS fit compiles the model); the fits
    draw their own progress bars unless ``progressbar`` is False. ``draws``,
    ``tune`` and ``chains`` go to the MCMC fitters (those with a ``tune`` option), ``seed`` to
    every fitter as ``random_seed``.

    Returns
    -------
    (pandas.DataFrame, dict)
        The comparison table (also printed whole) and the results by method.
    """
    out = sys.stdout if out is None else out

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    import pandas as pd

    import pymc_crf as pmc

    train, test = pmc.datasets.bcrf_synthetic(kind, n_train=n_train, n_test=n_test, seed=seed)
    model = pmc.datasets.bcrf_model(train)
    say(f"data: bcrf_synthetic({kind!r}, n_train={n_train}, n_test={n_test}, seed={seed}); "
        f"{train.graphs}")
    results = {}
    for method in methods:
        opts = _fit_options(method, random_seed=seed, progressbar=progressbar)
        if "tune" in _fit_options(method, tune=tune):  # MCMC: the demo's chain settings
            opts.update(_fit_options(method, draws=draws, tune=tune, chains=chains))
        shown = ", ".join(f"{k}={v}" for k, v in opts.items() if k != "progressbar")
        note = (" (the first run on a machine compiles the model and its kernels)"
                if "tune" in opts else "")
        say(f"fitting {method}({shown}){note} ...")
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", category=FutureWarning)
                results[method] = pmc.fit(model, method=method, **opts)
        except ValueError as err:  # a fitter that refuses this model says why; the rest go on
            say(f"  {method} did not fit the demo's model: {err}")
            continue
        say(f"  fitted {method:>14s} in {time.perf_counter() - t0:7.2f} s")
    if not results:
        raise ValueError(f"none of the methods {', '.join(methods)} fits the demo's model")
    reference = "nuts" if "nuts" in results else None
    say("comparing on the test graphs ...")
    with warnings.catch_warnings():
        # the table's loo_warning column (explained below it) says where a Pareto k is too large
        warnings.filterwarnings("ignore", message="compare: the PSIS-LOO of",
                                category=UserWarning)
        table = pmc.compare(results, reference=reference, test=test, model=model)
    # The plug-in (BPE) error beside the model-averaged one.
    table["test_error_bpe"] = [pmc.predict(r, test, method="bpe").error_rate
                               for r in results.values()]
    with pd.option_context("display.float_format", "{:.4g}".format):
        say(table.to_string())
    legend = {
        "wall_time": "the fitter's own time in s (attrs['wall_time']; the 'fitted <method> in' "
                     "times above also count reading the model and building the result)",
        "mean_abs_err": f"mean |posterior mean - {reference}'s| over the weights",
        "sd_ratio": f"mean ratio of posterior sds to {reference}'s (NaN: one-point fit)",
        "cvm": f"Cramer-von Mises score of the draws against {reference}'s (Welling & "
               "Parise 2006, eq. 23; 0 is identical)",
        "test_error": "error rate of the posterior-averaged marginals on the test graphs",
        "test_error_bpe": "error rate of the marginals at the posterior mean",
        "min_ess": "smallest effective sample size over the weights (MCMC)",
        "max_rhat": "largest R-hat over the weights (MCMC)",
        "converged": "loopy BP converged on every graph (at the MAP, or in every draw)",
        "bound_ok": "BP's Bethe log Z nowhere below the score of a single labelling",
        "log_marginal_likelihood": "the method's estimate of the log evidence of the "
                                   "training data (NaN: the method gives none)",
        "elpd_loo": "PSIS-LOO over graphs, elpd_loo_se its standard error, p_loo the "
                    "effective number of parameters (NaN: one-point fit)",
        "loo_warning": "True: some graph's Pareto k is too large, do not trust elpd_loo",
    }
    say("columns:")
    for col in table.columns:
        if col in legend:
            say(f"  {col}: {legend[col]}")
    return table, results


def _method_list(text: str) -> tuple[str, ...]:
    """An argparse type: comma-separated fitter names (checked against the registry later, once
    pymc_crf is imported), or ``all``."""
    names = tuple(m.strip() for m in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"empty method name in {text!r}")
    return names


def repository_root() -> Path:
    """The source checkout holding this package (the folder with ``pyproject.toml``)."""
    return Path(__file__).resolve().parent.parent


def bench_scripts() -> dict[str, Path]:
    """The benchmark scripts by name (file stem) of the checkout's ``bench/`` folder.

    Raises
    ------
    FileNotFoundError
        When pymc_crf is not run from a source checkout (an installed wheel has no ``bench/``).
    """
    root = repository_root()
    folder = root / "bench"
    if not folder.is_dir() or not (root / "pyproject.toml").is_file():
        raise FileNotFoundError(
            f"the benchmarks live in the bench/ folder of a source checkout, and there is none at "
            f"{folder}: clone the repository and install it with pip install -e .")
    return {p.stem: p for p in sorted(folder.glob("*.py")) if not p.stem.startswith("_")}


def _summary(path: Path) -> str:
    """The first sentence of a script's docstring (read, not run), joined across its wrapped
    lines."""
    doc = ast.get_docstring(ast.parse(path.read_text()))
    if not doc:
        return ""
    para = " ".join(doc.split("\n\n")[0].split())
    end = re.search(r"\.\s+[A-Z]", para)  # not the dot of "ch. 3"
    return para if end is None else para[:end.start() + 1]


def _run_bench(args, parser: argparse.ArgumentParser) -> int:
    try:
        scripts = bench_scripts()
    except FileNotFoundError as err:
        parser.error(str(err))
    if args.list or args.name is None:
        width = max(map(len, scripts))
        for name, path in scripts.items():
            print(f"{name:<{width}}  {_summary(path)}")
        return 0
    name = args.name if args.name in scripts else f"bench_{args.name}"
    if name not in scripts:
        parser.error(f"no benchmark {args.name!r}; choose from {', '.join(scripts)} "
                     "(pymc-crf bench --list)")
    print(f"pymc-crf bench: running {scripts[name].relative_to(repository_root())} "
          f"{' '.join(args.script_args)}".rstrip(), flush=True)
    return subprocess.run([sys.executable, str(scripts[name]), *args.script_args],
                          cwd=repository_root(), check=False).returncode


def _run_demo_command(args, parser: argparse.ArgumentParser) -> int:
    print(f"pymc-crf demo: {args.kind} data, methods {','.join(args.methods)}; importing PyMC "
          "and pymc_crf ...", flush=True)
    import pymc_crf as pmc

    valid = [m for m in pmc.fitters.available() if m not in DEMO_EXCLUDED]
    methods = tuple(valid) if args.methods == ("all",) else args.methods
    hcrf_only = [m for m in methods if m in DEMO_EXCLUDED]
    if hcrf_only:
        parser.error(f"argument --methods: {', '.join(map(repr, hcrf_only))} fits hidden CRFs "
                     "(pmc.HCRF); the demo model is a CRF (see examples/hcrf_japanese_vowels.py)")
    unknown = [m for m in methods if m not in valid]
    if unknown:
        parser.error(f"argument --methods: unknown {', '.join(map(repr, unknown))}; choose from "
                     f"{', '.join(valid)} or 'all'")
    np.set_printoptions(precision=4)
    run_demo(args.kind, args.n_train, args.n_test, args.seed, methods, args.draws, args.tune,
             args.chains, progressbar=not args.no_progressbar)
    return 0


def _add_demo_arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--kind", choices=("chain", "loop"), default="chain",
                      help="the synthetic data of Qi, Szummer & Minka 2005, sec. 8.1")
    demo.add_argument("--n-train", type=int_at_least(1), default=30, help="training graphs")
    demo.add_argument("--n-test", type=int_at_least(1), default=1000, help="test graphs")
    demo.add_argument("--seed", type=int_at_least(0), default=0)
    demo.add_argument("--methods", type=_method_list, default=("map", "nuts"),
                      help="comma-separated fitters (default map,nuts), or 'all'")
    demo.add_argument("--draws", type=int_at_least(1), default=1000)
    demo.add_argument("--tune", type=int_at_least(0), default=1000)
    demo.add_argument("--chains", type=int_at_least(1), default=2)
    demo.add_argument("--no-progressbar", action="store_true", help="no progress bars")


_WARM_UP_HELP = ("Compile the numba kernels of every inference engine and a small model once: "
                 "numba keeps them in its disk cache, so later processes start at once. Needed "
                 "once per machine (and after upgrading pymc_crf or numba); without it each "
                 "kernel compiles on first use.")


def _run_warm_up(args) -> int:
    from pymc_crf.warm_up import warm_up

    times = warm_up()
    print(f"warm-up: done in {sum(times.values()):.1f} s")
    return 0


# -- train / tag / evaluate: a CRFTagger on files ------------------------------------------------

def _option(text: str) -> tuple[str, object]:
    """An argparse type: ``KEY=VALUE`` with VALUE a Python literal (else the string)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. ftol=1e-6); got {text!r}")
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        parsed = value
    return key.strip(), parsed


def _c2(text: str) -> float | str:
    """An argparse type: ``--c2``, a number > 0, ``evidence`` or ``learned``."""
    if text in ("evidence", "learned"):
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--c2 takes a number > 0, 'evidence' or 'learned'; "
                                         f"got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"--c2 must be > 0; got {text}")
    return value


def _column_names(text: str) -> tuple[str, ...]:
    names = tuple(n for n in re.split(r"[,\s]+", text.strip()) if n)
    if not names:
        raise argparse.ArgumentTypeError("--columns needs at least one name")
    return names


def save_model(tagger, path: str | Path) -> None:
    """Save a fitted ``CRFTagger``: netCDF for a ``.nc`` file (``CRFTagger.to_netcdf``), else
    joblib."""
    if Path(path).suffix == ".nc":
        tagger.to_netcdf(path)
    else:
        import joblib

        joblib.dump(tagger, path)


def load_model(path: str | Path):
    """A ``CRFTagger`` saved by :func:`save_model` (netCDF or joblib, told by the file's
    first bytes) that records its feature format (``metadata_["features"]``)."""
    from pymc_crf.tagger import CRFTagger

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file {path} not found (write one with pymc-crf train)")
    with open(path, "rb") as fh:
        magic = fh.read(8)
    not_a_model = (f"{path} is not a model written by pymc-crf train (a CRFTagger that "
                   "records its feature format)")
    try:
        if magic.startswith(b"\x89HDF") or magic.startswith(b"CDF"):
            tagger = CRFTagger.from_netcdf(path)
        else:
            import joblib

            tagger = joblib.load(path)
    except (OSError, ValueError) as err:
        raise ValueError(f"{not_a_model}: {err}") from None
    except Exception as err:  # noqa: BLE001 - unpickling a file that is no pickle
        raise ValueError(f"{not_a_model}: it could not be read ({type(err).__name__}: "
                         f"{err})") from None
    if not isinstance(tagger, CRFTagger) or "features" not in getattr(tagger, "metadata_", {}):
        raise ValueError(not_a_model)
    return tagger


def _writable(path: str | Path, what: str) -> None:
    """Raise a clear OSError unless a file can be written at ``path`` (checked before the
    work whose result goes there)."""
    if str(path) == "-":
        return
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise OSError(f"{what} {path} is a folder, not a file name")
    if not folder.is_dir():
        raise OSError(f"{what} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise OSError(f"{what} {path}: not writable")


def _feature_spec(args):
    from pymc_crf.columns import FeatureSpec, Template

    if args.format == "attributes":
        if args.template is not None:
            raise ValueError("--template is for column files; attribute files (--format "
                             "attributes) carry their features")
        return FeatureSpec("attributes")
    text = None
    if args.template is not None:
        text = Template.read(args.template, args.columns).text  # checked now, saved as text
    return FeatureSpec("columns", text, args.columns)


def _say(text: str, quiet: bool = False, err: bool = False) -> None:
    if not quiet:
        print(text, file=sys.stderr if err else sys.stdout, flush=True)


def _run_train(args, parser: argparse.ArgumentParser) -> int:
    t0 = time.perf_counter()
    if args.prior_sd is not None and args.c2 is not None:
        parser.error("give --c2 or --prior-sd, not both (each sets the prior sd)")
    if args.scale_option and args.c2 != "learned":
        parser.error("--scale-option sets the Gibbs sweeps of --c2 learned; this run has "
                     f"--c2 {args.c2 if args.c2 is not None else 1.0}")
    args.c2 = 1.0 if args.c2 is None else args.c2
    _say(f"pymc-crf train: {args.train}; importing PyMC and pymc_crf ...")
    from pymc_crf.tagger import CRFTagger

    _say(f"reading {args.train} ...")
    try:
        _writable(args.model, "model file")
        spec = _feature_spec(args)
        X, y, _ = spec.read(args.train, training=True)
        dev = spec.read(args.dev, training=False, labelled=True) if args.dev else None
    except (ValueError, OSError) as err:
        parser.error(str(err))
    if dev is not None and dev[1] is None:
        parser.error(f"--dev {args.dev}: the file has no tag column")
    n_tok = sum(map(len, X))
    _say(f"  {len(X)} sentences, {n_tok} tokens ({time.perf_counter() - t0:.1f} s)")

    tagger = CRFTagger(c2=args.c2, prior_sd=args.prior_sd, method=args.method,
                       method_options=dict(args.option), min_freq=args.min_freq,
                       random_state=args.seed, scale_options=dict(args.scale_option) or None,
                       progressbar=not args.no_progressbar)
    tagger.metadata_ = {"features": spec.to_json(), "train_file": str(args.train)}
    try:
        sd = tagger._prior_sd()
    except ValueError as err:
        parser.error(str(err))
    prior = {"evidence": "prior sd by the Laplace evidence",
             "learned": "prior sds per template and count bucket integrated over by Gibbs "
                        "sweeps, then the fit at their posterior means"}.get(sd)
    _say(f"fitting {args.method} ({prior or f'prior sd {sd:.4g}'}) ...")
    t1 = time.perf_counter()
    try:
        tagger.fit(X, y, *(dev[:2] if dev is not None else (None, None)))
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    _say(f"  {len(tagger.vectorizer_.feature_names_)} features, {len(tagger.classes_)} tags; "
         f"fitted in {time.perf_counter() - t1:.1f} s")
    if sd == "evidence":  # the choice is the step's outcome; the model file keeps it as c2_
        _say(f"  c2 chosen by the evidence: {tagger.c2_:.4g} (prior sd "
             f"{(2.0 * tagger.c2_) ** -0.5:.4g})")
    if dev is not None:
        _say(f"  dev token accuracy {100 * tagger.dev_score_:.2f} % ({args.dev})")
    try:
        save_model(tagger, args.model)
    except OSError as err:
        parser.error(f"model file {args.model}: {err}")
    _say(f"model written to {args.model}")
    return 0


def _tag_file(args, parser):
    """The tagger, the file's features, gold tags (None without a tag column), the predicted
    tags, their marginals (with ``--marginals``) and the tokens (with ``--with-tokens``)."""
    try:
        tagger = load_model(args.model)
    except (ValueError, OSError) as err:
        parser.error(str(err))
    from pymc_crf.columns import FeatureSpec

    spec = FeatureSpec.from_json(tagger.metadata_["features"])
    if getattr(args, "with_tokens", False) and spec.format == "attributes":
        parser.error("--with-tokens writes a column file's first column; this model reads "
                     "crfsuite attribute files, which have no token column")
    path, tmp = args.input, None
    if str(path) == "-":  # read twice (features, tokens): keep standard input in a file
        import tempfile

        # its bytes, not its text: gzip data (told by its magic bytes when the file is read)
        # is no text in the locale's encoding, and a plain file is then read as UTF-8, as any
        # named file is
        stdin = getattr(sys.stdin, "buffer", None)
        data = stdin.read() if stdin is not None else sys.stdin.read().encode("utf-8")
        with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as fh:
            fh.write(data)
        path = tmp = Path(fh.name)
    try:
        # evaluate needs the labels: an attribute file missing some is refused with the line
        X, gold, _ = spec.read(path, training=False, labelled=args.command == "evaluate")
        tokens = spec.tokens(path) if getattr(args, "with_tokens", False) else None
    except (ValueError, OSError) as err:
        parser.error(str(err).replace(str(tmp), "<stdin>") if tmp else str(err))
    finally:
        if tmp is not None:
            tmp.unlink()
    pred, marg = tagger._tag(X, getattr(args, "marginals", False),
                             average=not getattr(args, "no_average", False))
    return tagger, X, gold, pred, marg, tokens


def _run_tag(args, parser: argparse.ArgumentParser) -> int:
    from pymc_crf.columns import open_text, write_tags

    _say(f"pymc-crf tag: {args.input} with {args.model} ...", err=True)
    try:
        _writable(args.output, "--output")
    except OSError as err:
        parser.error(str(err))
    _, X, _, pred, marg, tokens = _tag_file(args, parser)
    try:
        with open_text(args.output, "w") as fh:
            write_tags(fh, pred, marginals=marg, tokens=tokens, digits=args.digits)
    except BrokenPipeError:  # `pymc-crf tag ... | head`: the reader has all it wants
        _quiet_broken_stdout()
        return 0
    where = "" if str(args.output) == "-" else f"; written to {args.output}"
    _say(f"  {len(X)} sentences, {sum(map(len, X))} tokens tagged{where}", err=True)
    return 0


def _quiet_broken_stdout() -> None:
    """After a BrokenPipeError on standard output: point it at devnull, so Python's flush at
    exit does not raise again (the recipe of the signal module's documentation)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _run_evaluate(args, parser: argparse.ArgumentParser) -> int:
    from pymc_crf.metrics import chunk_f1

    _say(f"pymc-crf evaluate: {args.input} with {args.model} ...")
    tagger, X, gold, pred, _, _ = _tag_file(args, parser)
    if gold is None:
        parser.error(f"{args.input} has no tag column to evaluate against (it has the model's "
                     "feature columns only)")
    flat_gold = [t for s in gold for t in s]
    unseen_set = set(flat_gold) - set(tagger.classes_)
    unseen = sorted(unseen_set)
    if unseen:
        # counted as errors, rightly, but a 0 % accuracy from a file whose "tags" are features
        # (an attribute file without its label field) or another tag set looked like a result;
        # counted against the set: that file has as many unseen "tags" as words
        n = sum(t in unseen_set for t in flat_gold)
        hint = (" (tags with '=': is the first tab-separated field, the label, missing?)"
                if any("=" in t for t in unseen) else "")
        _say(f"warning: {n} of {len(flat_gold)} gold tags are not among the model's "
             f"{len(tagger.classes_)} tags and are counted as errors: "
             f"{', '.join(map(repr, unseen[:5]))}{' ...' if len(unseen) > 5 else ''}{hint}",
             err=True)
    flat_pred = [t for s in pred for t in s]
    acc = 100.0 * float(np.mean([a == b for a, b in zip(flat_gold, flat_pred, strict=True)]))
    print(f"{len(X)} sentences, {len(flat_gold)} tokens")
    print(f"token accuracy {acc:.2f} %")
    try:
        score = chunk_f1(gold, pred)
    except ValueError as err:
        print(f"chunk F1: not computed ({err})")
    else:
        print(f"chunk F1 {score.f1:.2f} (precision {score.precision:.2f}, recall "
              f"{score.recall:.2f}; {score.n_gold} gold chunks, {score.n_pred} predicted, "
              f"{score.n_correct} correct)")
    return 0


def _add_file_arguments(train, tag, evaluate) -> None:
    train.add_argument("train", help="training file: CoNLL columns (token ... tag) or crfsuite "
                       "attributes (label<TAB>attr...); plain or gzip")
    train.add_argument("-m", "--model", required=True,
                       help="model file to write (.nc: netCDF; else joblib)")
    train.add_argument("--format", choices=("columns", "attributes"), default="columns",
                       help="input format (default columns)")
    train.add_argument("--template", help="feature template file (default: token_features of the word "
                       "and POS columns, sklearn-crfsuite's tutorial features)")
    train.add_argument("--columns", type=_column_names, default=("w", "pos"),
                       help="names of the feature columns the template uses (default 'w,pos')")
    train.add_argument("--c2", type=_c2, default=None,
                       help="CRFsuite's L2 coefficient (prior sd 1/sqrt(2 c2)); default 1. "
                       "'evidence': one prior sd chosen by the Laplace evidence; 'learned': one "
                       "per feature template and count bucket, integrated over (CRFTagger's c2)")
    train.add_argument("--prior-sd", type=float, default=None, help="prior sd instead of --c2")
    train.add_argument("--method", default="map", help="a pmc.fit method (default map)")
    train.add_argument("--option", type=_option, action="append", default=[],
                       metavar="KEY=VALUE", help="a fitter option, e.g. ftol=1e-6 (repeatable)")
    train.add_argument("--scale-option", type=_option, action="append", default=[],
                       metavar="KEY=VALUE", help="--c2 learned: an option of its Gibbs sweeps, "
                       "e.g. draws=30 (repeatable; CRFTagger's scale_options)")
    train.add_argument("--min-freq", type=int_at_least(1), default=1,
                       help="keep features seen in at least this many tokens")
    train.add_argument("--dev", help="held-out file: its token accuracy is reported")
    train.add_argument("--seed", type=int_at_least(0), default=None)
    train.add_argument("--no-progressbar", action="store_true", help="no progress bar")
    for p in (tag, evaluate):
        p.add_argument("model", help="model file written by pymc-crf train")
    tag.add_argument("input", help="file to tag, in the model's format (with or without the "
                     "tag column); plain or gzip; - for standard input")
    evaluate.add_argument("input", help="tagged file, in the model's format with the tag column; "
                          "plain or gzip; - for standard input")
    tag.add_argument("-o", "--output", default="-", help="output file (default standard output; "
                     ".gz: gzip)")
    tag.add_argument("--marginals", action="store_true",
                     help="append tag:probability for every tag to each line")
    tag.add_argument("--no-average", action="store_true", help="marginals at the posterior "
                     "mean even when the fit has several draws")
    tag.add_argument("--with-tokens", action="store_true",
                     help="write the token (first column) before its tag")
    tag.add_argument("--digits", type=int_at_least(1), default=4,
                     help="decimals of the marginals (default 4)")


def _plugin_installed(name: str) -> bool:
    """Whether the subpackage ``pymc_crf.<name>`` exists (looked up without importing it)."""
    here = Path(__file__).resolve().parent
    return (here / name / "__init__.py").is_file() or (here / f"{name}.py").is_file()


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``pymc-crf`` argument parser.

    A plugin subcommand's own arguments are added (its package imported) only when ``argv``
    chooses it, so that the other subcommands start without importing it.
    """
    parser = argparse.ArgumentParser(
        prog="pymc-crf", description="Bayesian conditional random fields for PyMC. 'demo' is the "
        "default subcommand: 'pymc-crf' and 'pymc-crf --kind loop' run it.")
    sub = parser.add_subparsers(dest="command",
                                metavar="{demo,train,tag,evaluate,warm-up,bench,...}")
    demo = sub.add_parser("demo", help="fit the synthetic BCRF data by several methods and compare",
                          description=run_demo.__doc__.splitlines()[0])
    _add_demo_arguments(demo)
    demo.set_defaults(run=lambda args: _run_demo_command(args, demo))
    bench = sub.add_parser("bench", help="run a benchmark script of the checkout's bench/ folder",
                           description="Run a benchmark script by name (file stem, 'bench_' "
                           "optional) with its own arguments, from the repository root.")
    bench.add_argument("--list", action="store_true", help="list the benchmarks")
    bench.add_argument("name", nargs="?", help="the benchmark, e.g. bench_chain or chain")
    bench.add_argument("script_args", nargs=argparse.REMAINDER,
                       help="arguments for the script (e.g. --repeats 10)")
    bench.set_defaults(run=lambda args: _run_bench(args, bench))
    warm = sub.add_parser("warm-up", help="compile every inference kernel once (first use on "
                          "this machine)", description=_WARM_UP_HELP)
    warm.set_defaults(run=_run_warm_up)
    train = sub.add_parser("train", help="train a CRF tagger on a CoNLL column or crfsuite "
                           "attribute file", description="Train a pymc_crf.CRFTagger on a "
                           "tagged file and write the model.")
    tag = sub.add_parser("tag", help="tag a file with a trained model",
                         description="Tag a file with a model written by pymc-crf train: one "
                         "tag a line, a blank line between sentences.")
    evaluate = sub.add_parser("evaluate", help="token accuracy and chunk F1 of a model on a "
                              "tagged file", description="Tag a tagged file with a model and "
                              "print token accuracy and chunk F1 (conlleval rules, BIO or BIOES tags).")
    _add_file_arguments(train, tag, evaluate)
    train.set_defaults(run=lambda args: _run_train(args, train))
    tag.set_defaults(run=lambda args: _run_tag(args, tag))
    evaluate.set_defaults(run=lambda args: _run_evaluate(args, evaluate))
    for name, help_text in PLUGINS.items():
        if not _plugin_installed(name):
            continue
        plugin = sub.add_parser(name, help=help_text, description=help_text[0].upper()
                                + help_text[1:] + ".")
        if argv and name in argv:
            module = importlib.import_module(f"pymc_crf.{name}")
            module.add_arguments(plugin)
            plugin.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``pymc-crf`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["demo", *argv]  # the demo is the default subcommand
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the subcommand's parser, with its usage (not the top level's)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices.get(getattr(args, "command", None), parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    if not hasattr(args, "run"):  # a plugin without its arguments added
        parser.error(f"{args.command}: could not load pymc_crf.{args.command}")
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
