"""Residency (ballast_residency): how a model's weights live on a backend,
derivations built and pinned, and pins (Value) exported without a copy."""
import ctypes
import dataclasses
import threading

from . import _capi, dlpack
from ._capi import api, check
from .errors import BallastError, Code
from .model import _Handle, Weight
from .plan import KINDS, Derivation, Layout, Plan

STRATEGIES = {"zero_copy": 0, "upload": 1, "paged": 2}
READ_ENGINES = {"auto": 0, "io_uring": 1, "threads": 2}
CACHE_POLICIES = {"auto": 0, "drop": 1, "keep": 2}

Stats = dataclasses.make_dataclass("Stats", [(f, int) for f in _capi.STAT_FIELDS], frozen=True)
Stats.__doc__ = "ballast_residency_stats: budget, device, pinned, paged ... bytes and counts."


LoadReport = dataclasses.make_dataclass(
    "LoadReport", [(f, int) for f in _capi.LOAD_FIELDS] +
    [("engine", str), ("cache", str), ("read_seconds", float), ("seconds", float)], frozen=True)
LoadReport.__doc__ = ("ballast_load_report: the read plan, what was read, copied, registered, built and left "
                      "for demand; the read engine and page cache policy that ran ('io_uring'/'threads', "
                      "'drop'/'keep').")


def _choice(table, value, what):
    if value not in table:
        raise BallastError(Code.INVALID_ARGUMENT, "invalid_argument: %s %r is none of %s"
                           % (what, value, ", ".join(table)))
    return table[value]


@dataclasses.dataclass(frozen=True)
class Teardown:
    bytes_freed: int
    allocations_freed: int
    failed_frees: int


class _ExportCount:
    """Capsules of one residency still held: release() waits for none.
    Apart from the Residency object so that a capsule never keeps it.

    An export is counted before it takes its pin, and release() checks the
    count and closes it in one step: a release between an export's pin and
    its count would free the value under the array it is making."""

    def __init__(self):
        self._lock = threading.Lock()
        self.n = 0
        self.closed = False  # release() has begun: no export may start

    def add(self, d):
        with self._lock:
            self.n += d

    def begin(self):
        with self._lock:
            if self.closed:
                raise BallastError(Code.INVALID_ARGUMENT, "invalid_argument: the residency was released")
            self.n += 1

    def close(self):
        dlpack.collect()  # capsules nothing holds any more release their pins first
        with self._lock:
            if self.n:
                raise BallastError(Code.INVALID_ARGUMENT, "invalid_argument: %d exported array(s) still read this "
                                   "residency's values; drop them first" % self.n)
            self.closed = True


def _strategy(name):
    if name not in STRATEGIES:
        raise BallastError(Code.INVALID_ARGUMENT, "invalid_argument: strategy %r is none of %s"
                           % (name, ", ".join(STRATEGIES)))
    return STRATEGIES[name]


def _kinds_mask(kinds):
    """ballast_residency_options.kinds: bit 1 << i of each named kind, a
    uint32_t. None: 0, which the C API reads as every kind; an empty
    list would read the same, so it is refused rather than turned into
    its opposite (derivations=False pins no derived value)."""
    if kinds is None:
        return 0
    if isinstance(kinds, (str, bytes)):
        kinds = [kinds]
    kinds = list(kinds)
    if not kinds:
        raise ValueError("kinds must name at least one derivation kind (None: every kind; derivations=False: none)")
    mask = 0
    for k in kinds:
        if k not in KINDS:
            raise BallastError(Code.INVALID_ARGUMENT, "invalid_argument: no derivation kind %r" % (k,))
        bit = KINDS.index(k)
        if bit >= 32:  # the library names more kinds than the C field has bits
            raise BallastError(Code.UNSUPPORTED, "unsupported: derivation kind %r is bit %d, past the 32 bits of "
                               "ballast_residency_options.kinds" % (k, bit))
        mask |= 1 << bit
    return mask


class Residency(_Handle):
    """ballast_residency_create(backend, model, options). strategy:
    "zero_copy" (registered in place), "upload" or "paged" (under `budget`
    bytes; None: auto); `overrides` maps weight names to a strategy; `plan`
    (default: every planned derivation) and `kinds` (names) say what the
    engine will pin; `group_by_layer` (e.g. "model.layers."; "" for names
    that start with the layer number; None: no groups) forms groups."""

    _free = api.residency_free

    def __init__(self, backend, model, strategy="zero_copy", budget=None, plan=None, kinds=None,
                 derivations=True, group_by_layer=None, overrides=None):
        o = _capi.new(_capi.ResidencyOptions)
        o.strategy = _strategy(strategy)
        o.budget_bytes = 0 if budget is None else _capi.integer(budget, "budget", _capi.U64,
                                                                " (bytes; 0 or None: auto)")
        o.plan = plan._h if plan is not None else None
        o.kinds = _kinds_mask(kinds)
        o.no_derivations = 0 if derivations else 1
        # "" is a stem, as in C (a torch Sequential's "0.weight" is layer "0."); None: no groups.
        stem = _capi.c_string(group_by_layer, "group_by_layer") if group_by_layer is not None else None
        o.group_by_layer = stem
        items = list((overrides or {}).items())
        names = [_capi.c_string(w, "override weight") for w, _ in items]
        table = _capi.array_of(_capi.Override, max(len(items), 1))()
        for i, (w, s) in enumerate(items):
            table[i].weight = names[i]
            table[i].strategy = _strategy(s)
        o.overrides = table if items else None
        o.override_count = len(items)
        h = _capi.c_handle()
        check(api.residency_create(backend._h, model._h, ctypes.byref(o), ctypes.byref(h)))
        super().__init__(h)
        self.backend, self.model, self.strategy = backend, model, strategy
        self.device = backend.info  # fixed when the backend opened; kept for pins after backend.close()
        self._exports = _ExportCount()
        self._plan = plan
        # What create() was told the engine will pin, for derive()'s default.
        self._kinds = o.kinds if derivations else None  # None: no derived value; 0: every kind

    @property
    def plan(self):
        """The plan given to create(), else the model's automatic plan."""
        if self._plan is None:
            self._plan = self.model.plan()
        return self._plan

    @property
    def budget_plan(self):
        """The plan create() sized the budget with (ballast_residency_plan)."""
        h = _capi.c_handle()
        check(api.residency_plan(self._h, ctypes.byref(h)))
        return Plan(h, self.model)

    @property
    def group_count(self):
        n = ctypes.c_size_t()
        check(api.residency_group_count(self._h, ctypes.byref(n)))
        return n.value

    @property
    def stats(self):
        dlpack.collect()  # an untaken capsule nothing holds is unpinned by now
        s = _capi.new(_capi.ResidencyStats)
        check(api.residency_stats_get(self._h, ctypes.byref(s)))
        return Stats(*(int(getattr(s, f)) for f in _capi.STAT_FIELDS))

    def derive(self, plan=None, progress=None):
        """Builds every entry of `plan` once; progress(done, total) after
        each, on this thread. Returns the plan. Without `plan`: the
        residency's (`self.plan`), narrowed to what create() was told the
        engine will pin: the entries of the `kinds` it was given, and none
        with derivations=False."""
        narrowed = plan is None and self._kinds != 0
        plan = plan if plan is not None else self.plan
        if narrowed:
            # A released (or closed) residency is refused as derive_all
            # refuses it, also where there is nothing to build.
            check(api.residency_group_count(self._h, ctypes.byref(ctypes.c_size_t())))
            wanted = [] if self._kinds is None else [d for d in plan if self._kinds >> KINDS.index(d.kind) & 1]
            for done, d in enumerate(wanted, 1):
                with self.pin(d):  # built (or found) and unpinned at once, as ballast_residency_derive_all does
                    pass
                if progress is not None:
                    progress(done, len(wanted))
            return plan
        raised = []

        def report(_user, done, total):
            try:
                progress(done, total)
            except BaseException as e:  # the first is re-raised once the C call returns
                if not raised:
                    raised.append(e)

        fn = _capi.PROGRESS_FN(report) if progress is not None else _capi.PROGRESS_FN()
        check(api.residency_derive_all(self._h, plan._h, fn, None))
        if raised:
            # Only the first is kept, and it is popped, not raised from the
            # list: its traceback holds this frame (and each callback's frame
            # its caller, this one), so an exception this frame still named
            # would make a cycle keeping the residency and the plan until the
            # cyclic collector ran.
            raise raised.pop()
        return plan

    def load(self, engine="auto", cache="auto", queue_depth=None, staging_buffers=None, chunk_bytes=None,
             direct_io=False, read_cached=False, populate_threads=None, populate_piece_bytes=None):
        """ballast_residency_load: the cold start. Reads the model's referenced
        bytes in large parallel reads and builds the planned derivations as
        their sources arrive, up to the budget; pins nothing. None: the
        library's default for that knob. Returns a LoadReport."""
        o = _capi.new(_capi.LoadOptions)
        o.engine = _choice(READ_ENGINES, engine, "engine")
        o.cache = _choice(CACHE_POLICIES, cache, "cache")
        for name, value, kind in (("queue_depth", queue_depth, _capi.U32), ("staging_buffers", staging_buffers, _capi.U32),
                                  ("chunk_bytes", chunk_bytes, _capi.U64),
                                  ("populate_threads", populate_threads, _capi.U32),
                                  ("populate_piece_bytes", populate_piece_bytes, _capi.U64)):
            if value is not None:
                setattr(o, name, _capi.integer(value, name, kind, " (None: the default)"))
        o.direct_io = 1 if direct_io else 0
        o.read_cached = 1 if read_cached else 0
        r = _capi.new(_capi.LoadReport)
        check(api.residency_load(self._h, ctypes.byref(o), ctypes.byref(r)))
        names = {v: k for k, v in READ_ENGINES.items()}
        policies = {v: k for k, v in CACHE_POLICIES.items()}
        return LoadReport(*(int(getattr(r, f)) for f in _capi.LOAD_FIELDS), names.get(r.engine, str(r.engine)),
                          policies.get(r.cache, str(r.cache)), float(r.read_seconds), float(r.seconds))

    def _pin_handle(self, target):
        h = _capi.c_handle()
        if isinstance(target, Derivation):
            index = _capi.integer(target.index, "derivation index", _capi.SIZE)
            check(api.residency_pin_derivation(self._h, target.plan._h, index, ctypes.byref(h)))
        else:
            check(api.residency_pin_weight(self._h, _capi.c_string(target, "weight name"), ctypes.byref(h)))
        return h

    def pin(self, what):
        """Pins a derived value (a Derivation of a plan of this model) or a
        weight (a Weight, or its name as a str or as the model's bytes): a
        Value, never evicted while held."""
        dlpack.collect()  # a capsule nothing holds gives its pin back before this one takes room
        if isinstance(what, Derivation):
            layouts = [what.first] + ([what.second] if what.second else [])
            target = what
        else:
            # A Weight is pinned by its name, and its dtype, dims and bytes
            # shape what the Value exports: both are its model's. Another
            # model's weight of the same name may be another tensor, so it
            # is refused, as the C API refuses another model's plan.
            if isinstance(what, Weight) and what.model is not self.model:
                raise BallastError(Code.INVALID_ARGUMENT, "invalid_argument: weight '%s' is a weight of another "
                                   "model, not of this residency's" % _capi.echo(what.name))
            w = what if isinstance(what, Weight) else self.model.weight(what)
            layouts = [Layout(w.dtype, w.dims, w.bytes)]
            # Pinned by the name's bytes as the model spells them: `name`,
            # decoded for Python, differs from them where they are not UTF-8.
            target = w._raw_name
        return Value(self, target, layouts)

    def pin_group(self, index, wait_ms=5000):
        """Every member of group `index` or none (a Pin; read() its members)."""
        dlpack.collect()
        index = _capi.integer(index, "index", _capi.SIZE)
        wait_ms = _capi.integer(wait_ms, "wait_ms", _capi.U32, " (milliseconds)")
        h = _capi.c_handle()
        check(api.residency_pin_group(self._h, index, wait_ms, ctypes.byref(h)))
        return Pin(h, self, index)

    def prefetch(self, derivation):
        index = _capi.integer(derivation.index, "derivation index", _capi.SIZE)
        check(api.residency_prefetch(self._h, derivation.plan._h, index))

    def prefetch_group(self, index):
        check(api.residency_prefetch_group(self._h, _capi.integer(index, "index", _capi.SIZE)))

    def wait_prefetches(self):
        check(api.residency_wait_prefetches(self._h))

    def set_budget(self, budget):
        """Changes the budget (ballast_residency_set_budget): raised, waiting
        group pins try again; lowered, evicts down to it, or raises
        BallastError (INVALID_ARGUMENT below the minimum, OUT_OF_MEMORY when
        pins hold more) changing nothing."""
        dlpack.collect()  # an untaken capsule nothing holds is unpinned by now
        check(api.residency_set_budget(self._h, _capi.integer(budget, "budget", _capi.U64)))

    def release(self):
        """Frees every device value now (the teardown report). Refused while
        an exported array still reads one: the C call would free it under
        the array."""
        self._exports.close()
        t = _capi.new(_capi.Teardown)
        check(api.residency_release(self._h, ctypes.byref(t)))
        return Teardown(int(t.bytes_freed), int(t.allocations_freed), int(t.failed_frees))


class Pin(_Handle):
    """A pin of one or more members (ballast_pin): addresses and copies."""

    _free = api.pin_free

    def __init__(self, handle, residency, group=None):
        super().__init__(handle)
        self.residency = residency
        self._group = group

    def _member_name(self, member):
        """What member `member` is, as the C API's errors name it."""
        return "member %d of group %d" % (member, self._group)

    def __len__(self):
        n = ctypes.c_size_t()
        check(api.pin_count(self._h, ctypes.byref(n)))
        return n.value

    def value(self, member=0):
        """(first, second, first_bytes, second_bytes): device pointers and sizes."""
        member = _capi.integer(member, "member", _capi.SIZE)
        v = _capi.new(_capi.Value)
        check(api.pin_value(self._h, member, ctypes.byref(v)))
        return int(v.first), int(v.second), int(v.first_bytes), int(v.second_bytes)

    def read(self, member=0, half=0, offset=0, length=None):
        """A copy of bytes [offset, offset + length) of the member's half
        (0: first, 1: second) on the host (any backend); length None: to
        the end."""
        member = _capi.integer(member, "member", _capi.SIZE)
        half = _capi.integer(half, "half", (0, 1), " (0: first, 1: second)")
        offset = _capi.integer(offset, "offset", _capi.U64)
        size = self.value(member)[2 + half]
        if length is None:
            length = max(size - offset, 0)
        length = _capi.integer(length, "length", _capi.SIZE)
        if offset + length > size:  # refused before a buffer of `length` bytes is allocated for nothing
            raise BallastError(Code.OUT_OF_BOUNDS, "out_of_bounds: bytes [%d, +%d) are not inside the %s half of %s"
                               " (%d bytes)" % (offset, length, ("first", "second")[half], self._member_name(member),
                                                size))
        buf, dst = _capi.read_buffer(length)
        check(api.pin_read(self._h, member, half, offset, dst, length, length))
        return bytes(memoryview(buf)[:length])


class Half(dlpack.Exportable):
    """One device tensor of a Value: `layout` (dtype, dims, bytes). Exports
    where the backend's memory is host-visible (cpu); a CUDA or HIP value
    exports as a device tensor (kDLCUDA / kDLROCM). A Half keeps its Value
    (and so its pin) while it lives; the Value keeps no Half (Value.halves
    makes them when asked), so the two never form a cycle that only the
    cyclic collector would free."""

    def __init__(self, value, half, layout):
        self._value, self.half, self.layout = value, half, layout
        self.dtype, self.dims, self.bytes = layout.dtype, layout.dims, layout.bytes

    def __repr__(self):
        return "Half(%s%s, %d bytes)" % (self.dtype, list(self.dims), self.bytes)

    def read(self):
        return self._value.read(self.half)

    def _dlpack_device(self):
        info = self._value._device
        if info.host_visible:
            return (dlpack.CPU, 0)
        t = dlpack.device_type(info.backend)
        return (t if t is not None else 0, info.index)

    def _capsule(self, as_dtype=None):
        v = self._value
        device = self._dlpack_device()
        if not v._device.host_visible and device[0] not in (dlpack.CUDA, dlpack.ROCM):
            raise BallastError(Code.UNSUPPORTED, "unsupported: %s memory is not addressable by DLPack consumers; "
                               "read() copies it to the host" % v._device.backend)
        res = v.residency
        check(api.pin_count(v._h, ctypes.byref(ctypes.c_size_t())))  # this Value is still live
        exports = res._exports
        exports.begin()  # counted before the pin: release() is refused from here on
        try:
            keep = res._pin_handle(v._target)  # the capsule's own pin: kept resident while it lives
        except BaseException:
            exports.add(-1)
            raise
        try:
            out = _capi.new(_capi.Value)
            check(api.pin_value(keep, 0, ctypes.byref(out)))
        except BaseException:
            api.status_free(api.pin_free(keep))
            exports.add(-1)
            raise
        address = out.first if self.half == 0 else out.second

        def release():
            api.status_free(api.pin_free(keep))
            exports.add(-1)

        return dlpack.make_capsule(address, device, as_dtype or self.dtype, self.dims, self.bytes, release)


class Value(Pin, dlpack.Exportable):
    """A pinned weight or derived value. `first` (and `second` for a pair)
    are its tensors; the Value itself exports its first. Each export pins
    the value again, so the array stays valid after this Value is freed."""

    def __init__(self, residency, target, layouts):
        self._target = target
        super().__init__(residency._pin_handle(target), residency)
        self._device = residency.device
        self._layouts = tuple(layouts)

    # No attribute of a Value may point back at it (a Half does): reference
    # counting alone must free a dropped Value, and its pin with it.
    @property
    def halves(self):
        """[first] or [first, second]: a new list of Half each time."""
        return [Half(self, i, lay) for i, lay in enumerate(self._layouts)]

    @property
    def first(self):
        return Half(self, 0, self._layouts[0])

    @property
    def second(self):
        return Half(self, 1, self._layouts[1]) if len(self._layouts) > 1 else None

    def __repr__(self):
        t = self._target
        return "Value(%r, %s)" % (_capi.text(t) if isinstance(t, bytes) else t.kind + " of " + t.weight, self.halves)

    def read(self, half=0, offset=0, length=None):
        return Pin.read(self, 0, half, offset, length)

    def _member_name(self, member):
        t = self._target
        if isinstance(t, bytes):  # a weight, by its name's bytes
            return "weight '%s'" % _capi.text(t)
        return "%s of '%s'%s" % (t.kind, t.weight, " for node '%s'" % t.node if t.node else "")

    def _dlpack_device(self):
        return self.first._dlpack_device()

    def _capsule(self, as_dtype=None):
        return self.first._capsule(as_dtype)

    @property
    def dtype(self):
        return self._layouts[0].dtype
