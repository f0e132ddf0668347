"""The ``pymc-crf`` command.

Subcommands: ``demo`` (fitters compared on the synthetic BCRF data; the default, so ``pymc-crf``
and ``pymc-crf --kind loop`` run it too), ``bench`` (the benchmark scripts of a source checkout) and,
where the package ``pymc_crf.reproduce`` is installed, ``reproduce``.

Nothing heavy is imported before the first line is printed: PyMC, ArviZ and numba take many
seconds to import, and a first NUTS fit compiles the model for a minute or more.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from pymc_crf.validation import int_at_least

__all__ = ["bench_scripts", "build_parser", "main", "run_demo"]

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

    Each step is announced before it starts (a first NUTS fit compiles the model for a minute or
    two); the fits draw their own progress bars unless ``progressbar`` is False. ``draws``,
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
        note = (" (the first run compiles the model: a minute or two)"
                if "tune" in opts else "")
        say(f"fitting {method}({shown}){note} ...")
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=FutureWarning)
            results[method] = pmc.fit(model, method=method, **opts)
        say(f"  fitted {method:>14s} in {time.perf_counter() - t0:7.2f} s")
    reference = "nuts" if "nuts" in results else None
    say("comparing on the test graphs ...")
    table = pmc.compare(results, reference=reference, test=test)
    # The plug-in (BPE) error beside the model-averaged one.
    table["test_error_bpe"] = [pmc.predict(r, test, method="bpe").error_rate
                               for r in results.values()]
    with pd.option_context("display.float_format", "{:.4g}".format):
        say(table.to_string())
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
    sub = parser.add_subparsers(dest="command", metavar="{demo,warm-up,bench,...}")
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
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):  # a plugin without its arguments added
        parser.error(f"{args.command}: could not load pymc_crf.{args.command}")
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
