"""pymc_crf.columns: column and attribute files and feature templates."""

import pytest

from pymc_crf.columns import FeatureSpec, Template, read_attribute_file, read_conll_range


def test_template_lines_of_one_name_reading_different_items_are_refused():
    # one name is one key of the token's feature dict: U01:%x[0,0] and U01:%x[0,1] would keep
    # only the POS and lose the word feature without a word said
    with pytest.raises(ValueError, match=r"<template>:2: the feature name 'U01' is already that "
                                         r"of line 1"):
        Template.parse("U01:%x[0,0]\nU01:%x[0,1]\n")
    with pytest.raises(ValueError, match=r"<template>:3: the feature name 'U00'"):
        Template.parse("U00:%x[0,0]\n# the previous word\nU00:%x[-1,0]\n")
    # the same line twice reads the same values: harmless, accepted
    t = Template.parse("w[0]\nc0[0]\nU01:%x[0,1]\nU01:%x[0,1]\n")
    assert t.apply([["The", "DT"]]) == [{"w[0]": "The", "U01": "DT", "BOS": True, "EOS": True}]


def test_column_names_must_be_distinct_and_c_names_their_own_index():
    # --columns w,pos,pos (chunk meant for the last): pos[0] read the third column, the tag
    with pytest.raises(ValueError, match=r"the column name 'pos' is given twice in the columns "
                                         r"w, pos, pos"):
        Template.parse("pos[0]", columns=("w", "pos", "pos"))
    with pytest.raises(ValueError, match=r"'c2' names column 2 by index, not column 0"):
        Template.parse("c2[0]", columns=("c2", "w"))
    t = Template.parse("c1[0]|w[0]", columns=("w", "c1"))
    assert t.features[0][1] == ((1, 0), (0, 0))


def test_a_lone_tab_in_an_attribute_file_is_a_token(tmp_path):
    # a token without label or attributes (an untagged file whose extractor found no feature)
    # is a lone tab; read as a blank line it split its sentence and lost the token, so the
    # tagged output had a line too few
    path = tmp_path / "a.txt"
    path.write_text("\tw=a\n\t\n\tw=b\n\nO\tw=c\n  \nO\tw=d\n")
    X, y, lines = read_attribute_file(path)
    assert X == [[{"w=a": 1.0}, {}, {"w=b": 1.0}], [{"w=c": 1.0}], [{"w=d": 1.0}]]
    assert y == [["", "", ""], ["O"], ["O"]] and lines == [[1, 2, 3], [5], [7]]


def test_a_labelled_attribute_file_missing_one_label_names_its_line(tmp_path):
    # evaluate and --dev need the labels: one label missing in 3 made the whole file "have no
    # tag column", naming no line
    path = tmp_path / "a.txt"
    path.write_text("B-NP\tw=The\n\tw=cat\nO\tw=.\n")
    spec = FeatureSpec("attributes")
    with pytest.raises(ValueError, match=r"a.txt:2: no label \(the first tab-separated field\) "
                                         r"on a line of a file whose other lines have labels "
                                         r"\(1 of 3 token lines have none\)"):
        spec.read(path, training=False, labelled=True)
    with pytest.raises(ValueError, match=r"a.txt:2: no label .* on a training line"):
        spec.read(path, training=True)
    assert spec.read(path, training=False)[1] is None  # to tag: the labels are not needed
    path.write_text("\tw=The\n\tw=cat\n")  # no labels at all: the caller's "no tag column"
    assert spec.read(path, training=False, labelled=True)[1] is None


def test_read_conll_range_names_a_line_of_too_few_columns(tmp_path):
    # the Dask CoNLL readers' line: one column failed with IndexError naming no file, and two
    # (word tag) gave the tag as the POS too
    path = tmp_path / "c.txt"
    path.write_text("-DOCSTART- -X- O\n\nThe DT B-NP\ncat NN I-NP\n\nA DT B-NP\ndog\n")
    assert read_conll_range(path, 0, 1) == ([["The", "cat"]], [["DT", "NN"]], [["B-NP", "I-NP"]])
    with pytest.raises(ValueError, match=r"c.txt:7: 1 column\(s\) in 'dog'; a CoNLL-2000 line "
                                         r"is word, POS ... chunk tag \(3 columns or more\)"):
        read_conll_range(path, 0, 2)
    path.write_text("The B-NP\ncat I-NP\n")
    with pytest.raises(ValueError, match=r"c.txt:1: 2 column\(s\) in 'The B-NP'"):
        read_conll_range(path, 0, 1)
