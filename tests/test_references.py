"""Every work cited by author and year in the code and the docs is on the references page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_NAME = r"[A-Z][a-z][A-Za-z-]*"
_AUTHORS = rf"({_NAME})((?:, {_NAME})* & {_NAME}| et al\.)"

# "Qi 2005", "Welling & Parise 2006", "Qi, Szummer & Minka 2005", "Guo et al. 2017": a capitalised
# surname (not an acronym such as NUTS), optional co-authors, a publication year 19xx or 20xx
CITATION = re.compile(rf"\b({_NAME})(?:(?:, {_NAME})* & {_NAME}| et al\.)?,? \(?(19\d\d|20\d\d)\b(?!-\d)")

# "Luo, Sun & Zhao", "Bardsley et al.": co-authored works cited without a year; a single surname
# without a year cannot be told from any capitalised word, so only author lists are checked
AUTHOR_LIST = re.compile(rf"\b{_AUTHORS}(?![A-Za-z-])(?!,? \(?(?:19|20)\d\d)")


def _sources():
    """The files that cite: the package, its tests, benchmarks, examples, the docs and the README."""
    files = {*ROOT.glob("pymc_crf/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/**/*.py"),
             *ROOT.glob("bench/**/*.md"), *ROOT.glob("examples/**/*.py"), *ROOT.glob("docs/**/*.md"),
             *ROOT.glob("docs/**/*.py"), ROOT / "README.md"}
    skip = {ROOT / "docs" / "references.md", Path(__file__).resolve()}
    return sorted(p for p in files if p.is_file() and p.resolve() not in skip)


def _cited(text):
    """(surname, year) of every author-year citation, and the author lists cited without a year."""
    with_year = {(m.group(1), m.group(2)) for m in CITATION.finditer(text)}
    without_year = {m.group(0) for m in AUTHOR_LIST.finditer(text)}
    return with_year, without_year


def _missing(text, rows):
    with_year, without_year = _cited(text)
    missing = {f"{name} {year}" for name, year in with_year
               if not any(name in row and year in row for row in rows)}
    # an author list without a year names a listed work when it is part of a row's key
    # ("Sun & Zhao" of "\\n\\nLuo, Sun & Zhao" in a string literal included)
    keys = [row.split("|")[1].strip() for row in rows]
    missing |= {authors for authors in without_year if not any(authors in key for key in keys)}
    return missing


def _rows():
    return [line for line in (ROOT / "docs" / "references.md").read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| key ")]


def test_every_cited_work_is_listed():
    rows = _rows()
    sources = _sources()
    assert len(sources) > 100 and any(p.parts[-2] == "examples" for p in sources)  # globs reach the tree
    cited = set()
    missing = {}
    for path in sources:
        text = path.read_text()
        with_year, _ = _cited(text)
        cited |= with_year
        for item in _missing(text, rows):
            missing.setdefault(item, path.relative_to(ROOT))
    assert len(cited) > 20  # the pattern finds the package's citations
    assert not missing, "cited but not in docs/references.md:\n" + "\n".join(
        sorted(f"{k} ({v})" for k, v in missing.items()))


def test_the_check_catches_an_unlisted_work():
    rows = _rows()
    assert _missing("as in Qi, Szummer & Minka 2005 and Luo, Sun & Zhao", rows) == set()
    assert _missing("(Smith & Jones 2031)", rows) == {"Smith 2031"}
    assert _missing("Nobody 1987, eq. 3", rows) == {"Nobody 1987"}
    assert _missing("the sampler of Brown, Green & White", rows) == {"Brown, Green & White"}
    assert _missing("Qi 2027", rows) == {"Qi 2027"}  # a listed author, an unlisted year
