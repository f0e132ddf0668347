"""Tagged text files: CoNLL column files, crfsuite's attribute format, and feature templates.

Two file formats, both plain text or gzip (recognised by its magic bytes when read, by a ``.gz``
suffix when written), ``-`` for standard input / output:

* **Column files** (CoNLL): one token a line, its columns separated by runs of spaces and tabs
  (ASCII whitespace: a no-break space or another Unicode space is part of its token), the last
  column the tag (in training and evaluation files), a blank line between sentences. Every token
  line of a file has the same number of columns; a line that does not is refused with the file
  name and line number. Lines starting with ``-DOCSTART-`` are skipped, as the CoNLL readers do.
  The files are read by :mod:`pymc_crf.text_files` (:func:`open_text`, :func:`sentence_blocks`,
  :func:`sentence_rows`), as are the CoNLL data sets (``pmc.datasets.read_conll2000``,
  :func:`read_conll_range`).
* **Attribute files** (crfsuite's ``crfsuite learn`` format): one token a line,
  ``label<TAB>attr1<TAB>attr2:weight...``, a blank line between sentences (a line of a lone tab
  is a token without label or attributes, as ``crfsuite tag`` reads it); an attribute without
  ``:weight`` has weight 1; ``\\:`` and ``\\\\`` escape a colon and a backslash in a name.

Features of column files come from a :class:`Template`, one feature a line, over the columns
and relative token offsets:

* crfsuite style, columns by name: ``w[0]``, ``w[-1]|w[0]``, ``pos[0]|pos[1]``. The names are
  given with the template (``columns``; default ``w pos``; ``c0``, ``c1`` ... name any column
  by index). The feature is the indicator ``"w[-1]|w[0]=The|cat"``;
* CRF++ style, columns by index: ``U01:%x[-1,0]/%x[0,0]`` (the feature is ``"U01=The/cat"``);
  ``B`` lines (CRF++'s transition template) are accepted and skipped, since the CRF always has
  a weight for every tag pair. A name is one feature: two lines of one name that read other
  columns or offsets (``U01:%x[0,0]`` and ``U01:%x[0,1]``) are refused;
* ``#`` starts a comment line.

A feature whose offsets reach past the sentence is left out (as crfsuite's templates do), and
the first and last tokens get the boolean features ``BOS`` / ``EOS``. Without a template the
features are :func:`pymc_crf.datasets.token_features` of the first column (the word) and the
second (the POS tag), when the file has one besides the tag: sklearn-crfsuite's tutorial
features over a +-2 window (not CRFsuite's example chunking template of word and POS n-grams,
which a template file writes).
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pymc_crf.text_files import (
    numbered_rows,
    open_text,
    sentence_blocks,
    sentence_rows,
    split_columns,
)

__all__ = ["ColumnFile", "FeatureSpec", "Template", "count_sentences", "open_text",
           "read_attribute_file", "read_column_file", "read_conll_range", "sentence_blocks",
           "sentence_rows", "write_tags"]

DEFAULT_COLUMN_NAMES = ("w", "pos")


def count_sentences(path: str | Path) -> int:
    """Number of sentences of a CoNLL file (one streaming pass of :func:`sentence_rows`).

    Parameters
    ----------
    path : str or Path
        The file (plain or gzip; ``-``: standard input); ``-DOCSTART-`` lines are not
        sentences.

    Returns
    -------
    int
        How many sentences the file has.
    """
    return sum(1 for _ in sentence_rows(path))


def read_conll_range(path: str | Path, start: int, stop: int
                     ) -> tuple[list[list[str]], list[list[str]], list[list[str]]]:
    """Words, POS tags and chunk tags of sentences ``start..stop-1`` of a CoNLL-2000-style file
    (``word POS chunk`` per line: the first, second and last whitespace column;
    ``-DOCSTART-`` lines skipped), reading only up to ``stop`` and keeping only the range.

    Parameters
    ----------
    path : str or Path
        The file (plain or gzip; ``-``: standard input).
    start, stop : int
        The sentence range ``[start, stop)`` (as ``itertools.islice``: a range past the file's
        end is cut short).

    Returns
    -------
    words : list of list of str
        The first column of each sentence.
    pos : list of list of str
        The second column.
    tags : list of list of str
        The last column.
    """
    words, pos, tags = [], [], []
    for block in itertools.islice(numbered_rows(path), start, stop):
        for lineno, line, cols in block:
            # a line of fewer columns has no POS column (with two, its tag would be read as the
            # POS too): refused here, naming the file and line, not on a Dask worker
            if len(cols) < 3:
                raise ValueError(f"{path}:{lineno}: {len(cols)} column(s) in {line!r}; a "
                                 "CoNLL-2000 line is word, POS ... chunk tag (3 columns or "
                                 "more)")
        words.append([cols[0] for _, _, cols in block])
        pos.append([cols[1] for _, _, cols in block])
        tags.append([cols[-1] for _, _, cols in block])
    return words, pos, tags


@dataclass
class ColumnFile:
    """The sentences of a column file: ``rows[s][t]`` the columns of token ``t`` of sentence
    ``s``, ``lines[s][t]`` its line number, ``path`` and the columns per line."""

    path: str
    rows: list[list[list[str]]]
    lines: list[list[int]]
    n_columns: int

    def column(self, j: int) -> list[list[str]]:
        """Column ``j`` (negative counts from the end), one list per sentence."""
        return [[r[j] for r in s] for s in self.rows]

    @property
    def n_tokens(self) -> int:
        return sum(map(len, self.rows))


def read_column_file(path: str | Path, n_columns: int | Sequence[int] | None = None,
                     min_columns: int = 1) -> ColumnFile:
    """Read a whitespace column file (CoNLL format; plain or gzip).

    Parameters
    ----------
    path : str or Path
        The file (``-``: standard input).
    n_columns : int or sequence of int, optional
        The accepted number of columns per line; default: that of the first token line. Every
        token line must then have it. Of several accepted numbers (a file with or without its
        tag column) the first token line picks one for the whole file.
    min_columns : int
        The least number of columns a line may have (2 for tagged files: a token and its tag).

    Returns
    -------
    ColumnFile

    Raises
    ------
    ValueError
        Naming the file and line number of the first malformed line.
    """
    allowed = ({n_columns} if isinstance(n_columns, int) else
               set(n_columns) if n_columns is not None else None)
    rows, lines = [], []
    first, accepted = None, allowed
    for block in sentence_blocks(path):
        srows, slines = [], []
        for lineno, line in block:
            if line.startswith("-DOCSTART-"):
                continue
            cols = split_columns(line)
            if allowed is None:
                allowed, first = {len(cols)}, lineno
            if len(cols) < min_columns:
                raise ValueError(f"{path}:{lineno}: {len(cols)} column(s) in {line!r}; each "
                                 f"token line needs at least {min_columns} whitespace-separated "
                                 "columns (the token ... and its tag last)")
            if len(cols) not in allowed and accepted is not None and len(cols) in accepted:
                # a line without its tag would lend its last feature column as the tag
                raise ValueError(f"{path}:{lineno}: {len(cols)} column(s) in {line!r}; expected "
                                 f"{next(iter(allowed))} as on line {first} (a file has the tag "
                                 "column on every token line or on none)")
            if len(cols) not in allowed:
                given = accepted if accepted is not None else allowed
                what = "the model's" if accepted is not None else f"as on line {first}"
                raise ValueError(f"{path}:{lineno}: {len(cols)} column(s) in {line!r}; expected "
                                 f"{' or '.join(map(str, sorted(given)))} ({what})")
            if len(allowed) > 1:  # the first token line picks one of the accepted counts
                allowed, first = {len(cols)}, lineno
            srows.append(cols)
            slines.append(lineno)
        if srows:
            rows.append(srows)
            lines.append(slines)
    if not rows:
        raise ValueError(f"{path}: no token lines (an empty file?)")
    return ColumnFile(str(path), rows, lines, len(rows[0][0]))


_ESCAPED_COLON = "\x00"


def _attribute(text: str, where: str) -> tuple[str, float]:
    """``(name, weight)`` of one crfsuite attribute field ``name[:weight]``."""
    text = text.replace("\\\\", "\x01").replace("\\:", _ESCAPED_COLON)
    name, sep, weight = text.rpartition(":")
    if not sep:
        name, value = text, 1.0
    else:
        try:
            value = float(weight)
        except ValueError:
            raise ValueError(f"{where}: attribute {text!r} has the weight {weight!r}, not a "
                             "number (write a colon in a name as \\:)") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{where}: attribute {text!r} has a non-finite weight")
    name = name.replace(_ESCAPED_COLON, ":").replace("\x01", "\\")
    if not name:
        raise ValueError(f"{where}: an attribute with an empty name")
    return name, value


def read_attribute_file(path: str | Path) -> tuple[list[list[dict[str, float]]], list[list[str]],
                                                   list[list[int]]]:
    """Read crfsuite's attribute format: ``label<TAB>attr<TAB>attr:weight...`` per token.

    Returns
    -------
    (X, y, lines)
        Per-token ``{attribute: weight}`` dicts and the labels (an empty label: none given), one
        list per sentence, and the line numbers.

    Raises
    ------
    ValueError
        Naming the file and line number of a malformed attribute.
    """
    X, y, lines = [], [], []
    # a line of a lone tab is a token (no label, no attributes), not a sentence break
    for block in sentence_blocks(path, tab_fields=True):
        xs, ys, ls = [], [], []
        for lineno, line in block:
            fields = line.split("\t")
            if len(fields) == 1 and len(line.split()) > 1:
                raise ValueError(f"{path}:{lineno}: no tab in {line!r}: a crfsuite attribute "
                                 "line is label<TAB>attribute<TAB>...; a whitespace column "
                                 "file is read with --format columns")
            token: dict[str, float] = {}
            for f in fields[1:]:
                if not f:
                    continue
                name, value = _attribute(f, f"{path}:{lineno}")
                token[name] = token.get(name, 0.0) + value
            xs.append(token)
            ys.append(fields[0].strip())
            ls.append(lineno)
        X.append(xs)
        y.append(ys)
        lines.append(ls)
    if not X:
        raise ValueError(f"{path}: no token lines (an empty file?)")
    return X, y, lines


def _column_name(columns: Sequence[str], j: int) -> str:
    return columns[j] if j < len(columns) else f"c{j}"


_NAMED_ITEM = re.compile(r"^([A-Za-z_][\w.]*)\[\s*([+-]?\d+)\s*\]$")
_CRFPP_ITEM = re.compile(r"%x\[\s*([+-]?\d+)\s*,\s*(\d+)\s*\]")


@dataclass(frozen=True)
class Template:
    """Feature templates over columns and token offsets (see the module docstring).

    Attributes
    ----------
    features : tuple of (name, items, separator)
        One per template line: the feature's name, its ``(column index, offset)`` items and the
        separator of the values.
    text : str
        The template's text (saved with a model).
    columns : tuple of str
        The column names the text refers to.
    """

    features: tuple
    text: str
    columns: tuple[str, ...] = field(default=DEFAULT_COLUMN_NAMES)

    @classmethod
    def parse(cls, text: str, columns: Sequence[str] = DEFAULT_COLUMN_NAMES,
              source: str = "<template>") -> Template:
        """Parse template text; errors name ``source`` and the line number."""
        columns = tuple(columns)
        # a name given twice would read the last column of that name, and a name c<j> given to
        # another column than j would make c<j> in a template mean either: both refused
        for j, c in enumerate(columns):
            numbered = re.fullmatch(r"c(\d+)", c)
            if c in columns[:j] or (numbered is not None and int(numbered.group(1)) != j):
                problem = ("is given twice" if c in columns[:j] else
                           f"names column {numbered.group(1)} by index, not column {j}")
                raise ValueError(f"{source}: the column name {c!r} {problem} in the columns "
                                 f"{', '.join(columns)} (--columns)")
        index = {c: j for j, c in enumerate(columns)}
        feats = []
        # a feature's name is its key in the token's feature dict: two lines of one name (CRF++
        # ids copied without renumbering, U01:%x[0,0] and U01:%x[0,1]) would write one key, the
        # later value replacing the earlier
        named: dict[str, tuple[tuple, int]] = {}

        def add(name: str, items: tuple, sep: str, where: str, lineno: int) -> None:
            if name in named and named[name][0] != items:
                raise ValueError(f"{where}: the feature name {name!r} is already that of line "
                                 f"{named[name][1]}, which reads other columns or offsets; "
                                 "give each template line its own name (U01, U02, ...)")
            named.setdefault(name, (items, lineno))
            feats.append((name, items, sep))
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{source}:{lineno}"
            if "%x[" in line:  # CRF++: U01:%x[-1,0]/%x[0,0]
                if line[0] == "B":
                    continue
                name = line.split(":", 1)[0] if ":" in line else line
                items = tuple((int(c), int(o)) for o, c in _CRFPP_ITEM.findall(line))
                rest = _CRFPP_ITEM.sub("", line.split(":", 1)[1] if ":" in line else line)
                if not items or rest.strip("/ "):
                    raise ValueError(f"{where}: cannot read the CRF++ template {line!r} (write "
                                     "e.g. U01:%x[-1,0]/%x[0,0])")
                add(name, items, "/", where, lineno)
                continue
            if line == "B" or re.fullmatch(r"B\d*", line):  # CRF++ bigram: always on
                continue
            items = []
            for part in line.split("|"):
                m = _NAMED_ITEM.match(part.strip())
                if m is None:
                    raise ValueError(f"{where}: cannot read {part.strip()!r} in {line!r}; a "
                                     "template item is column[offset], e.g. w[-1] or "
                                     "w[0]|pos[1], or CRF++'s %x[offset,column]")
                col = m.group(1)
                numbered = re.fullmatch(r"c(\d+)", col)
                if col not in index and numbered is None:
                    raise ValueError(f"{where}: unknown column {col!r} in {line!r}; the "
                                     f"columns are named {', '.join(columns)} (--columns), "
                                     "or c0, c1, ... by index")
                items.append((index[col] if col in index else int(numbered.group(1)),
                              int(m.group(2))))
            name = "|".join(f"{_column_name(columns, c)}[{o}]" for c, o in items)
            add(name, tuple(items), "|", where, lineno)
        if not feats:
            raise ValueError(f"{source}: the template has no feature lines")
        return cls(tuple(feats), text, columns)

    @classmethod
    def read(cls, path: str | Path, columns: Sequence[str] = DEFAULT_COLUMN_NAMES) -> Template:
        """Parse a template file."""
        with open_text(path) as fh:
            return cls.parse(fh.read(), columns, str(path))

    @property
    def max_column(self) -> int:
        """The largest column index the template reads."""
        return max(c for _, items, _ in self.features for c, _ in items)

    def apply(self, sentence: Sequence[Sequence[str]]) -> list[dict]:
        """One feature dict per token of a sentence (rows of feature columns)."""
        # imported here, as in FeatureSpec.read: the datasets package loads PyMC and numba
        from pymc_crf.datasets.text import mark_sentence_ends

        n = len(sentence)
        out = []
        for i in range(n):
            f: dict = {}
            for name, items, sep in self.features:
                vals = []
                for c, o in items:
                    j = i + o
                    if not 0 <= j < n:
                        break
                    vals.append(sentence[j][c])
                else:
                    f[name] = sep.join(vals)
            out.append(f)
        return mark_sentence_ends(out)


@dataclass
class FeatureSpec:
    """How a model turns file lines into token features; saved with the model
    (``CRFTagger.metadata_["features"]``) so that ``tag`` and ``evaluate`` read files as
    ``train`` did.

    ``format``: ``"columns"`` or ``"attributes"``; ``template``: template text (None:
    :func:`pymc_crf.datasets.token_features`); ``columns``: the column names;
    ``n_features``: the feature columns of a training line (all but the tag).
    """

    format: str = "columns"
    template: str | None = None
    columns: tuple[str, ...] = DEFAULT_COLUMN_NAMES
    n_features: int | None = None

    def to_json(self) -> dict:
        return {"format": self.format, "template": self.template, "columns": list(self.columns),
                "n_features": self.n_features}

    @classmethod
    def from_json(cls, d: dict) -> FeatureSpec:
        return cls(d["format"], d.get("template"), tuple(d.get("columns") or
                                                         DEFAULT_COLUMN_NAMES), d.get("n_features"))

    def _template(self) -> Template | None:
        return None if self.template is None else Template.parse(self.template, self.columns,
                                                                 "<saved template>")

    def read(self, path: str | Path, *, training: bool, labelled: bool = False
             ) -> tuple[list[list[dict]], list[list[str]] | None, list[list[int]]]:
        """Token features, tags (None when the file has no tag column) and line numbers.

        ``training``: the file must have tags, and fixes ``n_features`` (its columns less the
        tag). Otherwise a column file has ``n_features`` columns (no tags) or one more (tags).
        ``labelled``: the labels are needed (a file to evaluate, a dev file): an attribute
        file with some of them missing is refused naming the first line without one (the tags
        would otherwise be None, as for a file without any).
        """
        if self.format == "attributes":
            X, y, lines = read_attribute_file(path)
            unlabelled = [(lines[s][t], sum(not tag for ts in y for tag in ts))
                          for s, ts in enumerate(y) for t, tag in enumerate(ts) if not tag][:1]
            n_all = sum(map(len, y))
            if unlabelled and (training or (labelled and unlabelled[0][1] < n_all)):
                line, n = unlabelled[0]
                what = ("on a training line" if training else
                        "on a line of a file whose other lines have labels")
                raise ValueError(f"{path}:{line}: no label (the first tab-separated field) "
                                 f"{what} ({n} of {n_all} token lines have none)")
            return X, (None if unlabelled else y), lines
        if self.format != "columns":
            raise ValueError(f"unknown feature format {self.format!r}; 'columns' or 'attributes'")
        template = self._template()
        if training:
            cf = read_column_file(path, min_columns=2)
            self.n_features = cf.n_columns - 1
        else:
            n = self.n_features
            cf = read_column_file(path, n_columns=None if n is None else (n, n + 1))
        n_feat = self.n_features if self.n_features is not None else cf.n_columns
        has_tags = training or cf.n_columns == n_feat + 1
        if template is not None and template.max_column >= n_feat:
            raise ValueError(f"the template reads column {template.max_column} "
                             f"({_column_name(self.columns, template.max_column)!r}); {path} has "
                             f"{n_feat} feature column(s) before the tag")
        X = []
        for srows in cf.rows:
            feats = [r[:n_feat] for r in srows]
            if template is None:
                from pymc_crf.datasets.text import token_features

                X.append(token_features([r[0] for r in feats],
                                        [r[1] for r in feats] if n_feat > 1 else None))
            else:
                X.append(template.apply(feats))
        y = cf.column(-1) if has_tags else None
        return X, y, cf.lines

    def tokens(self, path: str | Path) -> list[list[str]]:
        """The first column of a column file (the tokens), to echo beside predicted tags; an
        attribute file has no token column, so its tokens are empty strings."""
        if self.format == "attributes":
            return [[""] * len(s) for s in read_attribute_file(path)[0]]
        return read_column_file(path).column(0)


def write_tags(fh: io.TextIOBase, tags: Sequence[Sequence[str]], *,
               marginals: Sequence[Sequence[dict[str, float]]] | None = None,
               tokens: Sequence[Sequence[str]] | None = None, digits: int = 4) -> None:
    """Write one tag a line (``token<TAB>tag`` with ``tokens``), a blank line after each
    sentence; with ``marginals`` each line goes on with ``<TAB>tag:probability`` for every tag
    (in the order of the marginals' dicts: the tagger's ``classes_``)."""
    for s, sent in enumerate(tags):
        for t, tag in enumerate(sent):
            parts = [tokens[s][t], tag] if tokens is not None else [tag]
            if marginals is not None:
                m = marginals[s][t]
                parts += [f"{k}:{p:.{digits}f}" for k, p in m.items()]
            fh.write("\t".join(parts) + "\n")
        fh.write("\n")
