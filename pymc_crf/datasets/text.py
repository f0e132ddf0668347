"""Tagged text from the shared real data sets, and the standard CRFsuite token-feature template.

The data sets live outside the package, in ``../shared/data`` relative to the repository root
(override with the environment variable ``PYMC_CRF_DATA``); each folder has a README with its
source, citation and licence:

* ``conll2000/``: CoNLL-2000 chunking (Tjong Kim Sang & Buchholz 2000), ``word POS chunk`` per
  line, 8,936 training and 2,012 test sentences, 23 BIO chunk tags (22 in the training split;
  ``I-LST`` occurs only in the test split, on 2 tokens);
* ``ptb_sample_pos/``: NLTK's Penn Treebank WSJ sample (Marcus et al. 1993), ``word<TAB>POS`` per
  line, 3,914 sentences, 45 tags; **non-commercial use only** (LDC copyright), so never ship it.

:func:`token_features` is the feature template of CRFsuite's and sklearn-crfsuite's chunking
examples, widened to a +-2 window: per-token dicts ready for :class:`pymc_crf.FeatureVectorizer`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from pymc_crf.docstrings import fill_doc
from pymc_crf.text_files import sentence_rows

__all__ = ["data_dir", "mark_sentence_ends", "read_conll2000", "read_ptb_sample", "token_features",
           "word_shape"]


def data_dir(name: str = "") -> Path:
    """The shared data folder, or one data set inside it.

    The folder is ``$PYMC_CRF_DATA``, else ``../shared/data`` beside the repository root; the
    path may not exist (callers check).

    Parameters
    ----------
    name : str, default ""
        A data set's folder name (``"conll2000"``, ``"ptb_sample_pos"``); empty: the shared
        data folder itself.

    Returns
    -------
    Path
        The folder (``root / name``, or ``root`` when ``name`` is empty); not checked to exist.
    """
    env = os.environ.get("PYMC_CRF_DATA")
    root = Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "data"
    return root / name if name else root


def absent_data(source: str) -> list[str]:
    """The data sets a script's ``source`` reads by ``data_dir("name")`` that this machine
    lacks. The shared data folder is not beside every checkout: the docs build shows an example
    that needs an absent data set without executing it, and the docs-site check skips it."""
    names = re.findall(r'data_dir\("([^"]+)"\)', source)
    return [n for n in dict.fromkeys(names) if not data_dir(n).exists()]


def _require(path: Path, root_given: bool) -> Path:
    """``path``, or a FileNotFoundError that says where the folder looked in came from (the
    caller's ``root``, ``$PYMC_CRF_DATA`` or the default beside the repository)."""
    if not path.exists():
        if root_given:
            where = "the folder given as root"
        elif os.environ.get("PYMC_CRF_DATA"):
            where = (f"the shared data folder, {os.environ['PYMC_CRF_DATA']} as PYMC_CRF_DATA "
                     "names it")
        else:
            where = ("the shared data folder, ../shared/data beside the repository (set "
                     "PYMC_CRF_DATA to read it from elsewhere)")
        raise FileNotFoundError(f"{path} not found in {where}; the data set does not ship with "
                                "pymc_crf")
    return path


def _read_gzip_columns(path: Path, sep: str) -> list[list[list[str]]]:
    """Sentences of token rows of a shipped gzip data file, split at every ``sep`` and
    ``-DOCSTART-`` lines kept (:func:`pymc_crf.text_files.sentence_rows`)."""
    return list(sentence_rows(path, sep, skip_docstart=False, gzip_only=True))


# what both corpus readers return, worded once (``fill_doc``)
_READER_DOCS = {
    "words_pos": """
        words : list of list of str
            The words of each sentence.
        pos : list of list of str
            Their POS tags.""",
}


@fill_doc(_READER_DOCS)
def read_conll2000(split: str = "train", root: Path | None = None
                   ) -> tuple[list[list[str]], list[list[str]], list[list[str]]]:
    """Words, POS tags and chunk tags (one list per sentence) of a CoNLL-2000 split.

    Parameters
    ----------
    split : {"train", "test"}, default "train"
        Which split: the file ``{split}.txt.gz`` of the folder.
    root : Path or None, default None
        The folder holding ``train.txt.gz`` / ``test.txt.gz``; None: ``data_dir("conll2000")``.

    Returns
    -------
    %(words_pos)s
    chunks : list of list of str
        Their BIO chunk tags.

    Raises
    ------
    ValueError
        When ``split`` is neither ``"train"`` nor ``"test"``, or the file is not UTF-8 text.
    FileNotFoundError
        When the split's file does not exist.
    gzip.BadGzipFile
        When the file is not gzip.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test'; got {split!r}")
    folder = Path(root) if root is not None else data_dir("conll2000")
    rows = _read_gzip_columns(_require(folder / f"{split}.txt.gz", root is not None), " ")
    return ([[r[0] for r in s] for s in rows], [[r[1] for r in s] for s in rows],
            [[r[2] for r in s] for s in rows])


@fill_doc(_READER_DOCS)
def read_ptb_sample(root: Path | None = None) -> tuple[list[list[str]], list[list[str]]]:
    """Words and POS tags (one list per sentence) of the Penn Treebank WSJ sample, in file order.

    The file holds documents ``wsj_0001`` .. ``wsj_0199``; sentences 0-1920 are section 00.

    Parameters
    ----------
    root : Path or None, default None
        The folder holding ``wsj_sample.tsv.gz``; None: ``data_dir("ptb_sample_pos")``.

    Returns
    -------
    %(words_pos)s

    Raises
    ------
    FileNotFoundError
        When ``wsj_sample.tsv.gz`` does not exist.
    ValueError
        When the file is not UTF-8 text.
    gzip.BadGzipFile
        When the file is not gzip.
    """
    folder = Path(root) if root is not None else data_dir("ptb_sample_pos")
    rows = _read_gzip_columns(_require(folder / "wsj_sample.tsv.gz", root is not None), "\t")
    return [[r[0] for r in s] for s in rows], [[r[1] for r in s] for s in rows]


def word_shape(word: str) -> str:
    """Collapsed character classes: ``"McDonald's"`` -> ``"XxXx'x"``, ``"1990s"`` -> ``"dx"``."""
    out = []
    for ch in word:
        c = "X" if ch.isupper() else "x" if ch.islower() else "d" if ch.isdigit() else ch
        if not out or out[-1] != c:
            out.append(c)
    return "".join(out)


def mark_sentence_ends(features: list[dict]) -> list[dict]:
    """Add CRFsuite's ``BOS`` and ``EOS`` indicator features to the first and last token's
    feature dict of a sentence (in place; a one-token sentence gets both) and return the list."""
    if features:
        features[0]["BOS"] = True
        features[-1]["EOS"] = True
    return features


def token_features(words: Sequence[str], pos: Sequence[str] | None = None,
                   window: int = 2) -> list[dict]:
    """sklearn-crfsuite's tutorial features over a +-``window`` window, for one sentence: one
    dict per token (not CRFsuite's example chunking template, whose features are word and POS
    n-grams).

    Word identity, lower case, suffixes of 2 and 3 characters, shape and ``isupper`` /
    ``istitle`` / ``isdigit``, the POS tag and its first two characters (when ``pos`` is given);
    for the neighbours at offsets +-1 .. +-``window``: lower case, ``istitle``, ``isupper``, POS
    and POS prefix; ``BOS`` / ``EOS`` on the first / last token.

    Parameters
    ----------
    words : sequence of str
        The sentence's words.
    pos : sequence of str or None, default None
        Their POS tags (one per word); None: no POS features.
    window : int, default 2
        How far the neighbour features reach on either side (neighbours past the sentence's
        ends are left out).

    Returns
    -------
    list of dict
        One feature dict per token (feature name to str or bool value), ready for
        :class:`pymc_crf.FeatureVectorizer`.
    """
    n = len(words)
    out = []
    for i, w in enumerate(words):
        f: dict = {"word": w, "word.lower()": w.lower(), "word[-3:]": w[-3:],
                   "word[-2:]": w[-2:], "word.shape": word_shape(w), "word.isupper()": w.isupper(),
                   "word.istitle()": w.istitle(), "word.isdigit()": w.isdigit()}
        if pos is not None:
            f["postag"] = pos[i]
            f["postag[:2]"] = pos[i][:2]
        for d in [*range(-window, 0), *range(1, window + 1)]:
            j = i + d
            if not 0 <= j < n:
                continue
            v, key = words[j], f"{d:+d}:"
            f[key + "word.lower()"] = v.lower()
            f[key + "word.istitle()"] = v.istitle()
            f[key + "word.isupper()"] = v.isupper()
            if pos is not None:
                f[key + "postag"] = pos[j]
                f[key + "postag[:2]"] = pos[j][:2]
        out.append(f)
    return mark_sentence_ends(out)
