"""Sphinx configuration: PyData theme, MyST-NB pages and notebooks, autodoc + numpydoc API pages.

Build (from the repository root; warnings are errors):

    .venv/bin/python -m sphinx -W --keep-going -b html docs docs/_build/html

The example notebooks are the jupytext percent scripts of ``examples/`` (``docs/examples`` is a
symlink to that folder). They are rendered without running them; set ``PYMC_CRF_DOCS_EXECUTE=1`` to
execute them in their smoke setting (``PYMC_CRF_SMOKE=1``, cached by jupyter-cache) so the pages
show their tables and figures.
"""

import importlib
import os
import re
import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document this checkout, not an installed copy

import pymc_crf  # noqa: E402
from pymc_crf.datasets.text import absent_data  # noqa: E402

project = "pymc_crf"
author = "pymc_crf developers"
copyright = "pymc_crf developers, MIT license"
release = version = pymc_crf.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_nb",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".py": "myst-nb"}
# The examples are jupytext percent scripts; conf.py is not a page.
nb_custom_formats = {".py": ["jupytext.reads", {"fmt": "py:percent"}]}
exclude_patterns = ["_build", "conf.py", "**/__pycache__", "**/.ipynb_checkpoints"]

EXECUTE = os.environ.get("PYMC_CRF_DOCS_EXECUTE") == "1"
if EXECUTE:
    # the notebook kernels inherit this environment: smoke setting, this checkout's package
    os.environ.setdefault("PYMC_CRF_SMOKE", "1")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])

# An example whose data set this machine lacks is shown unexecuted (code and text, no outputs):
# executed, it stops at its "skipped: ... not found" exit, which a kernel reports as a failure.
nb_execution_excludepatterns = [
    f"examples/{p.name}" for p in sorted((ROOT / "examples").glob("*.py"))
    if absent_data(p.read_text(encoding="utf-8"))]
nb_execution_mode = "cache" if EXECUTE else "off"
nb_execution_timeout = 1800
nb_execution_raise_on_error = True
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

# autodoc + numpydoc: member lists come from each module's __all__, so new public names appear
# without editing these pages.
autodoc_default_options = {"members": True, "member-order": "groupwise"}
autodoc_typehints = "none"  # numpydoc renders the types from the docstrings
autosummary_generate = False
numpydoc_show_class_members = False
numpydoc_validation_checks: set[str] = set()
numpydoc_xref_param_type = False

html_theme = "pydata_sphinx_theme"
html_title = f"pymc_crf {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_static_path: list[str] = []

# ---------------------------------------------------------------- one home for every public name
# Names exported by ``pymc_crf`` are documented on the top-level page (``pymc_crf.fit``, ...); the
# subpackage pages list their other names. Documenting a class twice would register its canonical
# path twice, which Sphinx reports as a duplicate object.
_TOP = {name: getattr(pymc_crf, name) for name in pymc_crf.__all__}
_current_module: dict[str, str] = {}


def _note_module(app, what, name, obj, options, lines):
    if what == "module":
        _current_module["name"] = name


def _skip_member(app, what, name, obj, skip, options):
    if what == "class" and name.startswith("set_") and name.endswith("_request"):
        return True  # scikit-learn's generated metadata-routing methods (CRFTagger)
    if what != "module":
        return None
    if _current_module.get("name") == "pymc_crf":
        # submodules have their own pages
        return True if isinstance(obj, type(sys)) else None
    if name in _TOP and _TOP[name] is obj:
        return True
    return None


# Docstrings written as plain numpy text use ``(S, *shape)`` in types; escape the star (outside
# ``literals``) so docutils does not read it as the start of an emphasis.
_STAR = re.compile(r"(?<=[(\[,] )\*(?=\w)|(?<=[(\[])\*(?=\w)")


def _escape_stars(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        parts = line.split("``")
        parts[::2] = [_STAR.sub(r"\\*", p) for p in parts[::2]]
        lines[i] = "``".join(parts)


class AutoAll(SphinxDirective):
    """``.. autoall:: module``: autodoc entries for the names of ``module.__all__`` that the
    top-level page does not document, under a non-indexed module target (for modules whose name
    the package re-binds, e.g. ``pymc_crf.predict`` is both a module and the function)."""

    required_arguments = 1

    def run(self):
        modname = self.arguments[0]
        module = importlib.import_module(modname)
        lines = [f".. py:module:: {modname}", "   :no-index:", ""]
        for name in module.__all__:
            obj = getattr(module, name)
            if name in _TOP and _TOP[name] is obj:
                continue
            kind = ("autoexception" if isinstance(obj, type) and issubclass(obj, BaseException)
                    else "autoclass" if isinstance(obj, type)
                    else "autofunction" if callable(obj) else "autodata")
            lines += [f".. {kind}:: {modname}.{name}", ""]
        node = nodes.section()
        nested_parse_with_titles(self.state, StringList(lines, source=""), node)
        return node.children


def setup(app):
    app.connect("autodoc-process-docstring", _note_module)
    app.connect("autodoc-process-docstring", _escape_stars, priority=400)  # before numpydoc
    app.connect("autodoc-skip-member", _skip_member)
    app.add_directive("autoall", AutoAll)
