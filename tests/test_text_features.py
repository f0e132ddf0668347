"""Feature dicts -> CSR (FeatureVectorizer), tag encoding, the text readers and template, chunk F1
and calibration scores, checked on hand-made cases."""

import gzip

import numpy as np
import pytest
import scipy.sparse as sp

import pymc_crf as pmc
from pymc_crf.datasets.text import (
    absent_data,
    read_conll2000,
    read_ptb_sample,
    token_features,
    word_shape,
)
from pymc_crf.features import FeatureVectorizer, encode_tags, sequence_batch
from pymc_crf.metrics import bio_chunks, chunk_f1, expected_calibration_error, reliability_curve

TRAIN = [[{"w": "a", "n": 2, "cap": True}, {"w": "b", "cap": False}],
         [{"w": "a", "n": 0.5}]]


def test_vectorizer_templates():
    vec = FeatureVectorizer().fit(TRAIN)
    # columns bias, cap, n, w=a, w=b: the template is the name before "="
    assert vec.templates_ == ["bias", "cap", "n", "w"]
    np.testing.assert_array_equal(vec.template_index_, [0, 1, 2, 3, 3])
    assert vec.template_index_.dtype == np.int64
    grouped = FeatureVectorizer(templates={"cap": "shape", "n": "shape"}).fit(TRAIN)
    assert grouped.templates_ == ["bias", "shape", "w"]
    np.testing.assert_array_equal(grouped.template_index_, [0, 1, 1, 2, 2])
    by_value = FeatureVectorizer(templates=lambda c: c.split("=")[-1]).fit(TRAIN)
    assert by_value.templates_ == ["bias", "cap", "n", "a", "b"]
    with pytest.raises(TypeError, match="templates must be a mapping"):
        FeatureVectorizer(templates=3).fit(TRAIN)
    with pytest.raises(TypeError, match=r"templates\('bias'\) must return a str"):
        FeatureVectorizer(templates=lambda c: 1).fit(TRAIN)
    # a column outside the vocabulary at transform time changes nothing
    vec.transform([[{"w": "zzz"}]])
    assert vec.templates_ == ["bias", "cap", "n", "w"]


def test_vectorizer_columns_values_and_bias():
    vec = FeatureVectorizer(min_freq=1)
    X = vec.fit_transform(TRAIN)
    assert sp.issparse(X) and X.format == "csr"
    assert vec.feature_names_ == ["bias", "cap", "n", "w=a", "w=b"]
    expected = np.array([[1, 1, 2, 1, 0],
                         [1, 0, 0, 0, 1],
                         [1, 0, 0.5, 1, 0]], dtype=float)
    np.testing.assert_array_equal(X.toarray(), expected)
    np.testing.assert_array_equal(vec.lengths_, [2, 1])
    assert vec.n_unseen_ == 0
    assert vec.inverse_transform(X)[0] == {"bias": 1.0, "cap": 1.0, "n": 2.0, "w=a": 1.0}
    no_bias = FeatureVectorizer(bias=False).fit(TRAIN)
    assert no_bias.feature_names_ == ["cap", "n", "w=a", "w=b"]


def test_min_freq_and_unseen_test_features_are_ignored_and_counted():
    vec = FeatureVectorizer(min_freq=2).fit(TRAIN)
    assert vec.feature_names_ == ["bias", "n", "w=a"]  # cap and w=b occur in 1 token only
    X = vec.transform([[{"w": "a", "n": 3.0, "new": "x", "cap": True}, {"w": "zzz"}]])
    np.testing.assert_array_equal(X.toarray(), [[1, 3, 1], [1, 0, 0]])
    assert vec.n_unseen_ == 3  # cap, new=x, w=zzz
    assert vec.unseen_features_ == {"cap", "new=x", "w=zzz"}


@pytest.mark.parametrize("value, match", [(None, "NoneType value None"),
                                          (["a"], "list value"),
                                          (float("nan"), "must be finite"),
                                          (10**400, "'bad' of token 1 in sentence 0 is inf"),
                                          (1j, "bool, int or float")])
def test_bad_feature_values_are_refused(value, match):
    with pytest.raises((TypeError, ValueError), match=match):
        FeatureVectorizer().fit([[{"w": "a"}, {"bad": value}]])


def test_template_count_groups():
    """Each column's template crossed with how many training tokens it fires on."""
    vec = FeatureVectorizer().fit(TRAIN)
    X = vec.transform(TRAIN)
    # bias fires on 3 tokens, cap on 1 (False is no feature), n on 2, w=a on 2, w=b on 1
    np.testing.assert_array_equal(vec.count_buckets(X), [1, 0, 1, 1, 0])
    assert vec.template_count_groups(X) == ["bias (count 2-3)", "cap (count 1)",
                                            "n (count 2-3)", "w (count 2-3)", "w (count 1)"]
    many = FeatureVectorizer().fit(TRAIN * 8)
    assert many.template_count_groups(many.transform(TRAIN * 8))[:2] == ["bias (count 16+)",
                                                                        "cap (count 4-15)"]
    with pytest.raises(ValueError, match="features has 4 columns; this vectorizer has 5"):
        vec.count_buckets(X[:, :4])
    with pytest.raises(ValueError, match="not fitted"):
        FeatureVectorizer().template_count_groups(X)


def test_vectorizer_bad_use():
    with pytest.raises(ValueError, match="not fitted"):
        FeatureVectorizer().transform(TRAIN)
    with pytest.raises(ValueError, match="min_freq"):
        FeatureVectorizer(min_freq=0).fit(TRAIN)
    with pytest.raises(TypeError, match="must be a dict"):
        FeatureVectorizer().fit([["w=a"]])


def test_vectorizer_is_a_scikit_learn_transformer():
    """Parameters stored as given (checked by fit), clone / get_params, fit(X, y) as a Pipeline
    step calls it, NotFittedError, get_feature_names_out; tokens as lists of feature strings
    (python-crfsuite's form) give the columns of the equivalent dicts."""
    from sklearn.base import clone
    from sklearn.exceptions import NotFittedError
    from sklearn.pipeline import Pipeline

    vec = FeatureVectorizer(min_freq=2, bias=False)
    assert clone(vec).get_params() == {"min_freq": 2, "bias": False, "templates": None}
    assert FeatureVectorizer(min_freq=0).get_params()["min_freq"] == 0  # refused by fit only
    with pytest.raises(NotFittedError):
        FeatureVectorizer().transform(TRAIN)
    pipe = Pipeline([("vec", FeatureVectorizer())])
    X = pipe.fit_transform(TRAIN, [["A", "B"], ["B"]])
    np.testing.assert_array_equal(X.toarray(), FeatureVectorizer().fit_transform(TRAIN).toarray())
    np.testing.assert_array_equal(pipe[0].get_feature_names_out(), pipe[0].feature_names_)
    dicts = [[{"w": "a", "cap": True}, {"w": "b"}]]
    strings = [[["w=a", "cap"], ("w=b",)]]
    a, b = FeatureVectorizer().fit(dicts), FeatureVectorizer().fit(strings)
    assert a.feature_names_ == b.feature_names_ and a.templates_ == b.templates_
    np.testing.assert_array_equal(a.transform(dicts).toarray(), b.transform(strings).toarray())


def test_vectorizer_reads_one_shot_iterators():
    # fit_transform reads a generator once: handing it to fit and then to transform would leave
    # transform an exhausted generator and a (0, F) matrix
    expected = FeatureVectorizer().fit_transform(TRAIN)
    vec = FeatureVectorizer()
    X = vec.fit_transform(s for s in TRAIN)
    assert X.shape == (3, 5)
    np.testing.assert_array_equal(X.toarray(), expected.toarray())
    np.testing.assert_array_equal(vec.lengths_, [2, 1])
    # fit and transform each read their input once, so generators work for them too
    vec = FeatureVectorizer().fit(iter(TRAIN))
    np.testing.assert_array_equal(vec.transform(s for s in TRAIN).toarray(), expected.toarray())


def test_user_bias_feature_does_not_overwrite_the_built_in_bias():
    # a token's own "bias" is the built-in bias column: a value other than 1 is refused, not
    # written over column 0
    with pytest.raises(ValueError, match=r"own feature 'bias' = 5.0.*built-in bias.*bias=False"):
        FeatureVectorizer().fit([[{"w": "a", "bias": 5.0}]])
    vec = FeatureVectorizer().fit(TRAIN)
    with pytest.raises(ValueError, match=r"token 1 of sentence 0 .*'bias' = 2.0"):
        vec.transform([[{"w": "a"}, {"bias": 2.0}]])
    # "bias": 1.0 (sklearn-crfsuite's tutorial feature, and inverse_transform's output) is the
    # built-in column itself: accepted, one column, value 1
    with_one = [[dict(tok, bias=1.0) for tok in s] for s in TRAIN]
    X = vec.transform(with_one)
    assert vec.n_unseen_ == 0
    np.testing.assert_array_equal(X.toarray(), vec.transform(TRAIN).toarray())
    np.testing.assert_array_equal(vec.transform([vec.inverse_transform(X)]).toarray(),
                                  X.toarray())
    assert FeatureVectorizer().fit(with_one).feature_names_ == vec.feature_names_
    # without the built-in bias a user "bias" is an ordinary feature, kept with its values
    plain = FeatureVectorizer(bias=False)
    X = plain.fit_transform([[{"w": "a", "bias": 5.0}, {"w": "b"}]])
    assert plain.feature_names_ == ["bias", "w=a", "w=b"]
    np.testing.assert_array_equal(X.toarray(), [[5, 1, 0], [0, 0, 1]])
    assert plain.n_unseen_ == 0


def test_encode_tags_and_sequence_batch():
    y, classes = encode_tags([["B-NP", "I-NP"], ["O"]])
    assert classes == ["B-NP", "I-NP", "O"]
    np.testing.assert_array_equal(y, [0, 1, 2])
    with pytest.raises(ValueError, match="not among"):
        encode_tags([["B-VP"]], classes)
    batch = sequence_batch(TRAIN)
    np.testing.assert_array_equal(batch.n_nodes, [2, 1])
    assert batch.n_edges == 1
    vec = FeatureVectorizer()
    data = pmc.CRFData(batch, y, vec.fit_transform(TRAIN), n_labels=3)
    assert sp.issparse(data.node_features)
    with pytest.raises(ValueError, match=r"classes must be distinct; \['A'\]"):
        encode_tags([["A"]], ["A", "B", "A"])
    with pytest.raises(ValueError, match="sentence 1 has no tokens"):
        sequence_batch([[{"w": "a"}], [], [{"w": "b"}]])


def test_coinciding_feature_names_add_up():
    # as in scikit-learn's DictVectorizer: "w" = "a" is the indicator "w=a", which a numeric
    # "w=a" feature of the same token adds to; int and str keys with one name coincide too
    vec = FeatureVectorizer(bias=False)
    X = vec.fit_transform([[{"w": "a", "w=a": 2.0}, {1: 2.0, "1": 3.0}]])
    assert vec.feature_names_ == ["1", "w=a"]
    np.testing.assert_array_equal(X.toarray(), [[0.0, 3.0], [5.0, 0.0]])
    dup = sp.csr_matrix((np.ones(2), [1, 1], [0, 2]), shape=(1, 2))
    assert vec.inverse_transform(dup) == [{"w=a": 2.0}]
    assert dup.nnz == 2  # the caller's matrix is left as it was


def test_token_features_template():
    f = token_features(["He", "reckons", "1990"], ["PRP", "VBZ", "CD"])
    assert f[0]["BOS"] is True and "EOS" not in f[0] and f[2]["EOS"] is True
    assert f[1]["word.lower()"] == "reckons" and f[1]["word[-3:]"] == "ons"
    assert f[1]["-1:word.lower()"] == "he" and f[1]["+1:postag"] == "CD"
    assert f[0]["+2:postag[:2]"] == "CD" and "-1:postag" not in f[0]
    assert f[2]["word.isdigit()"] is True and f[0]["word.istitle()"] is True
    assert "postag" not in token_features(["a"])[0]
    assert word_shape("McDonald's") == "XxXx'x" and word_shape("1990s") == "dx"


def test_absent_data(tmp_path, monkeypatch):
    """The data sets a script reads by ``data_dir("name")`` that the data folder lacks."""
    monkeypatch.setenv("PYMC_CRF_DATA", str(tmp_path))
    (tmp_path / "here").mkdir()
    src = 'a = data_dir("here")\nb = data_dir("gone") / "x"\nc = data_dir("gone")\n'
    assert absent_data(src) == ["gone"]
    assert absent_data("print(1)") == []


def test_readers(tmp_path):
    (tmp_path / "conll").mkdir()
    with gzip.open(tmp_path / "conll" / "train.txt.gz", "wt") as fh:
        fh.write("He PRP B-NP\nran VBD B-VP\n\nOk UH B-INTJ\n\n")
    words, pos, chunks = read_conll2000("train", root=tmp_path / "conll")
    assert words == [["He", "ran"], ["Ok"]] and pos[0] == ["PRP", "VBD"]
    assert chunks == [["B-NP", "B-VP"], ["B-INTJ"]]
    with gzip.open(tmp_path / "wsj_sample.tsv.gz", "wt") as fh:
        fh.write("Pierre\tNNP\n,\t,\n\nMr.\tNNP\n")
    assert read_ptb_sample(root=tmp_path) == ([["Pierre", ","], ["Mr."]], [["NNP", ","], ["NNP"]])
    with pytest.raises(FileNotFoundError, match="not found in the folder given as root"):
        read_conll2000("test", root=tmp_path / "conll")


def test_bio_chunks_follow_conlleval():
    assert bio_chunks(["B-NP", "I-NP", "O", "B-VP"]) == {("NP", 0, 1), ("VP", 3, 3)}
    # I- after O or after another type starts a chunk; B- after I- of the same type splits
    assert bio_chunks(["I-NP", "I-NP", "I-VP", "B-VP", "I-VP"]) == {
        ("NP", 0, 1), ("VP", 2, 2), ("VP", 3, 4)}
    assert bio_chunks(["O", "O"]) == set()
    with pytest.raises(ValueError, match="not BIO"):
        bio_chunks(["NP"])


def test_chunk_f1_hand_made():
    gold = [["B-NP", "I-NP", "B-VP", "O"], ["B-PP", "B-NP"]]
    pred = [["B-NP", "I-NP", "B-VP", "B-NP"],   # 2 right, one spurious
            ["B-PP", "I-PP"]]                   # PP too long (wrong), NP missed
    s = chunk_f1(gold, pred)
    assert (s.n_gold, s.n_pred, s.n_correct) == (4, 4, 2)
    assert s.precision == pytest.approx(50.0) and s.recall == pytest.approx(50.0)
    assert s.f1 == pytest.approx(50.0)
    perfect = chunk_f1(gold, gold)
    assert perfect.f1 == pytest.approx(100.0)
    assert chunk_f1([["O"]], [["O"]]).f1 == 0.0
    with pytest.raises(ValueError, match="sentence 0"):
        chunk_f1([["O", "O"]], [["O"]])


def test_reliability_and_ece_hand_made():
    marg = np.array([[0.95, 0.05], [0.9, 0.1], [0.6, 0.4], [0.3, 0.7]])
    labels = np.array([0, 1, 0, 1])
    r = reliability_curve(marg, labels, n_bins=2)
    np.testing.assert_array_equal(r.count, [0, 4])
    assert r.confidence[1] == pytest.approx(np.mean([0.95, 0.9, 0.6, 0.7]))
    assert r.accuracy[1] == pytest.approx(0.75)
    assert expected_calibration_error(marg, labels, 2) == pytest.approx(abs(0.75 - 0.7875))
    r10 = reliability_curve(marg, labels, n_bins=10)
    # bins (a, b] (Guo et al. 2017): (0.5, 0.6], (0.6, 0.7], (0.8, 0.9], (0.9, 1.0] hold one
    # prediction each: |1 - 0.6|, |1 - 0.7|, |0 - 0.9|, |1 - 0.95|
    np.testing.assert_array_equal(r10.count, [0, 0, 0, 0, 0, 1, 1, 0, 1, 1])
    assert r10.ece == pytest.approx((0.4 + 0.3 + 0.9 + 0.05) / 4)
    # a confidence on a bin edge belongs to the bin below it: binary ties at 0.5, half right
    ties = reliability_curve(np.full((4, 2), 0.5), np.array([0, 1, 0, 1]), n_bins=10)
    np.testing.assert_array_equal(np.flatnonzero(ties.count), [4])
    assert ties.ece == pytest.approx(0.0)
    # every edge m / M, as any fraction equal to it (vote fractions k / S), is its own bin's top:
    # np.linspace(0, 1, 8)[5] is one rounding step below 5 / 7
    for M in range(1, 41):
        for m in range(1, M + 1):
            conf = m / M
            assert conf == (2 * m) / (2 * M) == (3 * m) / (3 * M)  # equal fractions, one float
            # the other M labels share the rest, each below conf
            row = np.concatenate([[conf], np.full(M, (1.0 - conf) / M)])
            edge = reliability_curve(row[None], np.array([0]), M)
            assert np.flatnonzero(edge.count).tolist() == [m - 1], (m, M)
    with pytest.raises(ValueError, match=r"\(N, K\)"):
        reliability_curve(marg, labels[:2])
    with pytest.raises(ValueError, match="n_bins must be an integer >= 1"):
        reliability_curve(marg, labels, n_bins=0)
    with pytest.raises(ValueError, match="N = 0"):
        reliability_curve(np.zeros((0, 2)), np.zeros(0, int))
    with pytest.raises(ValueError, match="NaN or inf"):
        reliability_curve(np.full((1, 2), np.nan), np.array([0]))
    with pytest.raises(ValueError, match=r"integers in 0..1.*-1"):
        reliability_curve(marg, np.array([0, -1, 0, 1]))
    with pytest.raises(ValueError, match="2 gold sentences but 1 predicted"):
        chunk_f1([["O"], ["O"]], [["O"]])
    # rows that are not probabilities (scores, log-probabilities): an ECE above 1 before
    for bad in (np.array([[5.0, 1.0], [3.0, 2.0]]), -marg, marg * 5, np.log(marg)):
        with pytest.raises(ValueError, match="each row of marginals must be probabilities "
                                             "summing to 1"):
            expected_calibration_error(bad[:2], labels[:2])
    # rounding of marginals of log-potentials in the thousands (entries up to ~1e-8 above 1)
    rounded = np.array([[1.0 + 5e-8, 0.0], [0.3, 0.7]])
    assert expected_calibration_error(rounded, np.array([0, 1])) == pytest.approx(
        expected_calibration_error(np.array([[1.0, 0.0], [0.3, 0.7]]), np.array([0, 1])))
    from pymc_crf.metrics import confidence_reliability, selective_curve

    for fn in (selective_curve, confidence_reliability):  # the same tolerance for confidences
        fn(rounded.max(axis=1), np.array([True, False]))
        with pytest.raises(ValueError, match="confidence must be probabilities"):
            fn(np.array([1.01, 0.5]), np.array([True, False]))
    # one sentence instead of a list of sentences: its tags were read as words
    with pytest.raises(ValueError, match=r"gold must be a list of sentences.*pass \[tags\]"):
        chunk_f1(["B-NP", "I-NP"], ["B-NP", "I-NP"])
    # label indices instead of tags are refused by name
    with pytest.raises(TypeError, match=r"tag 0 is a int; chunk tags are str"):
        chunk_f1([[0, 1]], [[0, 1]])


def test_crfsuite_reference_on_the_same_columns():
    """python-crfsuite trained on the vectorizer's columns learns a separable toy tagging."""
    pytest.importorskip("pycrfsuite")
    from pymc_crf.features import crfsuite_fit_predict

    sents = [["the", "dog", "runs"], ["a", "cat", "sleeps"], ["the", "cat", "runs"]] * 3
    tags = [["DT", "NN", "VB"]] * 9
    vec = FeatureVectorizer()
    X = vec.fit_transform([[{"w": w} for w in s] for s in sents])
    run = crfsuite_fit_predict(vec, X, [3] * 9, tags, X[:6], [3, 3], c2=0.1)
    assert run.tags == [["DT", "NN", "VB"]] * 2
    assert run.n_iterations > 0 and run.wall_time >= 0 and run.cpu_time >= 0


def test_plot_reliability():
    import matplotlib

    matplotlib.use("Agg")
    from pymc_crf.plots import plot_reliability

    marg = np.array([[0.95, 0.05], [0.9, 0.1], [0.6, 0.4], [0.3, 0.7]])
    curves = {"a": reliability_curve(marg, np.array([0, 1, 0, 1]), 5)}
    ax = plot_reliability(curves, title="t")
    assert len(ax.lines) == 2 and "ECE" in ax.get_legend().get_texts()[0].get_text()
