"""The memory allocator of a job's process, set so a timed call never pays page faults for its outputs."""

from __future__ import annotations

import ctypes
import functools

import torch

# mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library this process runs on, opened once."""
    return ctypes.CDLL(None)


def warm_allocator() -> bool:
    """Make glibc's allocator reuse what a call freed: never hand out a large block by mmap and never give
    freed memory back to the system. Otherwise every output of 32 MiB or more (the most glibc lets its
    mmap threshold rise to) is fresh memory on every call, and a timed call pays its page faults on
    top of the kernel: torch.relu on 8M floats took 14.9-23.0 ms with 8,193 faults per call, 4.6-5.4 ms
    with none (a plain process, 30 calls each way, alternately). Set in the job's own process (mallopt),
    for the reference, the candidate and the best alike; a job is short-lived and its address space is
    capped. False where the C library has no mallopt (not glibc)."""
    try:
        mallopt = _libc().mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def warm_heap_top(nbytes: int) -> None:
    """Touch ``nbytes`` at the top of the heap, where the next call's outputs will be carved, so they do
    not fault in fresh pages while timed. The allocator alone is not enough: a tensor is allocated
    aligned (posix_memalign), and a freed block with anything small allocated after it is too short
    for the next aligned request of the same size, so glibc 2.36 extends the heap and the next call
    faults in every page again (1 run in 15 of a 40 MiB output here, the first time an OpenMP thread
    starts between calls). Touching twice the outputs at the top after every call hands the next call
    memory that is already mapped, whichever block it is carved from; with ``warm_allocator`` that
    memory is never given back. Not timed. It is left holding ``SPOILED`` bytes, never zeros (``spoil``). Written by
    this thread alone (``memset``, never PyTorch's ``fill_``, which may hand a large tensor to its OpenMP threads): the
    harness holds every other thread of an untrusted side's process while the side settles
    (``verifier.window.harness``)."""
    warm = torch.empty(nbytes, dtype=torch.uint8)
    if nbytes:
        _libc().memset(ctypes.c_void_p(warm.data_ptr()), SPOILED, ctypes.c_size_t(nbytes))
    del warm


# What memory handed to a call holds (``spoil``, ``warm_heap_top``): all bits set: NaN, or -1 in integers.
SPOILED = 0xFF


def spoil(tensors: list[torch.Tensor], avoid: tuple[int, int] = (0, 0)) -> None:
    """Overwrite the memory of a call's outputs (``SPOILED``) once the harness has read them, so the next call,
    handed the same block back by the allocator, finds neither the last result nor zeros in it: a kernel that
    wrote only what changed (a padding's zeros left from the last call) passed every check and read 1.92-4.37x
    faster (red team, issue #35). Host memory only, each storage once; outputs in ``avoid`` (start, end: the
    side's read-only input mapping, an output that is a view of an input) are left alone. Not timed. Only where the
    harness cannot write the side's memory: elsewhere the harness spoils them itself with the side stopped
    (``verifier.window.harness``), since code in the side's process can replace this function."""
    memset = _libc().memset
    done: set[int] = set()
    for t in tensors:
        if t.device.type != "cpu":
            continue
        storage = t.untyped_storage()
        address, size = storage.data_ptr(), storage.nbytes()
        if not size or address in done or (address < avoid[1] and avoid[0] < address + size):
            continue
        done.add(address)
        memset(ctypes.c_void_p(address), SPOILED, ctypes.c_size_t(size))


def spoil_device(tensors: list[torch.Tensor], *, host_too: bool = False) -> None:
    """Overwrite the device memory of a call's outputs with ``SPOILED``, each storage once (host tensors left alone
    unless ``host_too``): a device's caching allocator (torch_npu's, CUDA's) hands a freed output block back to the
    next call as it is, so a kernel that wrote only part of its outputs would find the last result there and pass.
    Called by an untrusted side where the harness stages its next call (``verifier.window.side``, ``Stage``), never
    while it settles: the harness holds every other thread of the side then, and torch_npu's queue thread, which
    runs device work, would block the fill (and the side) for good. Not timed; the staging synchronises after."""
    done: set[tuple[str, int]] = set()
    for t in tensors:
        if t.device.type == "cpu" and not host_too:
            continue
        storage = t.untyped_storage()
        key = (str(t.device), storage.data_ptr())
        if not storage.nbytes() or key in done:
            continue
        done.add(key)
        try:
            raw = torch.empty(0, dtype=torch.uint8, device=t.device)
            raw.set_(storage)
            raw.fill_(SPOILED)
        except (RuntimeError, TypeError):   # a device without set_ on raw storage: the tensor's own elements
            t.detach().fill_(float("nan") if t.is_floating_point() or t.is_complex() else -1)
