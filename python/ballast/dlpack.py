"""Zero-copy exchange by DLPack: a PyCapsule named "dltensor" over a
DLManagedTensor whose deleter releases what kept the memory valid (a pin,
or a handle of the model whose mapping holds the bytes).

Lifetimes. Each capsule owns one C handle of its own, taken when the
capsule is made: a new pin of the value (so the residency never evicts or
frees it) or a new handle of the model (so its mapping stays). A consumer
(numpy.from_dlpack, torch.from_dlpack) takes the capsule and calls the
deleter when its last array goes; a capsule nobody took releases at its
own destruction. So the Python objects that made it may go first.

Consumer errors. A consumer that refuses a capsule (NumPy has no
bfloat16: "Unsupported dtype in DLTensor.") sets its exception and then
drops the capsule. Had that drop destroyed the capsule, its destructor, a
ctypes callback and so Python code, would have run with the exception
pending: its first C call turns a pending exception into a SystemError,
and a ctypes callback cannot leave one set when it returns. So the module
holds its own reference to every capsule it makes until a consumer takes
it or nothing else holds it (`collect()`, run by the module's next export,
`live_exports()`, a residency's `stats`, pins and `release()`, and at
exit): the consumer's drop never destroys it, and its error reaches the
caller as raised.
"""
import atexit
import sys
import ctypes
import itertools
import threading

from ._capi import array_of
from .errors import BallastError, Code

# DLDeviceType (dlpack.h)
CPU, CUDA, VULKAN, ROCM = 1, 2, 7, 10
_DEVICE_OF_BACKEND = {"cpu": CPU, "cuda": CUDA, "hip": ROCM, "vulkan": VULKAN}

# DLDataTypeCode: int 0, uint 1, float 2, bfloat 4, complex 5, bool 6
_DTYPES = {
    "float": (2, 32), "float16": (2, 16), "double": (2, 64), "bfloat16": (4, 16), "bool": (6, 8),
    "complex64": (5, 64), "complex128": (5, 128),
    "int8": (0, 8), "int16": (0, 16), "int32": (0, 32), "int64": (0, 64),
    "uint8": (1, 8), "uint16": (1, 16), "uint32": (1, 32), "uint64": (1, 64),
}


def dl_dtype(name):
    """(code, bits) for a ballast dtype name; None for block-quantized and
    sub-byte types, which cross as their raw bytes (uint8)."""
    return _DTYPES.get(name)


def device_type(backend_name):
    return _DEVICE_OF_BACKEND.get(backend_name)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # void (*)(DLManagedTensor*)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # void (*)(PyObject*)
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, _CAPSULE_DESTRUCTOR]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_NAME = ctypes.create_string_buffer(b"dltensor")  # PyCapsule_New keeps the pointer: module lifetime

_lock = threading.Lock()
_keys = itertools.count(1)
_live = {}  # manager_ctx -> _Export, until the deleter runs
_held = {}  # manager_ctx -> its capsule, until a consumer takes it or nothing else holds it (collect())


class _Export:
    """What one capsule keeps alive: the managed tensor, its shape and
    strides, and `release`, which frees the capsule's own C handle."""

    def __init__(self, key, data, device, dtype, shape, release):
        self.release = release
        n = len(shape)
        self.shape = array_of(ctypes.c_int64, max(n, 1))(*shape)
        strides, step = [0] * n, 1
        for i in reversed(range(n)):
            strides[i] = step
            step *= shape[i]
        self.strides = array_of(ctypes.c_int64, max(n, 1))(*strides)
        m = self.managed = DLManagedTensor()
        m.dl_tensor.data = data
        m.dl_tensor.device = DLDevice(*device)
        m.dl_tensor.ndim = n
        m.dl_tensor.dtype = DLDataType(dtype[0], dtype[1], 1)
        m.dl_tensor.shape = self.shape
        m.dl_tensor.strides = self.strides
        m.dl_tensor.byte_offset = 0
        m.manager_ctx = key
        m.deleter = _deleter


def _finish(managed_address):
    """The deleter's work: drop the export and free its C handle, once."""
    try:
        key = DLManagedTensor.from_address(managed_address).manager_ctx
        with _lock:
            export = _live.pop(key, None)
        if export is not None:
            export.release()
    except Exception:  # a deleter must not raise (and may run at interpreter exit)
        pass


@_DELETER
def _deleter(managed_address):
    if managed_address:
        _finish(managed_address)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # Still named "dltensor": no consumer took it, so it is ours to release.
    # (A consumer renames it "used_dltensor" and calls the deleter itself.)
    try:
        if _capsule_is_valid(capsule, b"dltensor"):
            _finish(_capsule_pointer(capsule, b"dltensor"))
    except Exception:
        pass


def _let_go():
    """Takes out of _held the capsules a consumer took (renamed
    "used_dltensor": the consumer calls the deleter) and those nothing but
    _held refers to (untaken, dropped): their last reference is the caller's."""
    gone = []
    with _lock:
        for key in list(_held):
            capsule = _held[key]
            # References: _held's, `capsule`'s and getrefcount's argument.
            if not _capsule_is_valid(id(capsule), b"dltensor") or sys.getrefcount(capsule) <= 3:
                gone.append(_held.pop(key))
            del capsule
    return gone


def collect():
    """Destroys the capsules only the module still holds: an untaken one
    releases its C handle here. Called where no exception is pending."""
    if _held:
        gone = _let_go()
        del gone  # the destructors run here, outside the lock


def live_exports():
    """How many capsules are still held (by a consumer, or untaken)."""
    collect()
    with _lock:
        return len(_live)


def make_capsule(data, device, dtype_name, shape, nbytes, release):
    """A "dltensor" capsule over `nbytes` at `data` (an address on `device`,
    a (DLDeviceType, id) pair); `release()` runs once, when the last
    consumer is done. Types DLPack has no code for cross as uint8 bytes."""
    dtype = dl_dtype(dtype_name)
    if dtype is None:
        dtype, shape = (1, 8), (int(nbytes),)
    collect()
    key = next(_keys)
    # `release` is owed from here whatever fails: building the export (no
    # memory for its structs) as much as the capsule.
    try:
        export = _Export(key, data, device, dtype, [int(d) for d in shape], release)
        with _lock:
            _live[key] = export
        capsule = _capsule_new(ctypes.addressof(export.managed), ctypes.addressof(_NAME), _capsule_destructor)
    except BaseException:
        with _lock:
            _live.pop(key, None)
        release()
        raise
    with _lock:
        _held[key] = capsule  # a consumer's drop must not destroy it (module docstring)
    return capsule


atexit.register(collect)


class Exportable:
    """__dlpack__ / __dlpack_device__ / numpy() for an object that defines
    _dlpack_device() -> (type, id) and _capsule() -> a fresh capsule.
    numpy() marks its arrays read-only: a weight lies in a read-only
    mapping, and a derived value is memoized, shared by every reader."""

    read_only = True

    def __dlpack_device__(self):
        return self._dlpack_device()

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        # Values are synchronized before a pin returns, so no stream needs
        # to wait; a copy is never made (copy=True is refused).
        if copy:
            raise BufferError("ballast exports in place only (copy=True)")
        if dl_device is not None and tuple(dl_device) != tuple(self._dlpack_device()):
            raise BufferError("ballast exports on the value's own device %s" % (self._dlpack_device(),))
        return self._capsule()

    def numpy(self):
        """numpy.from_dlpack(self): an array over ballast's memory, no copy."""
        import numpy
        if self._dlpack_device()[0] != CPU:
            raise BallastError(Code.UNSUPPORTED, "unsupported: the value is on device %s, not host-visible; "
                               "read() copies it to the host" % (self._dlpack_device(),))
        # NumPy has no bfloat16, and NumPy 1.24 takes no DLPack bool: the
        # same memory crosses as uint16 bits (as `ballast derive --dump`
        # writes bfloat16) and as uint8 viewed as bool.
        dtype = getattr(self, "dtype", None)
        as_dtype = {"bfloat16": "uint16", "bool": "uint8"}.get(dtype)
        array = numpy.from_dlpack(_As(self, as_dtype) if as_dtype else self)
        if dtype == "bool":
            array = array.view(numpy.bool_)
        if getattr(self, "read_only", False):
            array.flags.writeable = False
        return array


class _As:
    """An exportable seen with another element type of the same width."""

    def __init__(self, of, dtype):
        self._of, self._dtype = of, dtype

    def __dlpack_device__(self):
        return self._of._dlpack_device()

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self._of._capsule(self._dtype)
