"""``fill_doc``: shared parameter texts put into docstrings at their placeholders."""

import inspect

import pytest

import pymc_crf.queries as queries
from pymc_crf.docstrings import fill_doc

FRAGMENTS = {"k": """
    k : int
        How many.""", "both": "%(k)s\n%(seed)s", "seed": "seed : int\n    Seed."}


def test_a_fragment_takes_its_placeholders_indentation():
    class C:
        @fill_doc(FRAGMENTS)
        def m(self):
            """Do it.

            Parameters
            ----------
            %(k)s
            """

    @fill_doc(FRAGMENTS)
    def f():
        """Do it.

        Parameters
        ----------
        %(both)s
        """

    assert inspect.cleandoc(C.m.__doc__).splitlines()[4:] == ["k : int", "    How many."]
    assert inspect.cleandoc(f.__doc__).splitlines()[4:] == ["k : int", "    How many.",
                                                            "seed : int", "    Seed."]


def test_a_placeholder_without_a_fragment_is_refused_by_name():
    def f():
        """%(missing)s"""

    with pytest.raises(KeyError, match=r"%\(missing\)s names no shared fragment"):
        fill_doc(FRAGMENTS)(f)


def test_the_queries_docstrings_have_no_placeholder_left():
    for name in queries.__all__:
        doc = getattr(queries, name).__doc__
        assert "%(" not in doc, name
    assert "draws : int or None" in queries.uncertainty.__doc__
