"""ballast from Python: the C API (ballast.h) through ctypes.

    import ballast
    model = ballast.open_model("sample.onnx")      # mapped, nothing copied
    cpu = ballast.open_backend("cpu")
    res = ballast.Residency(cpu, model)            # zero_copy; "upload", "paged" + budget
    plan = res.derive(progress=lambda d, t: None)  # every planned derivation, built once
    value = res.pin(plan[0])                       # pinned: never evicted while held
    array = value.numpy()                          # no copy; the array keeps its own pin

docs/python.md has the flow, the lifetimes and why ctypes.
"""
from ._capi import API_VERSION, api as _api
from .backend import Backend, ConformanceResult, Counters, DeviceInfo, open_backend, plugin_extension, run_conformance
from .errors import BallastError, Code
from .model import Accounting, DeadRange, Model, Note, Weight, open_model
from .plan import KINDS, Derivation, Layout, Plan
from .residency import CACHE_POLICIES, READ_ENGINES, STRATEGIES, Half, LoadReport, Pin, Residency, Stats, Teardown, Value
from .dlpack import live_exports

__all__ = ["API_VERSION", "open_model", "open_backend", "Model", "Weight", "Note", "Accounting", "DeadRange", "Backend",
           "DeviceInfo", "Counters", "Plan", "Derivation", "Layout", "KINDS", "Residency", "STRATEGIES", "Stats", "Teardown",
           "LoadReport", "READ_ENGINES", "CACHE_POLICIES",
           "Pin", "Value", "Half", "BallastError", "Code", "live_exports", "library_path", "library_version",
           "c_api_version", "run_conformance", "ConformanceResult", "plugin_extension"]

__version__ = _api.library_version().decode()


def library_version():
    """libballast's version, "0.1.0"."""
    return _api.library_version().decode()


def c_api_version():
    """The C API version of the loaded libballast (>= API_VERSION)."""
    return int(_api.c_api_version())


def library_path():
    """The libballast this module loaded."""
    return _api.path
