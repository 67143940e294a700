"""Backends by config string (ballast_backend): device info and capabilities."""
import ctypes
from dataclasses import dataclass

from . import _capi
from ._capi import api, check, text
from .model import _Handle


@dataclass(frozen=True)
class DeviceInfo:
    backend: str  # "cpu", "cuda", "hip", "vulkan", ...
    index: int
    name: str
    uuid: str
    driver: str
    memory_bytes: int
    host_registration: bool
    read_only_registration: bool
    unaligned_operands: bool
    guarded_host_reads: bool
    import_alignment: int
    max_single_allocation: int
    host_visible: bool  # device pointers are addresses in this process (the CPU backend)


@dataclass(frozen=True)
class Counters:
    live_allocations: int
    live_bytes: int
    live_registrations: int


class Backend(_Handle):
    _free = api.backend_free

    def __init__(self, config):
        h = _capi.c_handle()
        check(api.backend_open(_capi.c_string(config, "backend config"), ctypes.byref(h)))
        super().__init__(h)
        self.config = config
        self._info = None

    def __repr__(self):
        return "Backend(%r)" % self.config

    @property
    def info(self):
        i = _capi.new(_capi.DeviceInfo)
        check(api.backend_info(self._h, ctypes.byref(i)))
        return DeviceInfo(text(i.backend), int(i.index), text(i.name), text(i.uuid), text(i.driver),
                          int(i.memory_bytes), bool(i.host_registration), bool(i.read_only_registration),
                          bool(i.unaligned_operands), bool(i.guarded_host_reads), int(i.import_alignment),
                          int(i.max_single_allocation), bool(i.host_visible))

    def extension(self, name):
        """The device's extension `name` (its plugin's get_proc_address) as an
        address, 0 when there is none; what it points to is the extension's
        own contract (ctypes.cast it). Valid while this backend lives."""
        out = ctypes.c_void_p()
        check(api.backend_extension(self._h, _capi.c_string(name, "extension name"), ctypes.byref(out)))
        return int(out.value or 0)

    @property
    def counters(self):
        c = _capi.new(_capi.DeviceCounters)
        check(api.backend_counters(self._h, ctypes.byref(c)))
        return Counters(int(c.live_allocations), int(c.live_bytes), int(c.live_registrations))


def plugin_extension(backend, name):
    """The plugin-wide extension `name` of the plugin serving `backend`
    ("cuda"), loading it if need be but opening no device: an address, 0
    when there is none. Plugins are never unloaded, so it stays valid."""
    out = ctypes.c_void_p()
    check(api.plugin_extension(_capi.c_string(backend, "backend name"), _capi.c_string(name, "extension name"),
                                ctypes.byref(out)))
    return int(out.value or 0)


def open_backend(config):
    """Opens a backend: "cpu", "vulkan", "vulkan:0", "cuda:0", "hip:0", ... (docs/backends.md)."""
    return Backend(config)


@dataclass(frozen=True)
class ConformanceResult:
    """The conformance suite's outcome: its exit code (0 passed, 1 failed,
    77 the backend is not on this machine), test-case counts, and its JSON
    summary (a dict; None when the suite wrote none)."""
    exit_code: int
    passed: int
    failed: int
    skipped: int
    summary: object


def run_conformance(backend_config, filter=None):
    """Runs the installed conformance suite on `backend_config` in a child
    process (ballast_run_conformance); `filter`: test-case names, doctest
    wildcards ("device weights*"). A failing suite is a result, not an error."""
    import json
    r = _capi.new(_capi.ConformanceResult)
    capacity, length = 1 << 20, ctypes.c_size_t()
    buf = ctypes.create_string_buffer(capacity)
    check(api.run_conformance(_capi.c_string(backend_config, "backend config"),
                              _capi.c_string(filter, "filter") if filter else None, ctypes.byref(r), buf,
                              capacity, ctypes.byref(length)))
    summary = None
    if 0 < length.value < capacity:
        try:
            summary = json.loads(buf.value.decode("utf-8", "replace"))
        except ValueError:
            summary = None
    return ConformanceResult(int(r.exit_code), int(r.passed), int(r.failed), int(r.skipped), summary)
