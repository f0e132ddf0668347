"""Package layering: module-level imports inside pymc_crf form no cycle (lower modules never import
upper ones; imports inside functions or under TYPE_CHECKING do not run at import time and are
listed separately)."""

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

import pymc_crf

ROOT = Path(pymc_crf.__file__).parent


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _import_graph(top_level: bool) -> nx.DiGraph:
    """Edges module -> imported pymc_crf module: module-level imports (``top_level``) or the
    imports inside functions."""
    g = nx.DiGraph()
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    for name, path in modules.items():
        g.add_node(name)
        tree = ast.parse(path.read_text())
        if top_level:
            nodes = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        else:
            nodes = [n for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                     for n in ast.walk(f) if isinstance(n, ast.Import | ast.ImportFrom)]
        for node in nodes:
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""])
            for t in targets:
                if t.startswith("pymc_crf") and t != name:
                    g.add_edge(name, t)
    return g


def test_no_import_cycles_at_module_level():
    g = _import_graph(top_level=True)
    # a package's __init__ re-exports its modules; a cycle through it is not an import cycle
    # between modules, so the packages themselves are left out
    packages = {n for n in g if (ROOT.parent / n.replace(".", "/") / "__init__.py").exists()}
    cycles = list(nx.simple_cycles(g.subgraph(set(g) - packages)))
    assert cycles == []


def test_graphs_and_inference_have_no_function_level_imports_of_each_other():
    lazy = _import_graph(top_level=False)
    low = [(a, b) for a, b in lazy.edges
           if a.startswith(("pymc_crf.graphs", "pymc_crf.inference"))]
    assert low == []


def test_every_subpackage_imports_first_in_a_fresh_interpreter():
    # a cycle through a package __init__ (fitters registers the sampler fitters, which use the
    # step methods, which read models through the fitters) breaks only the import order that
    # enters it from the other side; each public subpackage is imported first, pymc_crf's
    # modules dropped in between
    code = (
        "import sys, importlib\n"
        "import pymc_crf\n"
        "names = sorted(pymc_crf._SUBPACKAGES)\n"
        "for name in names:\n"
        "    for m in [m for m in sys.modules if m.startswith('pymc_crf')]:\n"
        "        del sys.modules[m]\n"
        "    pmc = importlib.import_module('pymc_crf')\n"
        "    sub = getattr(pmc, name)\n"
        "    [getattr(sub, n) for n in getattr(sub, '__all__', [])]\n"
        "print(len(names))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) >= 5
