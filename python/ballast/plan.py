"""Plans: the derivations a model's kernels want (ballast_plan), immutable."""
import ctypes
from dataclasses import dataclass, field

from . import _capi
from ._capi import api, check, text
from .errors import BallastError, Code
from .model import _Handle

SOURCES = {"automatic": 0, "graph": 1, "rules": 2, "graph_and_rules": 3}


def _kinds():
    """The library's kinds, in its order (ballast::Derivation: bit 1 << i),
    from the C API, so a kind added to the library is known here at once."""
    names = []
    while True:
        name = api.derivation_kind_name(len(names))
        if name is None:
            return tuple(names)
        names.append(name.decode())


KINDS = _kinds()


@dataclass(frozen=True)
class Layout:
    """One half of a derived value on the device: dtype, dims, bytes."""
    dtype: str
    dims: tuple
    bytes: int


@dataclass(frozen=True)
class Derivation:
    """One planned derivation: the source weight, the kind, the consuming
    node ("" when planned by a rule), why, and its layout: `first`, and
    `second` for the pair kinds (repack_int4, quant_int8; else None)."""
    index: int
    weight: str
    kind: str
    node: str
    why: str
    first: Layout
    second: Layout
    plan: object = field(default=None, compare=False, repr=False)  # the Plan it came from


class Plan(_Handle):
    _free = api.plan_free

    def __init__(self, handle, model):
        super().__init__(handle)
        self.model = model  # a plan belongs to one model

    @classmethod
    def _of_model(cls, model, source):
        if source not in SOURCES:
            raise BallastError(Code.INVALID_ARGUMENT, "invalid_argument: plan source %r is none of %s"
                               % (source, ", ".join(SOURCES)))
        h = _capi.c_handle()
        check(api.plan_derivations(model._h, SOURCES[source], ctypes.byref(h)))
        return cls(h, model)

    def __len__(self):
        n = ctypes.c_size_t()
        check(api.plan_count(self._h, ctypes.byref(n)))
        return n.value

    def _layout(self, index, half):
        lay = _capi.new(_capi.ValueLayout)
        check(api.plan_entry_layout(self._h, index, half, ctypes.byref(lay)))
        return Layout(text(lay.dtype), _capi.dims(lay.dims, lay.ndims), int(lay.bytes))

    def __getitem__(self, index):
        # An int (negative from the end) that a size_t holds; ctypes would
        # wrap 2**64 to entry 0.
        index = _capi.integer(index, "plan index", (-_capi.SIZE[1] - 1, _capi.SIZE[1]))
        if index < 0:
            n = len(self)
            if index < -n:  # as past the end: the C call's own code for a missing entry
                raise BallastError(Code.OUT_OF_BOUNDS, "out_of_bounds: plan index %d of %d entries" % (index, n))
            index += n
        d = _capi.new(_capi.DerivationInfo)
        check(api.plan_entry(self._h, index, ctypes.byref(d)))
        # Whether the kind has a second half is the library's to say (its
        # layout's `present`), not its size: quant_int8 of a [4, 0] weight
        # has 0-byte scales, still a second half.
        try:
            second = self._layout(index, 1)
        except BallastError as e:
            if e.code != Code.OUT_OF_BOUNDS:
                raise
            second = None
        return Derivation(index, text(d.weight), text(d.kind), text(d.node), text(d.why), self._layout(index, 0),
                          second, self)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    @property
    def entries(self):
        return list(self)
