"""The C API (include/ballast/ballast.h) through ctypes: the structs, and the
function table ballast_get_api(API_VERSION) returns, loaded from the libballast that
lies beside this package in its prefix.

Only this module knows the C layout; the others call `api.<name>(...)` with
`check()` around every status. Struct layouts mirror ballast.h field by
field; every struct is made with `new(T)`, which sets `size` as
BALLAST_INIT does.
"""
import ctypes
import functools
import glob
import operator
import os

from .errors import BallastError

API_VERSION = 8  # the C API version this module is written against

c_status = ctypes.c_void_p  # ballast_status*
c_handle = ctypes.c_void_p  # every opaque handle


class WeightInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("ndims", ctypes.c_size_t), ("dims", ctypes.POINTER(ctypes.c_int64)), ("bytes", ctypes.c_uint64),
                ("file", ctypes.c_char_p), ("offset", ctypes.c_uint64),
                ("gguf_type", ctypes.c_char_p)]  # version 6


class Accounting(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("mapped_bytes", ctypes.c_uint64), ("referenced_bytes", ctypes.c_uint64),
                ("header_bytes", ctypes.c_uint64), ("dead_bytes", ctypes.c_uint64), ("files", ctypes.c_size_t),
                ("dead_ranges", ctypes.c_size_t)]


class ByteRange(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("file", ctypes.c_char_p), ("offset", ctypes.c_uint64),
                ("length", ctypes.c_uint64)]


class DeviceInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("backend", ctypes.c_char_p), ("index", ctypes.c_int32),
                ("name", ctypes.c_char_p), ("uuid", ctypes.c_char_p), ("driver", ctypes.c_char_p),
                ("memory_bytes", ctypes.c_uint64), ("host_registration", ctypes.c_int32),
                ("read_only_registration", ctypes.c_int32), ("unaligned_operands", ctypes.c_int32),
                ("guarded_host_reads", ctypes.c_int32), ("import_alignment", ctypes.c_uint64),
                ("max_single_allocation", ctypes.c_uint64), ("host_visible", ctypes.c_int32)]


class DeviceCounters(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("live_allocations", ctypes.c_uint64), ("live_bytes", ctypes.c_uint64),
                ("live_registrations", ctypes.c_uint64)]


class DerivationInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("weight", ctypes.c_char_p), ("kind", ctypes.c_char_p),
                ("node", ctypes.c_char_p), ("why", ctypes.c_char_p), ("first_bytes", ctypes.c_uint64),
                ("second_bytes", ctypes.c_uint64)]


class Override(ctypes.Structure):
    _fields_ = [("weight", ctypes.c_char_p), ("strategy", ctypes.c_int32)]


class ResidencyOptions(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("strategy", ctypes.c_int32), ("budget_bytes", ctypes.c_uint64),
                ("plan", c_handle), ("kinds", ctypes.c_uint32), ("no_derivations", ctypes.c_int32),
                ("group_by_layer", ctypes.c_char_p), ("overrides", ctypes.POINTER(Override)),
                ("override_count", ctypes.c_size_t)]


STAT_FIELDS = ("budget_bytes", "device_bytes", "peak_device_bytes", "pinned_bytes", "registered_bytes",
               "uploaded_bytes", "paged_in_bytes", "page_ins", "source_evictions", "derived_evictions",
               "derived_builds", "derived_rebuilds", "prefetches", "prefetches_skipped", "prefetches_failed",
               "stuck_bytes")


class ResidencyStats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t)] + [(f, ctypes.c_uint64) for f in STAT_FIELDS]


class Teardown(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("bytes_freed", ctypes.c_uint64), ("allocations_freed", ctypes.c_uint64),
                ("failed_frees", ctypes.c_uint64)]


class Value(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("first", ctypes.c_uint64), ("second", ctypes.c_uint64),
                ("first_bytes", ctypes.c_uint64), ("second_bytes", ctypes.c_uint64)]


class ConformanceResult(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("exit_code", ctypes.c_int32), ("passed", ctypes.c_uint32),
                ("failed", ctypes.c_uint32), ("skipped", ctypes.c_uint32)]


class LoadOptions(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("engine", ctypes.c_int32), ("cache", ctypes.c_int32),
                ("queue_depth", ctypes.c_uint32), ("staging_buffers", ctypes.c_uint32),
                ("chunk_bytes", ctypes.c_uint64), ("direct_io", ctypes.c_int32), ("read_cached", ctypes.c_int32),
                ("populate_threads", ctypes.c_uint32), ("populate_piece_bytes", ctypes.c_uint64)]


LOAD_FIELDS = ("planned_bytes", "planned_ranges", "planned_files", "read_bytes", "io_bytes", "reads", "read_files",
               "direct_files", "mapped_files", "staging_bytes", "peak_staging_in_use", "sources_read",
               "sources_cached", "cached_bytes", "inline_sources", "zero_copy_weights", "populated_bytes",
               "zero_copy_uploads", "derived_built", "already_resident", "left_for_demand", "left_bytes")


class LoadReport(ctypes.Structure):
    _fields_ = ([("size", ctypes.c_size_t)] + [(f, ctypes.c_uint64) for f in LOAD_FIELDS] +
                [("engine", ctypes.c_int32), ("cache", ctypes.c_int32), ("read_seconds", ctypes.c_double),
                 ("seconds", ctypes.c_double)])


class ValueLayout(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("dtype", ctypes.c_char_p), ("ndims", ctypes.c_size_t),
                ("dims", ctypes.POINTER(ctypes.c_int64)), ("bytes", ctypes.c_uint64)]


LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p)
PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)

_P = ctypes.POINTER
_S, _H, _Z, _U64, _I32 = c_status, c_handle, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int32

# ballast_api_v1's members, then version 2's to 8's (6 added none), in header order: (name, result, arguments).
_TABLE = [
    ("status_code", ctypes.c_int, [_S]),
    ("status_message", ctypes.c_char_p, [_S]),
    ("status_free", None, [_S]),
    ("c_api_version", ctypes.c_uint32, []),
    ("library_version", ctypes.c_char_p, []),
    ("check_version", _S, [ctypes.c_uint32]),
    ("set_log_sink", _S, [LOG_FN, ctypes.c_void_p]),
    ("model_open", _S, [ctypes.c_char_p, _P(_H)]),
    ("model_free", _S, [_H]),
    ("model_format", _S, [_H, _P(ctypes.c_char_p)]),
    ("model_weight_count", _S, [_H, _P(_Z)]),
    ("model_weight", _S, [_H, _Z, _P(WeightInfo)]),
    ("model_find_weight", _S, [_H, ctypes.c_char_p, _P(_Z)]),
    ("model_accounting", _S, [_H, _P(Accounting)]),
    ("model_dead_range", _S, [_H, _Z, _P(ByteRange)]),
    ("model_read_weight", _S, [_H, _Z, _U64, ctypes.c_void_p, _Z, _U64]),
    ("backend_open", _S, [ctypes.c_char_p, _P(_H)]),
    ("backend_free", _S, [_H]),
    ("backend_info", _S, [_H, _P(DeviceInfo)]),
    ("backend_counters", _S, [_H, _P(DeviceCounters)]),
    ("plan_derivations", _S, [_H, _I32, _P(_H)]),
    ("plan_free", _S, [_H]),
    ("plan_count", _S, [_H, _P(_Z)]),
    ("plan_entry", _S, [_H, _Z, _P(DerivationInfo)]),
    ("residency_create", _S, [_H, _H, _P(ResidencyOptions), _P(_H)]),
    ("residency_free", _S, [_H]),
    ("residency_release", _S, [_H, _P(Teardown)]),
    ("residency_plan", _S, [_H, _P(_H)]),
    ("residency_group_count", _S, [_H, _P(_Z)]),
    ("residency_stats_get", _S, [_H, _P(ResidencyStats)]),
    ("residency_pin_derivation", _S, [_H, _H, _Z, _P(_H)]),
    ("residency_pin_weight", _S, [_H, ctypes.c_char_p, _P(_H)]),
    ("residency_pin_group", _S, [_H, _Z, ctypes.c_uint32, _P(_H)]),
    ("residency_derive_all", _S, [_H, _H, PROGRESS_FN, ctypes.c_void_p]),
    ("residency_prefetch", _S, [_H, _H, _Z]),
    ("residency_prefetch_group", _S, [_H, _Z]),
    ("residency_wait_prefetches", _S, [_H]),
    ("pin_free", _S, [_H]),
    ("pin_count", _S, [_H, _P(_Z)]),
    ("pin_value", _S, [_H, _Z, _P(Value)]),
    ("pin_read", _S, [_H, _Z, ctypes.c_int, _U64, ctypes.c_void_p, _Z, _U64]),
    ("run_conformance", _S, [ctypes.c_char_p, ctypes.c_char_p, _P(ConformanceResult), ctypes.c_char_p, _Z, _P(_Z)]),
    # version 2
    ("model_retain", _S, [_H, _P(_H)]),
    ("model_weight_data", _S, [_H, _Z, _P(ctypes.c_void_p)]),
    ("plan_entry_layout", _S, [_H, _Z, ctypes.c_int, _P(ValueLayout)]),
    # version 3
    ("derivation_kind_name", ctypes.c_char_p, [ctypes.c_uint32]),
    # version 4
    ("residency_load", _S, [_H, _P(LoadOptions), _P(LoadReport)]),
    # version 5
    ("backend_extension", _S, [_H, ctypes.c_char_p, _P(ctypes.c_void_p)]),
    ("plugin_extension", _S, [ctypes.c_char_p, ctypes.c_char_p, _P(ctypes.c_void_p)]),
    # version 7
    ("printable", _S, [ctypes.c_char_p, _Z, ctypes.c_void_p, _Z, _P(_Z)]),
    # version 8
    ("model_note_count", _S, [_H, _P(_Z)]),
    ("model_note", _S, [_H, _Z, _P(ctypes.c_char_p), _P(ctypes.c_char_p)]),
    ("residency_set_budget", _S, [_H, _U64]),
]


class _Table(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32)] + [(n, ctypes.CFUNCTYPE(r, *a)) for n, r, a in _TABLE]


def new(struct_type):
    """A struct with `size` set (BALLAST_INIT)."""
    s = struct_type()
    s.size = ctypes.sizeof(struct_type)
    return s


def library_path():
    """libballast beside this package: <libdir>/python3/dist-packages/ballast/
    -> <libdir>/libballast.so*, so a moved prefix needs no environment.
    BALLAST_LIBRARY names another one (a build tree)."""
    env = os.environ.get("BALLAST_LIBRARY")
    if env:
        return env
    libdir = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
    for name in ["libballast.so"] + sorted(glob.glob(os.path.join(libdir, "libballast.so.*")), key=len):
        path = os.path.join(libdir, name)
        if os.path.exists(path):
            return path
    raise ImportError("ballast: no libballast.so in %s (set BALLAST_LIBRARY to use another)" % libdir)


class _Api:
    def __init__(self):
        self.path = library_path()
        named = self.path + (" (BALLAST_LIBRARY)" if os.environ.get("BALLAST_LIBRARY") else "")
        try:
            self.lib = ctypes.CDLL(self.path)
        except OSError as e:  # the module's failure to find its library is an ImportError, saying which
            raise ImportError("ballast: cannot load %s: %s" % (named, e)) from None
        try:
            get_api = self.lib.ballast_get_api
        except AttributeError:  # loaded, but no libballast (a wrong BALLAST_LIBRARY): said as one that cannot load
            raise ImportError("ballast: %s is no libballast: it has no ballast_get_api" % named) from None
        get_api.restype = ctypes.c_void_p
        get_api.argtypes = [ctypes.c_uint32]
        table = get_api(API_VERSION)
        if not table:
            raise ImportError("ballast: %s provides C API version < %d" % (self.path, API_VERSION))
        self.table = ctypes.cast(table, ctypes.POINTER(_Table)).contents
        for name, _, _ in _TABLE:
            setattr(self, name, getattr(self.table, name))


api = _Api()


def check(status):
    """Raises BallastError for a non-NULL status (and frees it)."""
    if status:
        # Made by another function and raised unnamed: a local naming the
        # exception would be a cycle with its traceback (which holds this
        # frame), keeping the caller's objects until the cyclic collector ran.
        raise _error(status)


def _error(status):
    code = api.status_code(status)
    raw = api.status_message(status)
    api.status_free(status)
    error = BallastError(code, raw.decode("utf-8", "replace"))
    error._raw = raw  # the message's bytes: `python3 -m ballast` escapes these, as the command line does
    return error


# The ranges of the C fields and arguments Python integers go into. ctypes
# wraps an int outside a field's range silently (-1 becomes 2**64 - 1,
# 2**64 becomes 0) and truncates nothing it is not told to, so every
# integer argument is checked by integer() before it reaches one.
U32 = (0, 2 ** 32 - 1)
U64 = (0, 2 ** 64 - 1)
SIZE = (0, 2 ** (8 * ctypes.sizeof(ctypes.c_size_t)) - 1)


def integer(value, name, bounds, note=""):
    """`value` as a Python int inside `bounds` (lo, hi), the range of the C
    field or argument it goes into. An int, or an integer type with
    __index__ (a NumPy integer); bool and float are refused (TypeError),
    and so is anything outside the range (ValueError), each naming the
    argument and the range, so nothing wraps on its way into ctypes."""
    lo, hi = bounds
    if isinstance(value, bool) or (type(value).__name__ == "bool_" and type(value).__module__ == "numpy") \
            or not hasattr(type(value), "__index__"):
        raise TypeError("%s must be an int in [%d, %d]%s, not %s %r" % (name, lo, hi, note, type(value).__name__,
                                                                      value))
    v = operator.index(value)
    if not lo <= v <= hi:
        raise ValueError("%s must be an int in [%d, %d]%s, not %d" % (name, lo, hi, note, v))
    return v


@functools.lru_cache(maxsize=64)
def array_of(ctype, n):
    """ctype * n, made once per (ctype, n): a ctypes type is a cycle that
    only the cyclic collector frees, so none is made per call."""
    return ctype * n


def read_buffer(length):
    """(buffer, dst) for a C call that copies `length` bytes into caller
    memory: a zeroed bytearray (at least 1 byte) and a pointer to it;
    bytes(memoryview(buffer)[:length]) is the copy. Not
    create_string_buffer, which makes a ctypes type per size: a type is a
    cycle only the cyclic collector frees."""
    buf = bytearray(max(length, 1))
    return buf, ctypes.byref(ctypes.c_char.from_buffer(buf))


def text(b):
    return b.decode("utf-8", "replace") if b is not None else ""


def c_string(value, what, path=False):
    """`value` as the bytes of a C string argument: a str (UTF-8; a path,
    path=True, as os.fsencode spells it, a PathLike too) or bytes (a name
    as the model spells it, which need not be UTF-8). A NUL inside would
    end the C string there, and the library would act on what comes before
    it (`weight("w\\0x")` was weight "w", `open_model("a.onnx\\0b")` opened
    a.onnx), so it is refused with ValueError, as Python's file calls
    refuse one."""
    if path:
        raw = os.fsencode(value)
    elif isinstance(value, bytes):
        raw = value
    elif isinstance(value, str):
        raw = value.encode("utf-8")
    else:
        raise TypeError("%s must be a str or bytes, not %s" % (what, type(value).__name__))
    if b"\0" in raw:
        raise ValueError("%s holds a NUL character, which would end the C string there: %r" % (what, value))
    return raw


ECHO_LIMIT = 1024  # as the library's messages: a name from a (hostile) model echoed at most this long


def echo(name):
    return name if len(name) <= ECHO_LIMIT else "%s... (%d characters)" % (name[:ECHO_LIMIT], len(name))


def dims(pointer, n):
    return tuple(int(pointer[i]) for i in range(n))
