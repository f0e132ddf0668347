"""numba's disk cache of the package's kernels, refreshed when any module a kernel can call changes.

numba keeps a compiled ``njit(cache=True)`` function beside its source (or under
``NUMBA_CACHE_DIR``) and checks it against a hash of that one source file. A kernel that calls
kernels of other modules (``ep_sweep`` in ``fitters/ep/core.py`` calls ``low_rank_y`` in
``gaussian.py``) has their machine code compiled into its own, so after an edit of a callee's
module alone (``git pull`` in an editable install) numba would load the caller with the old
callee. The package's kernels are therefore cached by locators whose source stamp hashes the
kernel's module together with every ``pymc_crf`` module it imports, directly or through others.

The kernel modules import ``njit`` from here, which installs the locators first (numba picks a
function's locator when ``njit`` decorates it).
"""

from __future__ import annotations

import ast
import hashlib
import os
from functools import cache
from pathlib import Path

from numba import njit
from numba.core import caching

__all__ = ["njit", "source_stamp"]

_PACKAGE = Path(__file__).resolve().parent


def _module_file(name: str) -> Path | None:
    """The source file of the ``pymc_crf`` module ``name`` (None if there is none)."""
    rel = Path(*name.split(".")[1:])
    for path in (_PACKAGE / rel).with_suffix(".py"), _PACKAGE / rel / "__init__.py":
        if path.is_file():
            return path
    return None


@cache
def _direct_imports(path: Path, mtime_ns: int, size: int) -> tuple[Path, ...]:
    """Files of the ``pymc_crf`` modules that ``path`` imports anywhere in its code (keyed by
    the file's mtime and size, so a file edited while the process runs is read again)."""
    tree = ast.parse(path.read_bytes())
    package = ".".join(("pymc_crf", *path.relative_to(_PACKAGE).parent.parts))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the importing module's package
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            # "from pymc_crf.x import y" may import the module pymc_crf.x.y
            names += [module, *(f"{module}.{a.name}" for a in node.names)]
    files = {_module_file(n) for n in names if n == "pymc_crf" or n.startswith("pymc_crf.")}
    return tuple(sorted(f for f in files if f is not None and f != path))


@cache
def _digest(path: Path, mtime_ns: int, size: int) -> bytes:
    """SHA-256 of the file's content (keyed as ``_direct_imports``)."""
    return hashlib.sha256(path.read_bytes()).digest()


def source_stamp(path: str | os.PathLike) -> str:
    """The hex SHA-256 of ``path`` and of every ``pymc_crf`` module it imports, directly or
    through others (by relative path and content)."""
    start = Path(path).resolve()
    seen, todo = {start}, [start]
    while todo:  # the import graph, depth first
        current = todo.pop()
        st = current.stat()
        for dep in _direct_imports(current, st.st_mtime_ns, st.st_size):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    h = hashlib.sha256()
    for f in sorted(seen):
        st = f.stat()
        h.update(str(f.relative_to(_PACKAGE)).encode())
        h.update(_digest(f, st.st_mtime_ns, st.st_size))
    return h.hexdigest()


def _in_package(py_file: str) -> bool:
    try:
        Path(py_file).resolve().relative_to(_PACKAGE)
    except ValueError:
        return False
    return True


class _ImportClosureStamp:
    """Mixin for numba's source-file locators: the stamp of :func:`source_stamp`, for the
    package's own files only (other files keep numba's locators)."""

    def get_source_stamp(self):
        return source_stamp(self._py_file)

    @classmethod
    def from_function(cls, py_func, py_file):
        if not _in_package(py_file):
            return None
        return super().from_function(py_func, py_file)


class _UserDirLocator(_ImportClosureStamp, caching.UserProvidedCacheLocator):
    """``NUMBA_CACHE_DIR`` when it is set."""


class _InTreeLocator(_ImportClosureStamp, caching.InTreeCacheLocator):
    """``__pycache__`` beside the module."""


class _UserWideLocator(_ImportClosureStamp, caching.UserWideCacheLocator):
    """The user-wide cache folder, where the package's folder is not writable."""


_LOCATORS = [_UserDirLocator, _InTreeLocator, _UserWideLocator]
if not any(cls in caching.CacheImpl._locator_classes for cls in _LOCATORS):
    caching.CacheImpl._locator_classes[:0] = _LOCATORS
