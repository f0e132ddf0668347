"""The built docs site: every example page shows what its code produces.

Runs after the docs build (``.ci/run`` builds the site with the examples executed in their smoke
setting, then runs ``pytest -m docs_site``); deselected in the default run, which builds no site.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pymc_crf.datasets import data_dir
from pymc_crf.datasets.text import absent_data

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "docs" / "_build" / "html"
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.py"))

pytestmark = pytest.mark.docs_site


def _counts(html: str) -> dict[str, int]:
    """Cells with output, figures (images in outputs) and tables (DataFrames, and printed blocks
    of two or more lines) of an executed notebook page."""
    cells = html.split('<div class="cell docutils container">')[1:]
    outputs = [c.split('<div class="cell_output', 1)[1] for c in cells if '<div class="cell_output' in c]
    printed = [re.sub(r"<[^>]+>", "", pre).strip()
               for out in outputs for pre in re.findall(r"<pre>(.*?)</pre>", out, re.S)]
    return {"outputs": len(outputs),
            "figures": sum(out.count("<img ") for out in outputs),
            "tables": (sum(out.count("<table") for out in outputs)
                       + sum(len(text.splitlines()) >= 2 for text in printed))}


@pytest.fixture(scope="module")
def pages() -> dict[str, dict[str, int]]:
    if not SITE.is_dir():
        pytest.fail(f"no built site at {SITE}: build it first (README's docs command with "
                    "PYMC_CRF_DOCS_EXECUTE=1)")
    return {name: _counts((SITE / "examples" / f"{name}.html").read_text()) for name in EXAMPLES}


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_page_shows_its_outputs(pages, name):
    missing = absent_data((ROOT / "examples" / f"{name}.py").read_text(encoding="utf-8"))
    if missing:  # the docs build shows it unexecuted (docs/conf.py)
        pytest.skip(f"{name}: data set(s) {missing} not found in {data_dir()}")
    c = pages[name]
    print(f"{name}: {c}")
    assert c["outputs"] > 0, f"{name}: the page shows no cell output (was the site executed?)"
    assert c["figures"] + c["tables"] > 0, f"{name}: no figure or table on the page: {c}"
