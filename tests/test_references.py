"""Every work cited by author and year in the code and the docs is on the references page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# "Qi 2005", "Welling & Parise 2006", "Qi, Szummer & Minka 2005", "Guo et al. 2017": a capitalised
# surname (not an acronym such as NUTS), optional co-authors, a publication year up to 2025
CITATION = re.compile(
    r"\b([A-Z][a-z][A-Za-z-]*)(?:(?:, [A-Z][a-z][A-Za-z-]*)* & [A-Z][a-z][A-Za-z-]*| et al\.)?,? "
    r"\(?(19\d\d|20[01]\d|202[0-5])\b"
)


def _cited():
    files = [*ROOT.glob("pymc_crf/**/*.py"), *ROOT.glob("bench/*.py"), *ROOT.glob("examples/*.py"),
             *ROOT.glob("docs/*.md"), ROOT / "README.md"]
    found = {}
    for path in files:
        if path.name == "references.md":
            continue
        for m in CITATION.finditer(path.read_text()):
            found.setdefault((m.group(1), m.group(2)), path.relative_to(ROOT))
    return found


def test_every_cited_work_is_listed():
    rows = [line for line in (ROOT / "docs" / "references.md").read_text().splitlines()
            if line.startswith("| ")]
    cited = _cited()
    assert len(cited) > 20  # the pattern finds the package's citations
    missing = {f"{name} {year} ({where})" for (name, year), where in cited.items()
               if not any(name in row and year in row for row in rows)}
    assert not missing, f"cited but not in docs/references.md: {sorted(missing)}"
