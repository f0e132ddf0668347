"""pymc_crf.text_files: how text files are opened and split into sentences."""

import gzip
import io
import sys

import pytest

from pymc_crf.columns import Template, read_attribute_file, read_column_file
from pymc_crf.text_files import sentence_blocks, sentence_rows, split_columns

BOM = "\ufeff"


def test_byte_order_mark_is_not_part_of_the_first_token(tmp_path, monkeypatch):
    # Windows editors save UTF-8 with a byte order mark: it must not become part of the first
    # token (a word feature no other file has), label (a tag of its own) or template line
    column = tmp_path / "c.txt"
    column.write_text(BOM + "The DT B-NP\ncat NN I-NP\n", encoding="utf-8")
    assert read_column_file(column).rows == [[["The", "DT", "B-NP"], ["cat", "NN", "I-NP"]]]
    packed = tmp_path / "c.txt.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as fh:
        fh.write(BOM + "The DT B-NP\n")
    assert read_column_file(packed).rows == [[["The", "DT", "B-NP"]]]
    attributes = tmp_path / "a.txt"
    attributes.write_text(BOM + "B-NP\tw=The\nI-NP\tw=cat\n", encoding="utf-8")
    assert read_attribute_file(attributes)[1] == [["B-NP", "I-NP"]]
    template = tmp_path / "t.txt"
    template.write_text(BOM + "w[0]\n", encoding="utf-8")
    assert Template.read(template).features[0][0] == "w[0]"
    # standard input, which is not opened by name
    monkeypatch.setattr(sys, "stdin", io.StringIO(BOM + "The DT B-NP\n"))
    assert list(sentence_blocks("-")) == [[(1, "The DT B-NP")]]


def test_columns_split_at_ascii_whitespace_only(tmp_path):
    # a token holding a no-break space (French "10 000") or another Unicode space is one token,
    # as conlleval and crfsuite's scripts read it: str.split() cut it in two, so an untagged
    # "10\u00a0000 CD" line passed for a tagged one (token "10", POS "000", tag "CD")
    path = tmp_path / "c.txt"
    path.write_text("10\u00a0000 CD B-NP\nballoons\tNNS  I-NP \n\u3000 SYM\u2009x O\n",
                    encoding="utf-8")
    assert read_column_file(path).rows == [[["10\u00a0000", "CD", "B-NP"],
                                            ["balloons", "NNS", "I-NP"],
                                            ["\u3000", "SYM\u2009x", "O"]]]
    path.write_text("10\u00a0000 CD\n", encoding="utf-8")
    assert read_column_file(path, n_columns=(2, 3)).rows == [[["10\u00a0000", "CD"]]]
    assert split_columns(" a\tb  c \r") == ["a", "b", "c"] and split_columns(" \t") == []
    assert list(sentence_rows(path)) == [[["10\u00a0000", "CD"]]]


def test_damaged_or_truncated_gzip_names_the_file(tmp_path):
    # a download cut short: the gzip reader's EOFError came from deep in the caller's loop, a
    # traceback past pymc-crf's error handling with no file name in it
    data = gzip.compress("".join(f"w{i} NN O\n" for i in range(2000)).encode())
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises(gzip.BadGzipFile, match=r"cut.txt.gz ends before the end of its gzip "
                                               r"data \(a truncated file\?\)"):
        read_column_file(cut)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\x1f\x8bnot gzip at all")
    with pytest.raises(gzip.BadGzipFile, match=r"bad.txt is not readable gzip data"):
        read_attribute_file(bad)
