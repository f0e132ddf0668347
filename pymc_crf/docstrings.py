"""Shared docstring text: one wording of a parameter that several public functions take.

A docstring holds a placeholder line ``%(name)s`` (alone on its line, at any indentation) where
the shared text goes; :func:`fill_doc` puts the text there, every line at the placeholder's
indentation. Sphinx (numpydoc) and ``help`` read the filled docstring.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Mapping
from typing import TypeVar

__all__ = ["fill_doc"]

T = TypeVar("T")

_PLACEHOLDER = re.compile(r"^(?P<indent>[ \t]*)%\((?P<name>\w+)\)s[ \t]*$", re.MULTILINE)


def fill_doc(fragments: Mapping[str, str]) -> Callable[[T], T]:
    """Decorator putting ``fragments[name]`` at each ``%(name)s`` line of a docstring.

    Parameters
    ----------
    fragments : mapping of str to str
        Shared texts by name; each is dedented (``textwrap.dedent``, blank lines at either
        end dropped) and indented as its placeholder; it may hold placeholders of other
        fragments.

    Returns
    -------
    callable
        The decorator; it returns the function or class it decorates, with ``__doc__`` filled.

    Raises
    ------
    KeyError
        When a placeholder names no fragment.

    Examples
    --------
    >>> from pymc_crf.docstrings import fill_doc
    >>> @fill_doc({"k": "k : int\\n    How many."})
    ... def f(k):
    ...     '''Parameters
    ...     ----------
    ...     %(k)s
    ...     '''
    >>> print(f.__doc__.splitlines()[2:4])
    ['    k : int', '        How many.']
    """
    def fill(match: re.Match) -> str:
        name, indent = match["name"], match["indent"]
        if name not in fragments:
            raise KeyError(f"docstring placeholder %({name})s names no shared fragment; known: "
                           f"{sorted(fragments)}")
        text = _PLACEHOLDER.sub(fill, textwrap.dedent(fragments[name]).strip("\n"))
        return "\n".join(indent + line if line else line for line in text.splitlines())

    def decorate(obj: T) -> T:
        if obj.__doc__:  # None under python -OO
            obj.__doc__ = _PLACEHOLDER.sub(fill, obj.__doc__)
        return obj

    return decorate
