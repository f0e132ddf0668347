"""numba's disk cache of the package's kernels is keyed by the kernel's module and every package
module it imports (``pymc_crf.kernel_cache``)."""

import importlib
import pkgutil
from pathlib import Path

from numba.core.registry import CPUDispatcher

import pymc_crf
from pymc_crf import kernel_cache
from pymc_crf.kernel_cache import source_stamp

ROOT = Path(pymc_crf.__file__).parent


def _package(tmp_path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "pymc_crf" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "pymc_crf"


def test_the_stamp_follows_imports_through_other_modules(tmp_path, monkeypatch):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pymc_crf.b import f\n",
        "b.py": "def f():\n    from pymc_crf.sub import g\n",  # an import inside a function
        "sub/__init__.py": "from pymc_crf.sub.c import g\n",
        "sub/c.py": "g = 1\n",
        "d.py": "h = 1\n",
        "e.py": "from pymc_crf import d\n",  # the module pymc_crf.d, named as a package member
    })
    monkeypatch.setattr(kernel_cache, "_PACKAGE", pkg)
    before = source_stamp(pkg / "a.py")
    (pkg / "d.py").write_text("h = 2\n")  # a module a.py does not reach
    assert source_stamp(pkg / "a.py") == before
    (pkg / "sub" / "c.py").write_text("g = 2\n")  # a.py -> b.py -> sub -> sub/c.py
    assert source_stamp(pkg / "a.py") != before
    e = source_stamp(pkg / "e.py")
    (pkg / "d.py").write_text("h = 3\n")
    assert source_stamp(pkg / "e.py") != e


def test_an_ep_kernel_is_stamped_with_the_gaussian_updates_it_calls(monkeypatch):
    # ep_sweep (fitters/ep/core.py) compiles low_rank_y (fitters/ep/gaussian.py) into itself
    core, gaussian = ROOT / "fitters" / "ep" / "core.py", ROOT / "fitters" / "ep" / "gaussian.py"
    before = source_stamp(core)
    real = kernel_cache._digest

    def edited(path, *key):
        return b"edited" if path == gaussian else real(path, *key)

    monkeypatch.setattr(kernel_cache, "_digest", edited)
    assert source_stamp(core) != before


def test_every_cached_kernel_of_the_package_uses_its_locator():
    cached = []
    for info in pkgutil.walk_packages([str(ROOT)], "pymc_crf."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (isinstance(value, CPUDispatcher) and value.py_func.__module__ == info.name
                    and hasattr(value._cache, "_impl")):  # njit(cache=True)
                cached.append(value)
    assert len(cached) > 50
    wrong = [d.py_func.__qualname__ for d in cached
             if type(d._cache._impl._locator).__module__ != "pymc_crf.kernel_cache"]
    assert not wrong
