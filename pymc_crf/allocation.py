"""Large numba-allocated arrays backed by transparent huge pages.

A fresh array of tens of megabytes that a kernel allocates and then writes is paid for by the
kernel's first touch of each page. Arrays above glibc's largest mmap threshold (32 MB) are mapped
anew on every call, so a kernel returning the (E, K, K) edge marginals of a large batch takes one
page fault per 4 KiB on every call, several times slower than the same writes into an array
from numpy (numpy asks the kernel for huge pages, ``madvise(MADV_HUGEPAGE)``, on every allocation
above 4 MB; numba's allocator does not; docs/benchmarks.md, "Chain paths"). ``empty_pages``
allocates like ``np.empty`` and gives the same advice for the 2 MiB-aligned part of the array
before anything touches it.

The advice goes to libc's ``madvise`` by its symbol name, resolved when the compiled code is
loaded (not a baked-in address), so the kernels that call it stay cacheable. It is Linux only
and only advice: where transparent huge pages are off, or on other systems (where this is a
no-op), the arrays are ordinary ``np.empty`` arrays.
"""

from __future__ import annotations

import sys

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from pymc_crf.kernel_cache import njit

__all__ = ["advise_huge_pages", "empty_pages", "zeros_pages"]

_MADV_HUGEPAGE = 14  # linux/mman-common.h, the same on every architecture
_HUGE_PAGE = 1 << 21
_MIN_BYTES = 1 << 22  # numpy's threshold for the same advice


@intrinsic
def _advise_huge_pages(typingctx, addr, length):
    """``madvise(addr, length, MADV_HUGEPAGE)``: 0 on success (and off Linux, where nothing is
    called), -1 when the kernel refuses the advice."""
    sig = types.int32(types.uintp, types.uintp)

    def codegen(context, builder, signature, args):
        if not sys.platform.startswith("linux"):
            return ir.Constant(ir.IntType(32), 0)
        i8p = ir.IntType(8).as_pointer()
        size_t = context.get_value_type(types.uintp)
        fnty = ir.FunctionType(ir.IntType(32), [i8p, size_t, ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "madvise")
        ptr = builder.inttoptr(args[0], i8p)
        return builder.call(fn, [ptr, args[1], ir.Constant(ir.IntType(32), _MADV_HUGEPAGE)])

    return sig, codegen


@njit(cache=True)
def advise_huge_pages(a):
    """Advise huge pages for the whole 2 MiB blocks inside array ``a``'s memory.

    Parameters
    ----------
    a : ndarray
        A contiguous array, best still untouched (pages already faulted in stay small until the
        kernel's background thread merges them).

    Returns
    -------
    int
        ``madvise``'s result: 0 when the advice was taken (or not needed: below 4 MB, off
        Linux), -1 when the kernel refused it. Callers may ignore it; it is advice only.
    """
    nbytes = a.size * a.itemsize
    if nbytes < _MIN_BYTES:
        return 0
    p = a.ctypes.data
    h = np.uintp(_HUGE_PAGE)
    # Only whole, aligned 2 MiB blocks can become huge pages. Rounding the range inward (unlike
    # numpy, which advises from the enclosing 4 KiB page) keeps the advice off the neighbouring
    # heap memory that shares the first and last blocks with this array.
    start = (p + h - np.uintp(1)) // h * h
    end = (p + np.uintp(nbytes)) // h * h
    if end > start:
        return _advise_huge_pages(start, end - start)
    return 0


@njit(cache=True)
def empty_pages(shape):
    """``np.empty(shape)`` (float64) with huge pages advised for its untouched memory.

    Parameters
    ----------
    shape : int or tuple of int

    Returns
    -------
    ndarray
        Uninitialised float64 array of that shape.
    """
    a = np.empty(shape)
    advise_huge_pages(a)
    return a


@njit(cache=True)
def zeros_pages(shape):
    """``empty_pages(shape)`` filled with zeros: the advice comes before the fill, so the zero
    fill faults in huge pages (the counterpart of ``np.zeros``; same parameter)."""
    a = empty_pages(shape)
    a.fill(0.0)
    return a
