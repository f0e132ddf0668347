"""``fill_doc``: shared parameter texts put into docstrings at their placeholders."""

import importlib
import inspect
import re

import pytest

import pymc_crf as pmc
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


# ---------------------------------------------------------------- docstrings against signatures
SUBPACKAGES = ("calibration", "datasets", "distributed", "features", "fitters", "inference",
               "metrics", "plots", "queries", "step_methods")
_SECTION = re.compile(r"^(?P<title>[A-Z][A-Za-z ]+)\n-{3,}\n", re.MULTILINE)


def documented_names(doc: str, section: str) -> list[str] | None:
    """The names a numpy docstring's ``section`` documents (``a, b : int`` documents both), or
    None without that section; a name line ending in a comma (a list wrapped onto the next
    line, which numpydoc reads as two entries, the first without a text) is kept as ``","``."""
    doc = inspect.cleandoc(doc)
    heads = list(_SECTION.finditer(doc))
    for i, head in enumerate(heads):
        if head["title"] != section:
            continue
        end = heads[i + 1].start() if i + 1 < len(heads) else len(doc)
        names = []
        for line in doc[head.end():end].splitlines():
            if not line.strip() or line[0].isspace():
                continue
            entry = line.split(" : ")[0].strip()
            if entry.endswith(","):
                names.append(",")
            names += [n.strip().lstrip("*") for n in entry.split(",") if n.strip()]
        return names
    return None


def public_objects():
    """Every public name (``pmc.__all__`` and the subpackages' ``__all__``), the public methods
    of the public classes, and the registered fitters, by a readable key."""
    from pymc_crf.fitters.registry import available, fitter

    found = {f"pmc.{n}": getattr(pmc, n) for n in pmc.__all__}
    for sub in SUBPACKAGES:
        module = importlib.import_module(f"pymc_crf.{sub}")
        found.update({f"{sub}.{n}": getattr(module, n) for n in module.__all__})
    found.update({f"fit(method={m!r})": fitter(m) for m in available()})
    objects = {}
    for key, obj in found.items():
        if inspect.ismodule(obj) or not callable(obj):
            continue
        objects.setdefault(id(obj), (key, obj))
        if inspect.isclass(obj):
            for name, member in vars(obj).items():
                if isinstance(member, staticmethod | classmethod):
                    member = member.__func__
                if ((not name.startswith("_") or name == "__call__") and inspect.isfunction(member)
                        and member.__module__.startswith("pymc_crf")):
                    objects.setdefault(id(member), (f"{key}.{name}", getattr(obj, name)))
    return list(objects.values())


def signature_of(obj):
    """The parameters a docstring documents: a class's constructor's (a distribution's
    ``dist``'s, whose ``name`` and ``observed`` its docstring may add)."""
    from pymc.distributions.distribution import Distribution

    extra = set()
    if inspect.isclass(obj) and issubclass(obj, Distribution):
        obj, extra = obj.dist, {"name", "observed"}
    elif inspect.isclass(obj):
        obj = obj.__init__
    params = {k: p for k, p in inspect.signature(obj).parameters.items() if k not in ("self", "cls")}
    return params, extra


def test_public_docstrings_document_the_real_parameters():
    import dataclasses

    wrong = []
    for key, obj in public_objects():
        if not obj.__doc__:
            continue
        if dataclasses.is_dataclass(obj):
            names = ((documented_names(obj.__doc__, "Attributes") or [])
                     + (documented_names(obj.__doc__, "Parameters") or []))
            undocumented = [f.name for f in dataclasses.fields(obj) if f.name not in names]
            if undocumented:
                wrong.append(f"{key}: fields {undocumented} undocumented")
            continue
        names = documented_names(obj.__doc__, "Parameters")
        if names is None:
            continue
        if "," in names:
            wrong.append(f"{key}: a parameter line ends in a comma (wrap it as two entries)")
        params, extra = signature_of(obj)
        variadic = {p.kind for p in params.values()} & {inspect.Parameter.VAR_POSITIONAL,
                                                       inspect.Parameter.VAR_KEYWORD}
        missing = [k for k, p in params.items() if k not in names and p.kind not in variadic]
        # options read from **kwargs may be documented by name
        unknown = [] if inspect.Parameter.VAR_KEYWORD in variadic else \
            [n for n in names if n not in params and n not in extra and n != ","]
        if missing or unknown:
            wrong.append(f"{key}: undocumented {missing}, no such parameter {unknown}")
    assert not wrong, "\n".join(wrong)
