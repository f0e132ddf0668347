"""pymc-crf train / tag / evaluate on column and attribute files, and pymc_crf.columns."""

import gzip
import io

import numpy as np
import pytest

from pymc_crf.cli import load_model, main
from pymc_crf.columns import (
    FeatureSpec,
    Template,
    read_attribute_file,
    read_column_file,
    write_tags,
)
from pymc_crf.datasets import data_dir

TRAIN = """\
The DT B-NP
cat NN I-NP
sees VBZ B-VP
a DT B-NP
dog NN I-NP

A DT B-NP
big JJ I-NP
dog NN I-NP
runs VBZ B-VP
in IN B-PP
the DT B-NP
park NN I-NP
. . O

The DT B-NP
man NN I-NP
likes VBZ B-VP
the DT B-NP
old JJ I-NP
cat NN I-NP
. . O

A DT B-NP
dog NN I-NP
sees VBZ B-VP
the DT B-NP
man NN I-NP
in IN B-PP
a DT B-NP
park NN I-NP
"""

TEST = """\
The DT B-NP
dog NN I-NP
likes VBZ B-VP
a DT B-NP
cat NN I-NP
. . O

A DT B-NP
man NN I-NP
runs VBZ B-VP
"""


@pytest.fixture
def files(tmp_path):
    train, test = tmp_path / "train.txt", tmp_path / "test.txt.gz"
    train.write_text(TRAIN)
    with gzip.open(test, "wt") as fh:
        fh.write(TEST)
    return tmp_path, train, test


def test_read_column_file_and_errors(tmp_path, files):
    _, train, test = files
    cf = read_column_file(train)
    assert (len(cf.rows), cf.n_columns, cf.n_tokens) == (4, 3, 28)
    assert cf.lines[1][0] == 7 and cf.column(-1)[0] == ["B-NP", "I-NP", "B-VP", "B-NP", "I-NP"]
    assert read_column_file(test).column(0)[1] == ["A", "man", "runs"]  # gzip by magic bytes
    bad = tmp_path / "bad.txt"
    bad.write_text("The DT B-NP\ncat NN I-NP\n\nsees B-VP\n")
    with pytest.raises(ValueError, match=r"bad.txt:4: 2 column\(s\) in 'sees B-VP'; expected 3 "
                                         r"\(as on line 1\)"):
        read_column_file(bad)
    with pytest.raises(ValueError, match=r"bad.txt:4: 2 column\(s\) .* expected 1 or 3"):
        read_column_file(bad, n_columns=(1, 3))
    one = tmp_path / "one.txt"
    one.write_text("cat\ndog\n")
    with pytest.raises(ValueError, match=r"one.txt:1: 1 column\(s\) .* at least 2"):
        read_column_file(one, min_columns=2)
    doc = tmp_path / "doc.txt"
    doc.write_text("-DOCSTART- -X- O\n\nThe DT B-NP\n")
    assert read_column_file(doc).rows == [[["The", "DT", "B-NP"]]]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match="empty.txt: no token lines"):
        read_column_file(empty)


def test_attribute_file(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("B-NP\tw=The\tpos=DT\tlen:3\n"
                    "I-NP\tw=a\\:b\tx:0.5\tx:0.25\tback\\\\slash\n"
                    "\n"
                    "O\tw=.\t\n")
    X, y, lines = read_attribute_file(path)
    assert y == [["B-NP", "I-NP"], ["O"]] and lines == [[1, 2], [4]]
    assert X[0][0] == {"w=The": 1.0, "pos=DT": 1.0, "len": 3.0}
    assert X[0][1] == {"w=a:b": 1.0, "x": 0.75, "back\\slash": 1.0}
    assert X[1] == [{"w=.": 1.0}]
    path.write_text("B-NP\nI-NP\tw=a\n")  # a label without attributes: a valid line
    assert read_attribute_file(path)[0] == [[{}, {"w=a": 1.0}]]
    path.write_text("B-NP w=The\n")  # no tab: a column file
    with pytest.raises(ValueError, match=r"a.txt:1: no tab in 'B-NP w=The'"):
        read_attribute_file(path)
    path.write_text("B-NP\tw=The\nI-NP\tlen:three\n")
    with pytest.raises(ValueError, match=r"a.txt:2: attribute 'len:three' has the weight "
                                         r"'three', not a number"):
        read_attribute_file(path)


def test_templates(tmp_path):
    t = Template.parse("# a comment\nw[0]\nw[-1]|w[0]\npos[1]\nB\nU01:%x[-1,1]/%x[0,0]\n")
    f = t.apply([["The", "DT"], ["cat", "NN"]])
    assert f[0] == {"w[0]": "The", "pos[1]": "NN", "BOS": True}
    assert f[1] == {"w[0]": "cat", "w[-1]|w[0]": "The|cat", "U01": "DT/cat", "EOS": True}
    assert Template.parse("c2[0]|w[0]").features[0][:2] == ("c2[0]|w[0]", ((2, 0), (0, 0)))
    path = tmp_path / "t.txt"
    path.write_text("w[0]\n\nlemma[-1]\n")
    with pytest.raises(ValueError, match=r"t.txt:3: unknown column 'lemma'.*w, pos"):
        Template.read(path)
    with pytest.raises(ValueError, match=r"<template>:1: cannot read 'w\(0\)'"):
        Template.parse("w(0)")
    with pytest.raises(ValueError, match=r"<template>:2: cannot read the CRF\+\+ template"):
        Template.parse("w[0]\nU02:%x[0,0]+junk")
    with pytest.raises(ValueError, match="no feature lines"):
        Template.parse("# nothing\nB\n")


def test_write_tags():
    fh = io.StringIO()
    write_tags(fh, [["A", "B"], ["B"]], tokens=[["x", "y"], ["z"]],
               marginals=[[{"A": 0.75, "B": 0.25}, {"A": 0.1, "B": 0.9}], [{"A": 0, "B": 1}]],
               digits=2)
    assert fh.getvalue() == ("x\tA\tA:0.75\tB:0.25\ny\tB\tA:0.10\tB:0.90\n\n"
                             "z\tB\tA:0.00\tB:1.00\n\n")


def test_train_tag_evaluate(files, capsys, monkeypatch):
    folder, train, test = files
    model = folder / "m.joblib"
    assert main(["train", str(train), "-m", str(model), "--no-progressbar", "--dev",
                 str(test)]) == 0
    out = capsys.readouterr().out
    assert "4 sentences, 28 tokens" in out and f"model written to {model}" in out
    tagger = load_model(model)
    assert f"dev token accuracy {100 * tagger.dev_score_:.2f} %" in out
    assert tagger.metadata_["features"] == {"format": "columns", "template": None,
                                            "columns": ["w", "pos"], "n_features": 2}
    tags = folder / "tags.txt"
    assert main(["tag", str(model), str(test), "-o", str(tags)]) == 0
    blocks = tags.read_text().split("\n\n")
    assert [len(b.split()) for b in blocks[:2]] == [6, 3]
    pred = [b.split() for b in blocks[:2]]
    # the same tags from the Python API on the same features
    spec = FeatureSpec.from_json(tagger.metadata_["features"])
    X, gold, _ = spec.read(test, training=False)
    assert pred == tagger.predict(X)
    # a file without the tag column is tagged the same
    bare = folder / "bare.txt"
    bare.write_text("\n".join(" ".join(line.split()[:2]) for line in TEST.splitlines()) + "\n")
    assert main(["tag", str(model), str(bare), "-o", str(folder / "bare_tags.txt")]) == 0
    assert (folder / "bare_tags.txt").read_text() == tags.read_text()
    capsys.readouterr()
    assert main(["tag", str(model), str(test), "--marginals", "--with-tokens"]) == 0
    first = capsys.readouterr().out.splitlines()[0].split("\t")
    assert first[0] == "The" and first[1] == pred[0][0]
    probs = dict(p.rsplit(":", 1) for p in first[2:])
    assert list(probs) == tagger.classes_
    assert sum(map(float, probs.values())) == pytest.approx(1.0, abs=1e-3)
    # tags and marginals from one vectorisation of the file, equal to the API's
    calls = []
    transform = type(tagger.vectorizer_).transform
    monkeypatch.setattr(type(tagger.vectorizer_), "transform",
                        lambda self, X: calls.append(len(X)) or transform(self, X))
    assert main(["tag", str(model), str(test), "--marginals", "--digits", "6"]) == 0
    assert calls == [len(X)]
    first = capsys.readouterr().out.splitlines()[0].split("\t")
    want = tagger.predict_marginals(X)[0][0]
    assert {k: float(v) for k, v in (p.rsplit(":", 1) for p in first[1:])} == pytest.approx(
        want, abs=1e-6)
    # standard input, read twice for --with-tokens
    monkeypatch.setattr("sys.stdin", io.StringIO(TEST))
    assert main(["tag", str(model), "-", "--with-tokens"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"The\t{pred[0][0]}" and lines[6] == "" and len(lines) == 11
    assert main(["evaluate", str(model), str(test)]) == 0
    out = capsys.readouterr().out
    acc = np.mean([a == b for p, g in zip(pred, gold, strict=True)
                   for a, b in zip(p, g, strict=True)])
    assert f"token accuracy {100 * acc:.2f} %" in out and "chunk F1 " in out


def test_template_and_netcdf_model(files, capsys):
    folder, train, test = files
    template = folder / "template.txt"
    template.write_text("w[0]\nw[-1]\nw[1]\npos[0]\npos[-1]|pos[0]\nU1:%x[1,1]\n")
    model = folder / "m.nc"
    assert main(["train", str(train), "-m", str(model), "--template", str(template), "--c2", "0.5",
                 "--option", "ftol=1e-8", "--no-progressbar"]) == 0
    tagger = load_model(model)
    assert tagger.c2 == 0.5 and tagger.method_options == {"ftol": 1e-8}
    assert "pos[-1]|pos[0]=DT|NN" in tagger.vectorizer_.vocabulary_
    assert tagger.metadata_["features"]["template"] == template.read_text()
    assert main(["evaluate", str(model), str(test)]) == 0
    assert "chunk F1" in capsys.readouterr().out


def test_evidence_c2_is_printed(files, capsys):
    """``--c2 evidence``: the chosen c2 is the outcome of the fit step, so train prints it (the
    user could otherwise see it only by loading the model and reading ``c2_``)."""
    folder, train, _ = files
    model = folder / "evidence.joblib"
    assert main(["train", str(train), "-m", str(model), "--c2", "evidence",
                 "--no-progressbar"]) == 0
    c2 = load_model(model).c2_
    assert f"c2 chosen by the evidence: {c2:.4g}" in capsys.readouterr().out


def test_learned_prior_scales(files, capsys):
    """``--c2 learned``: prior sds per template and count bucket, integrated over by the Gibbs
    sweeps whose options ``--scale-option`` sets; saved with the model."""
    folder, train, _ = files
    model = folder / "learned.nc"
    assert main(["train", str(train), "-m", str(model), "--c2", "learned", "--seed", "0",
                 "--scale-option", "chains=1", "--scale-option", "tune=1", "--scale-option",
                 "draws=2", "--scale-option", "refine=0", "--no-progressbar"]) == 0
    assert "prior sds per template and count bucket" in capsys.readouterr().out
    tagger = load_model(model)
    assert tagger.c2 == "learned" and tagger.scale_options == {"chains": 1, "tune": 1,
                                                              "draws": 2, "refine": 0}
    assert "transitions" in tagger.prior_scales_ and len(tagger.prior_scales_) > 2


def test_attribute_format(tmp_path, files, capsys):
    _, train, test = files
    for src, dst in ((train, "train.attr"), (test, "test.attr")):
        lines = []
        for block in read_column_file(src).rows:
            for w, p, t in block:
                lines.append(f"{t}\tw={w}\tpos={p}\tlen:{len(w)}")
            lines.append("")
        (tmp_path / dst).write_text("\n".join(lines))
    model = tmp_path / "m.joblib"
    assert main(["train", str(tmp_path / "train.attr"), "--format", "attributes", "-m", str(model),
                 "--no-progressbar"]) == 0
    assert "len" in load_model(model).vectorizer_.vocabulary_
    assert main(["evaluate", str(model), str(tmp_path / "test.attr")]) == 0
    assert "token accuracy" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # attribute lines have no token to echo
        main(["tag", str(model), str(tmp_path / "test.attr"), "--with-tokens"])
    assert "attribute files, which have no token column" in capsys.readouterr().err
    # a test file without its label field: the first attribute read as the gold tag, and a
    # token accuracy of 0 % printed as a result
    (tmp_path / "bare.attr").write_text("w=the\tpos=DT\nw=dog\tpos=NN\n")
    assert main(["evaluate", str(model), str(tmp_path / "bare.attr")]) == 0
    err = capsys.readouterr().err
    assert ("warning: 2 of 2 gold tags are not among the model's" in err
            and "'w=dog', 'w=the'" in err and "the label, missing?" in err)


def test_cli_errors(files, capsys):
    folder, train, test = files
    bad = folder / "bad.txt"
    bad.write_text(TRAIN.replace("runs VBZ B-VP", "runs B-VP"))
    with pytest.raises(SystemExit):
        main(["train", str(bad), "-m", str(folder / "m.joblib"), "--no-progressbar"])
    assert "bad.txt:10: 2 column(s) in 'runs B-VP'; expected 3 (as on line 1)" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", str(train), "-m", str(folder / "m.joblib"), "--option", "ftol"])
    assert "expected KEY=VALUE" in capsys.readouterr().err
    template = folder / "t.txt"
    template.write_text("w[0]\nlemma[0]\n")
    with pytest.raises(SystemExit):
        main(["train", str(train), "-m", str(folder / "m.joblib"), "--template", str(template)])
    assert "t.txt:2: unknown column 'lemma'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tag", str(folder / "none.joblib"), str(test)])
    assert "none.joblib not found" in capsys.readouterr().err
    model = folder / "m.joblib"
    assert main(["train", str(train), "-m", str(model), "--no-progressbar"]) == 0
    wide = folder / "wide.txt"
    wide.write_text("The DT B-NP x\n")
    with pytest.raises(SystemExit):
        main(["tag", str(model), str(wide)])
    assert "wide.txt:1: 4 column(s) in 'The DT B-NP x'; expected 2 or 3" in capsys.readouterr().err
    bare = folder / "bare.txt"
    bare.write_text("The DT\ncat NN\n")
    with pytest.raises(SystemExit):
        main(["evaluate", str(model), str(bare)])
    assert "has no tag column" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", str(train), "-m", str(model), "--method", "nope", "--no-progressbar"])
    assert "not a registered fitter" in capsys.readouterr().err
    # options that would be silently overridden or ignored
    for argv, message in ((["--c2", "2", "--prior-sd", "0.5"], "give --c2 or --prior-sd, not both"),
                          (["--scale-option", "draws=3"], "--scale-option sets the Gibbs sweeps "
                                                          "of --c2 learned; this run has --c2 1.0")):
        with pytest.raises(SystemExit):
            main(["train", str(train), "-m", str(model), *argv])
        assert message in capsys.readouterr().err
    # a tagged file with one line missing its tag: its POS would be taken as the gold tag
    mixed = folder / "mixed.txt"
    mixed.write_text("The DT B-NP\ncat NN\nsees VBZ B-VP\n")
    with pytest.raises(SystemExit):
        main(["evaluate", str(model), str(mixed)])
    assert ("mixed.txt:2: 2 column(s) in 'cat NN'; expected 3 as on line 1 (a file has the tag "
            "column on every token line or on none)") in capsys.readouterr().err
    # a column file read as crfsuite attributes
    with pytest.raises(SystemExit):
        main(["train", str(train), "--format", "attributes", "-m", str(model)])
    assert "train.txt:1: no tab in 'The DT B-NP'" in capsys.readouterr().err
    # a template column beyond the column names
    template.write_text("w[0]\nc5[0]\n")
    with pytest.raises(SystemExit):
        main(["train", str(train), "-m", str(model), "--template", str(template)])
    assert "the template reads column 5 ('c5'); " in capsys.readouterr().err
    # where the output cannot be written: said before the fit / the tagging
    for argv in (["train", str(train), "-m", str(folder / "no" / "m.joblib")],
                 ["tag", str(model), str(test), "-o", str(folder / "no" / "t.txt")]):
        with pytest.raises(SystemExit):
            main(argv)
        err = capsys.readouterr().err
        assert "the folder" in err and "does not exist" in err and "Traceback" not in err
    # a file that is not a model
    for content in (b"", b"garbage", TRAIN.encode()):
        (folder / "x.joblib").write_bytes(content)
        with pytest.raises(SystemExit):
            main(["tag", str(folder / "x.joblib"), str(test)])
        assert "x.joblib is not a model written by pymc-crf train" in capsys.readouterr().err
    # not text
    binary = folder / "binary.txt"
    binary.write_bytes(b"The DT B-NP\n\xff\xfe\x00\n")
    with pytest.raises(SystemExit):
        main(["tag", str(model), str(binary)])
    assert "binary.txt: not UTF-8 text (invalid start byte)" in capsys.readouterr().err


def test_tag_into_a_closed_pipe_ends_quietly(files, tmp_path):
    """`pymc-crf tag ... | head -1`: no BrokenPipeError traceback."""
    import subprocess
    import sys

    folder, train, test = files
    model = folder / "m.joblib"
    assert main(["train", str(train), "-m", str(model), "--no-progressbar"]) == 0
    big = folder / "big.txt"
    big.write_text("\n".join(["The DT\ncat NN\n"] * 20000))
    code = "import sys; from pymc_crf.cli import main; sys.exit(main(sys.argv[1:]))"
    tag = subprocess.Popen([sys.executable, "-c", code, "tag", str(model), str(big)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tag.stdout.readline()
    tag.stdout.close()
    err = tag.stderr.read().decode()
    assert tag.wait() == 0 and "Traceback" not in err and "BrokenPipe" not in err


@pytest.mark.heavy_smoke
@pytest.mark.skipif(not data_dir("conll2000").exists(),
                    reason="the shared CoNLL-2000 data (../shared/data/conll2000 beside the "
                    "repository, or $PYMC_CRF_DATA) is not here")
def test_conll2000_cli_equals_python_api(tmp_path, capsys):
    """train -> tag -> evaluate on the first 300 / 200 sentences of CoNLL-2000 gives the chunk F1
    of the Python API on the same features (token_features) and prior."""
    from pymc_crf import CRFTagger
    from pymc_crf.datasets import read_conll2000, token_features
    from pymc_crf.metrics import chunk_f1

    for split, n in (("train", 300), ("test", 200)):
        with gzip.open(data_dir("conll2000") / f"{split}.txt.gz", "rt") as fh:
            blocks = fh.read().strip("\n").split("\n\n")[:n]
        (tmp_path / f"{split}.txt.gz").write_bytes(gzip.compress(
            ("\n\n".join(blocks) + "\n").encode()))
    model = tmp_path / "m.joblib"
    assert main(["train", str(tmp_path / "train.txt.gz"), "-m", str(model), "--c2", "1.0",
                 "--option", "ftol=1e-6", "--option", "gtol=1e-5", "--no-progressbar"]) == 0
    assert main(["tag", str(model), str(tmp_path / "test.txt.gz"), "-o",
                 str(tmp_path / "tags.txt")]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(model), str(tmp_path / "test.txt.gz")]) == 0
    out = capsys.readouterr().out

    words, pos, chunks = (a[:300] for a in read_conll2000("train"))
    twords, tpos, tchunks = (a[:200] for a in read_conll2000("test"))
    api = CRFTagger(c2=1.0, method_options={"ftol": 1e-6, "gtol": 1e-5}).fit(
        [token_features(w, p) for w, p in zip(words, pos, strict=True)], chunks)
    pred = api.predict([token_features(w, p) for w, p in zip(twords, tpos, strict=True)])
    score = chunk_f1(tchunks, pred)
    assert f"chunk F1 {score.f1:.2f} " in out
    cli_tags = [b.split() for b in (tmp_path / "tags.txt").read_text().strip().split("\n\n")]
    assert cli_tags == pred
    assert score.f1 > 85.0


def test_help_of_evaluate_asks_for_the_tag_column(capsys):
    """``tag`` takes files without the tag column, ``evaluate`` refuses them: its help says so
    (it used to share tag's 'with or without the tag column')."""
    helps = {}
    for command in ("tag", "evaluate"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        helps[command] = " ".join(capsys.readouterr().out.split())
    assert "with or without the tag column" in helps["tag"]
    assert "without the tag column" not in helps["evaluate"]
    assert "with the tag column" in helps["evaluate"]
