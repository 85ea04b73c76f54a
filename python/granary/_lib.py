"""Loading libgranary (the C client library) with ctypes.

The library is looked for, in order:

1. ``$GRANARY_LIB`` (a path to the shared object);
2. ``build/libgranary.so`` of the source tree this package sits in
   (``python/granary`` -> ``build/``), for use straight from a checkout;
3. an installed ``libgranary.so.0`` (``make install``), by the dynamic
   loader's search and then by :func:`ctypes.util.find_library`.

Only the ``gr_`` functions of ``client/granary.h`` are bound here; the
Python objects built on them are in ``granary/__init__.py``.
"""
import ctypes
import ctypes.util
import os

__all__ = ["lib", "path", "STATS_CB", "Hint", "DevRange", "GpuStats"]

# int (*cb)(void *arg, const char *name, uint64_t value)
STATS_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64)




class Hint(ctypes.Structure):
    """struct gr_hint: one hinted range (len 0: to the end of the file)."""
    _fields_ = [("path", ctypes.c_char_p), ("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class DevRange(ctypes.Structure):
    """struct gr_dev_range: one range of gr_read_to_device_batch."""
    _fields_ = [("f", ctypes.c_void_p), ("off", ctypes.c_uint64), ("len", ctypes.c_uint64),
                ("dst", ctypes.c_void_p), ("done", ctypes.c_uint64)]


class GpuStats(ctypes.Structure):
    """struct gr_gpu_stats (client/granary.h)."""
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "copies", "bytes", "direct_bytes", "staged_bytes", "tier_hits", "tier_hit_bytes",
        "tier_misses", "tier_evictions", "tier_used_bytes", "tier_cap_bytes",
        "registered_segments", "registration_failures", "leased_bytes", "batches_inflight")] + [
        ("gds_available", ctypes.c_int)]


def _candidates():
    env = os.environ.get("GRANARY_LIB")
    if env:
        # An explicit choice is not second-guessed: if it fails, say so.
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    repo_build = os.path.join(os.path.dirname(os.path.dirname(here)), "build", "libgranary.so")
    if os.path.exists(repo_build):
        yield repo_build
    yield "libgranary.so.0"
    found = ctypes.util.find_library("granary")
    if found:
        yield found


def _load():
    errors = []
    for cand in _candidates():
        try:
            return ctypes.CDLL(cand, use_errno=True), cand
        except OSError as e:
            errors.append("%s: %s" % (cand, e))
    raise ImportError("granary: cannot load libgranary (set GRANARY_LIB, build it with `make`, "
                      "or `make install`): " + "; ".join(errors))


def _bind(lib):
    vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    sig = {
        "gr_connect": (vp, [cp]),
        "gr_disconnect": (None, [vp]),
        "gr_open": (vp, [vp, cp]),
        "gr_pread": (ctypes.c_ssize_t, [vp, vp, sz, ctypes.c_int64]),
        "gr_fstat": (ctypes.c_int, [vp, vp]),
        "gr_close": (ctypes.c_int, [vp]),
        "gr_stats": (ctypes.c_int, [vp, STATS_CB, vp]),
        "gr_strerror_last": (cp, [vp]),
        "gr_hint_append": (ctypes.c_int, [vp, ctypes.POINTER(Hint), sz]),
        "gr_hint_clear": (ctypes.c_int, [vp]),
        "gr_open_ahead": (ctypes.c_int, [vp, ctypes.POINTER(cp), sz]),
        # the GPU path
        "gr_read_to_device_batch": (ctypes.c_int, [vp, ctypes.POINTER(DevRange), sz, vp,
                                                   ctypes.POINTER(vp)]),
        "gr_dev_wait": (ctypes.c_int, [vp]),
        "gr_dev_poll": (ctypes.c_int, [vp]),
        "gr_gpu_set": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_uint64]),
        "gr_gpu_get_stats": (ctypes.c_int, [vp, ctypes.POINTER(GpuStats)]),
        "gr_gpu_info": (ctypes.c_int, [vp, ctypes.c_char_p, sz]),
    }
    # Newer than the rest: an older installed library lacks them, and then
    # only the calls that need them fail (ENOSYS), not the import.
    optional = ("gr_hint_append", "gr_hint_clear", "gr_open_ahead", "gr_read_to_device_batch", "gr_dev_wait",
                "gr_dev_poll", "gr_gpu_set", "gr_gpu_get_stats", "gr_gpu_info")
    for name, (res, args) in sig.items():
        if name in optional and not hasattr(lib, name):
            continue
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


lib, path = _load()
_bind(lib)
