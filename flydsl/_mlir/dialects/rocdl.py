"""``flydsl._mlir.dialects.rocdl``: ``mlir.dialects.rocdl``; builders return kernel values in a trace.

The buffer operations (``RawPtrBufferLoadOp``, ``raw_ptr_buffer_store``, the atomics,
``raw_ptr_buffer_load_lds``...) also take their immediate operands as upstream FlyDSL's
bindings do: ``aux`` (and ``size``/``offset`` of the load to LDS) may be left out or given
as ``None``, a Python int, an ``IntegerAttr`` or a value; offsets may be Python ints or
``index`` values. They become the ``i32`` operands these MLIR bindings want. Inside a
kernel their ``.result`` is a kernel value (``load.result != 0`` is a runtime compare).
"""
import inspect

import mlir.ir as _ir
from mlir.dialects import arith as _arith
from mlir.dialects import rocdl as _raw

from ._interop import export as _export, kernel_result as _kernel_result

_export(_raw, globals())

#: Operands that are 32-bit integers in every buffer operation.
_I32_OPERANDS = ("aux", "offset", "soffset", "voffset", "size")


def _i32(x):
    """``x`` (None, int, IntegerAttr, kernel value, i32/index value) as an i32 value."""
    i32 = _ir.IntegerType.get_signless(32)
    if x is None:
        x = 0
    if isinstance(x, _ir.IntegerAttr):
        x = x.value
    if isinstance(x, int):
        return _arith.constant(i32, x - (1 << 32) if x > 0x7FFFFFFF else x)
    if hasattr(x, "ir_value") and not isinstance(x, _ir.Value):
        x = x.ir_value()
    if isinstance(x, _ir.Value) and isinstance(x.type, _ir.IndexType):
        return _arith.index_cast(i32, x)
    return x


def _compat(cls):
    """A subclass of op class ``cls`` converting its i32 operands with :func:`_i32`."""
    sig = inspect.signature(cls.__init__)
    names = [n for n in _I32_OPERANDS if n in sig.parameters]

    def __init__(self, *args, **kwargs):
        bound = sig.bind_partial(self, *args, **kwargs)
        for n in names:
            bound.arguments[n] = _i32(bound.arguments.get(n))
        cls.__init__(*bound.args, **bound.kwargs)

    def result(self):
        # FlyDSL kernels compute on `Op(...).result` (`m != 0`): a kernel value in a trace
        return _kernel_result(cls.result.fget(self))

    return type(cls.__name__, (cls,), {"__init__": __init__, "__doc__": cls.__doc__,
                                       "__module__": __name__, "result": property(result)})


def _builder(op_cls):
    def build(*args, **kwargs):
        op = op_cls(*args, **kwargs)
        results = op.operation.results
        return _kernel_result(results[0]) if len(results) == 1 else \
            (op if not results else list(results))
    return build


for _name in [n for n in dir(_raw) if "Buffer" in n and n.endswith(("Op", "CmpSwap"))]:
    _cls = getattr(_raw, _name)
    if "aux" in inspect.signature(_cls.__init__).parameters:
        globals()[_name] = _compat(_cls)
        _snake = _cls.OPERATION_NAME[len("rocdl."):].replace(".", "_")
        if hasattr(_raw, _snake):
            globals()[_snake] = _builder(globals()[_name])
