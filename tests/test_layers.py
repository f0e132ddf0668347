"""The layer order of docs/architecture.md holds for every import inside pymc_crf, at module level
and inside functions: top (predict, compare, cli, ...) -> fitters (the method plugins) ->
step_methods -> model (the weight-space layer) -> datasets -> distributions -> ops -> inference ->
graphs, each layer a rank of its own, with ``allocation``, ``feature_products`` (which uses it),
``potentials`` (which uses that), ``kernel_cache`` (which every numba kernel module imports),
``threads``, ``validation``, ``text_files`` and ``docstrings``
importable by all and importing nothing else of the package."""

import ast
from pathlib import Path

import pytest

import pymc_crf

ROOT = Path(pymc_crf.__file__).parent

#: rank of each layer: a module may import modules of its own rank or below; above the shared
#: helpers (rank 0) no two layers share a rank
RANKS = {"potentials": 0, "feature_products": 0, "allocation": 0, "kernel_cache": 0, "threads": 0,
         "validation": 0, "compile_notice": 0, "text_files": 0, "docstrings": 0, "graphs": 1, "inference": 2,
         "ops": 3, "distributions": 4, "datasets": 5, "model": 6, "step_methods": 7, "fitters": 8}
TOP = 9  # predict, compare, cli, plots and any other top-level module


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def rank(module: str) -> int | None:
    """Layer rank of a ``pymc_crf...`` module name (None for the package itself)."""
    parts = module.split(".")
    if parts == ["pymc_crf"]:
        return None
    return RANKS.get(parts[1], TOP)


def imports(tree: ast.AST, module: str) -> list[tuple[int, str]]:
    """``(line, imported pymc_crf module)`` of every import statement anywhere in the tree."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: resolve against the importing package
                base = module.split(".")[:-node.level] if node.level else []
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((node.lineno, name))
            # "from pymc_crf import predict" imports the module pymc_crf.predict
            if name == "pymc_crf":
                out += [(node.lineno, f"pymc_crf.{a.name}") for a in node.names]
    return [(line, name) for line, name in out if name.startswith("pymc_crf")]


def upward_imports(sources: dict[str, str]) -> list[str]:
    """Every import of a module from a higher layer, as ``"importer:line -> imported"``."""
    bad = []
    for module, text in sources.items():
        r = rank(module)
        if r is None:
            continue
        for line, target in imports(ast.parse(text), module):
            t = rank(target)
            if t is not None and t > r:
                bad.append(f"{module}:{line} -> {target}")
    return bad


def test_no_module_imports_a_higher_layer():
    sources = {_module(p): p.read_text() for p in ROOT.rglob("*.py")}
    assert len(sources) > 30
    assert upward_imports(sources) == []


@pytest.mark.parametrize("text,ok", [
    ("from pymc_crf.inference.base import Engine", True),
    ("import numpy as np", True),
    ("from pymc_crf.predict import predict", False),
    ("def f():\n    from pymc_crf.fitters.registry import fit\n", False),
    ("from pymc_crf import fitters", False),
    ("from pymc_crf.potentials import log_potential", True),
])
def test_the_check_catches_upward_and_lazy_imports(text, ok):
    """The check itself on a made-up ``distributions`` module: module-level and in-function imports
    of a higher layer are both caught, imports of lower layers and of other packages are not."""
    assert (upward_imports({"pymc_crf.distributions.fake": text}) == []) == ok


@pytest.mark.parametrize("importer,imported,ok", [
    ("pymc_crf.fitters.map", "pymc_crf.step_methods.base", True),
    ("pymc_crf.fitters.map", "pymc_crf.model.spec", True),
    ("pymc_crf.step_methods.base", "pymc_crf.model.random_field", True),
    ("pymc_crf.step_methods.base", "pymc_crf.fitters.bethe_laplace.laplace", False),
    ("pymc_crf.model.results", "pymc_crf.step_methods.field", False),
    ("pymc_crf.model.results", "pymc_crf.fitters.registry", False),
])
def test_method_plugins_sit_above_the_step_methods_which_sit_above_the_model_layer(
        importer, imported, ok):
    """No two layers above the shared helpers share a rank: the method plugins (fitters) import
    the step methods and the model layer, never the other way round."""
    assert len(set(RANKS.values()) - {0}) == len([r for r in RANKS.values() if r])
    assert (upward_imports({importer: f"import {imported}"}) == []) == ok


def test_potentials_import_nothing_of_the_package_but_the_feature_products():
    assert {name for _, name in imports(ast.parse((ROOT / "allocation.py").read_text()),
                                        "pymc_crf.allocation")} == {"pymc_crf.kernel_cache"}
    assert {name for _, name in imports(ast.parse((ROOT / "feature_products.py").read_text()),
                                        "pymc_crf.feature_products")} == {"pymc_crf.allocation"}
    assert {name for _, name in imports(ast.parse((ROOT / "potentials.py").read_text()),
                                        "pymc_crf.potentials")} == {"pymc_crf.feature_products",
                                                                    "pymc_crf.kernel_cache"}


@pytest.mark.parametrize("name", ["threads", "validation", "compile_notice", "text_files",
                                  "docstrings", "kernel_cache"])
def test_the_rank_0_helpers_import_nothing_of_the_package(name):
    """The helpers every layer may import (``docstrings`` among them, for ``fill_doc``) import
    nothing of the package themselves."""
    assert RANKS[name] == 0
    assert imports(ast.parse((ROOT / f"{name}.py").read_text()), f"pymc_crf.{name}") == []
