"""Text files, plain or gzip, and the sentences of column files: the one reader of them.

A file is read as gzip when its first bytes are gzip's magic number (or always, with
``gzip_only``), else as plain UTF-8 text, ``-`` being standard input; it is written as gzip when
its name ends in ``.gz``. A UTF-8 byte order mark at the start of a file (as Windows editors
write) is dropped on reading, so it does not become part of the first token, label or template
line. A sentence is the run of lines between blank lines (lines of only whitespace), whatever
the line endings (``\\n``, ``\\r\\n`` or ``\\r``); a last sentence needs no blank line or newline
after it.

:mod:`pymc_crf.columns` (the files of ``pymc-crf train / tag / evaluate``), the data set readers
``pmc.datasets.read_conll2000`` / ``read_ptb_sample`` and ``pmc.distributed``'s CoNLL sentence
ranges read through :func:`sentence_blocks` and :func:`sentence_rows`. A shared helper that
imports nothing of the package, so every layer may use it and ``pymc-crf`` starts without PyMC.
"""

from __future__ import annotations

import gzip
import io
import re
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["numbered_rows", "open_text", "sentence_blocks", "sentence_rows", "split_columns"]

# The columns of a column file are separated by runs of ASCII whitespace, not by str.split()'s
# Unicode whitespace, which would cut a token holding a no-break space (French "10\u00a0000",
# web text) or another Unicode space in two, shifting its tag into a feature column. conlleval
# and crfsuite's example scripts split at the ASCII space too.
_ASCII_SPACE = " \t\n\r\x0b\x0c"
_COLUMN_SEPARATOR = re.compile(f"[{re.escape(_ASCII_SPACE)}]+")


def split_columns(line: str) -> list[str]:
    """The columns of a line of a column file: the text between runs of ASCII whitespace
    (spaces, tabs); other Unicode spaces (U+00A0 and the like) belong to their token."""
    line = line.strip(_ASCII_SPACE)
    return _COLUMN_SEPARATOR.split(line) if line else []


@contextmanager
def open_text(path: str | Path, mode: str = "r", *, gzip_only: bool = False
              ) -> Iterator[io.TextIOBase]:
    """A text file for reading (``"r"``: gzip recognised by its magic bytes, or always gzip with
    ``gzip_only``, so that a file that is not raises ``gzip.BadGzipFile``) or writing (``"w"``:
    gzip when the name ends in ``.gz``); ``-`` is standard input / output. Gzip data that is
    damaged or cut short raises ``gzip.BadGzipFile`` naming the file, while it is read."""
    if str(path) == "-":
        yield sys.stdin if mode == "r" else sys.stdout
        return
    path = Path(path)
    if mode == "r":
        with open(path, "rb") as fh:
            magic = fh.read(2)
        # utf-8-sig: UTF-8 that drops a byte order mark at the start, if there is one
        packed = gzip_only or magic == b"\x1f\x8b"
        fh = (gzip.open(path, "rt", encoding="utf-8-sig") if packed
              else open(path, encoding="utf-8-sig"))
        with fh:
            try:
                yield fh
            except (EOFError, zlib.error, gzip.BadGzipFile) as err:
                # raised by the gzip reader deep in the caller's loop (EOFError for a file cut
                # short, as by an interrupted download; zlib.error for damaged data), with no
                # file name: one error type, an OSError, that names the file
                if not packed:
                    raise
                what = ("ends before the end of its gzip data (a truncated file?)"
                        if isinstance(err, EOFError) else f"is not readable gzip data ({err})")
                raise gzip.BadGzipFile(f"{path} {what}") from None
        return
    if mode != "w":
        raise ValueError(f"mode must be 'r' or 'w'; got {mode!r}")
    fh = (gzip.open(path, "wt", encoding="utf-8") if path.suffix == ".gz"
          else open(path, "w", encoding="utf-8"))
    with fh:
        yield fh


def sentence_blocks(path: str | Path, *, gzip_only: bool = False, tab_fields: bool = False
                    ) -> Iterator[list[tuple[int, str]]]:
    """Sentences of a text file: lists of ``(line number, line)`` between blank lines (lines of
    only whitespace); ``gzip_only``: as :func:`open_text`. ``tab_fields``: a line holding a tab
    is not blank (crfsuite's attribute files, whose fields a tab separates: a lone tab is a
    token with an empty label and no attributes, as ``crfsuite tag`` reads it)."""
    current: list[tuple[int, str]] = []
    with open_text(path, gzip_only=gzip_only) as fh:
        try:
            for lineno, line in enumerate(fh, start=1):
                line = line.rstrip("\r\n")
                if lineno == 1:  # standard input is not opened as utf-8-sig: its mark goes here
                    line = line.removeprefix("\ufeff")
                if not line.strip() and not (tab_fields and "\t" in line):
                    if current:
                        yield current
                        current = []
                    continue
                current.append((lineno, line))
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}: not UTF-8 text ({err.reason}); a binary "
                             "file?") from None
    if current:
        yield current


def sentence_rows(path: str | Path, sep: str | None = None, *, skip_docstart: bool = True,
                  gzip_only: bool = False) -> Iterator[list[list[str]]]:
    """Token rows (lists of columns) of each sentence of a column file, streamed.

    Parameters
    ----------
    path : str or Path
        The file (gzip, told by its first bytes, or plain; ``-``: standard input).
    sep : str, optional
        The column separator: None (any run of ASCII whitespace, :func:`split_columns`, as
        ``pymc-crf train`` reads) or one string, as ``str.split`` (``" "``, ``"\\t"``: every
        occurrence splits, so a token may hold other whitespace and two separators in a row
        make an empty column).
    skip_docstart : bool
        Leave out the lines starting with ``-DOCSTART-`` (a sentence of only such lines is then
        no sentence); False keeps them as token rows.
    gzip_only : bool
        Read the file as gzip whatever its first bytes (:func:`open_text`).
    """
    for rows in numbered_rows(path, sep, skip_docstart=skip_docstart, gzip_only=gzip_only):
        yield [cols for _, _, cols in rows]


def numbered_rows(path: str | Path, sep: str | None = None, *, skip_docstart: bool = True,
                  gzip_only: bool = False) -> Iterator[list[tuple[int, str, list[str]]]]:
    """:func:`sentence_rows` with each token row as ``(line number, line, columns)``, for
    readers that name the line of a row they refuse (same parameters)."""
    for block in sentence_blocks(path, gzip_only=gzip_only):
        rows = [(n, line, split_columns(line) if sep is None else line.split(sep))
                for n, line in block if not (skip_docstart and line.startswith("-DOCSTART-"))]
        if rows:
            yield rows
