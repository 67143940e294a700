"""Models: ballast.open_model(path), its weights and its accounting."""
import ctypes
import os
from dataclasses import dataclass, field

from . import _capi, dlpack
from ._capi import api, check, text
from .errors import BallastError, Code


@dataclass(frozen=True)
class DeadRange:
    file: str
    offset: int
    length: int
    # The file's name as the model spells it (need not be UTF-8): what
    # `python3 -m ballast inspect` escapes, as the command line does.
    raw_file: bytes = field(default=b"", repr=False, compare=False)


@dataclass(frozen=True)
class Note:
    """A load note (ballast_model_note): what the file holds that ballast
    read past, or that an engine should know (a sparse initializer not
    loaded, initializers a caller may override as graph inputs)."""
    tensor: str   # the tensor or node it is about ("" when none)
    message: str
    # Both as the library gives them (a name need not be UTF-8): what
    # `python3 -m ballast inspect` escapes, as the command line does.
    raw_tensor: bytes = field(default=b"", repr=False, compare=False)
    raw_message: bytes = field(default=b"", repr=False, compare=False)


@dataclass(frozen=True)
class Accounting:
    """Every mapped byte accounted for (ballast_accounting)."""
    mapped_bytes: int
    referenced_bytes: int
    header_bytes: int
    dead_bytes: int
    files: int
    dead_ranges: tuple  # of DeadRange


class _Handle:
    """One C handle and the call that frees it; freed once, by close() or
    when the object goes. Uses after close() pass the stale handle on, and
    the C API refuses it (BallastError, Code.INVALID_HANDLE)."""

    _free = None

    def __init__(self, handle):
        self._h = handle
        self._closed = False

    def close(self):
        if not self._closed:
            self._closed = True
            check(type(self)._free(self._h))

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def closed(self):
        return self._closed


class Weight(dlpack.Exportable):
    """One weight as stored: name, dtype, dims, bytes, file, offset, and for
    a GGUF model gguf_type, GGUF's name of the type ("Q4_K"; "" for the
    other formats, as `ballast inspect` prints them). On the
    host in the model's mapping, so it exports without a copy
    (numpy(), __dlpack__); read-only: never write through the array."""

    read_only = True

    def __init__(self, model, index, info):
        self.model = model
        self.index = index
        self.name = text(info.name)
        self._raw_name = info.name or b""  # as the model spells it (need not be UTF-8): what pins and finds it
        self.dtype = text(info.dtype)
        self.dims = _capi.dims(info.dims, info.ndims)
        self.bytes = int(info.bytes)
        self.file = text(info.file)
        self._raw_file = info.file or b""
        self.offset = int(info.offset)
        self.gguf_type = text(info.gguf_type)

    def __repr__(self):
        return "Weight(%r, %s%s, %d bytes)" % (self.name, self.dtype, list(self.dims), self.bytes)

    def read(self, offset=0, length=None):
        """A copy of bytes [offset, offset + length) as stored; length None:
        to the end."""
        offset = _capi.integer(offset, "offset", _capi.U64)
        length = _capi.integer(max(self.bytes - offset, 0) if length is None else length, "length", _capi.SIZE)
        if offset + length > self.bytes:  # refused before a buffer of `length` bytes is allocated for nothing
            where = ("file=%s, " % _capi.echo(self.file) if self.file else "")  # as the C API's, names capped
            where += "tensor=" + _capi.echo(self.name)
            raise BallastError(Code.OUT_OF_BOUNDS, "out_of_bounds: copying [%d, +%d) of a %d-byte weight [%s]"
                               % (offset, length, self.bytes, where))
        buf, dst = _capi.read_buffer(length)
        check(api.model_read_weight(self.model._h, self.index, offset, dst, length, length))
        return bytes(memoryview(buf)[:length])

    def _dlpack_device(self):
        return (dlpack.CPU, 0)

    def _capsule(self, as_dtype=None):
        data = ctypes.c_void_p()
        check(api.model_weight_data(self.model._h, self.index, ctypes.byref(data)))
        keep = _capi.c_handle()  # the capsule's own model handle: the mapping stays while it lives
        check(api.model_retain(self.model._h, ctypes.byref(keep)))
        return dlpack.make_capsule(data.value, (dlpack.CPU, 0), as_dtype or self.dtype, self.dims, self.bytes,
                                   lambda: api.status_free(api.model_free(keep)))


class Model(_Handle):
    """An open model (ballast_model): ONNX, safetensors (a file or a sharded
    index) or GGUF, told apart by its bytes, mapped, nothing copied."""

    _free = api.model_free

    def __init__(self, path):
        h = _capi.c_handle()
        check(api.model_open(_capi.c_string(path, "model path", path=True), ctypes.byref(h)))
        super().__init__(h)
        self.path = os.fspath(path)

    def __repr__(self):
        return "Model(%r)" % self.path

    @property
    def format(self):
        out = ctypes.c_char_p()
        check(api.model_format(self._h, ctypes.byref(out)))
        return text(out.value)

    @property
    def weights(self):
        """Every weight, in the model's order (a list of Weight)."""
        n = ctypes.c_size_t()
        check(api.model_weight_count(self._h, ctypes.byref(n)))
        out = []
        for i in range(n.value):
            info = _capi.new(_capi.WeightInfo)
            check(api.model_weight(self._h, i, ctypes.byref(info)))
            out.append(Weight(self, i, info))
        return out

    def weight(self, name):
        """The weight called `name`, a str or the bytes the model spells it
        with (BallastError NOT_FOUND when none)."""
        index = ctypes.c_size_t()
        check(api.model_find_weight(self._h, _capi.c_string(name, "weight name"), ctypes.byref(index)))
        info = _capi.new(_capi.WeightInfo)
        check(api.model_weight(self._h, index.value, ctypes.byref(info)))
        return Weight(self, index.value, info)

    @property
    def accounting(self):
        a = _capi.new(_capi.Accounting)
        check(api.model_accounting(self._h, ctypes.byref(a)))
        ranges = []
        for i in range(a.dead_ranges):
            r = _capi.new(_capi.ByteRange)
            check(api.model_dead_range(self._h, i, ctypes.byref(r)))
            ranges.append(DeadRange(text(r.file), int(r.offset), int(r.length), r.file or b""))
        return Accounting(int(a.mapped_bytes), int(a.referenced_bytes), int(a.header_bytes), int(a.dead_bytes),
                          int(a.files), tuple(ranges))

    @property
    def notes(self):
        """The load notes, as `ballast inspect` lists them (a list of Note)."""
        n = ctypes.c_size_t()
        check(api.model_note_count(self._h, ctypes.byref(n)))
        out = []
        for i in range(n.value):
            tensor, message = ctypes.c_char_p(), ctypes.c_char_p()
            check(api.model_note(self._h, i, ctypes.byref(tensor), ctypes.byref(message)))
            out.append(Note(text(tensor.value), text(message.value), tensor.value or b"", message.value or b""))
        return out

    def plan(self, source="automatic"):
        """The derivations the model's kernels want (a Plan): from the graph,
        the built-in name rules, or both."""
        from .plan import Plan
        return Plan._of_model(self, source)


def open_model(path):
    """Opens the model at `path` (ballast_model_open)."""
    return Model(path)
