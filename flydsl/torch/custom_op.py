"""Registering ``@flydsl.jit`` functions as ``torch.library`` custom ops."""
from __future__ import annotations

import inspect
import linecache
from typing import Any, Callable, Optional, Sequence, Union

import torch

from ..errors import DSLTypeError

OutLike = Callable[..., Union[torch.Tensor, Sequence[torch.Tensor]]]
KernelArgs = Callable[..., Sequence[Any]]


def custom_op(name: str, kernel_fn: Optional[Callable] = None, *, schema: str,
              out_like: Optional[OutLike] = None,
              kernel_args: Optional[KernelArgs] = None,
              device_types: Union[None, str, Sequence[str]] = None,
              tags: Sequence[torch.Tag] = ()) -> Any:
    """Register ``kernel_fn`` (a ``@flydsl.jit`` function) as the PyTorch op ``name``.

    The op works in eager mode, inside ``torch.compile`` with any backend
    (``"inductor"``, ``"eager"``, ``"flydsl"``; ``fullgraph=True`` holds: dynamo
    sees an opaque op and runs ``out_like`` on fake tensors, so there is no
    graph break) and in ``torch.export``.

    Each call of the op does, with ``inputs`` the op's arguments (defaults of the
    schema filled in; keyword-only arguments, after ``*`` in the schema, stay
    keywords)::

        outputs = out_like(*inputs, **kw_inputs)       # one new tensor per result
        kernel_fn(*kernel_args(*inputs, *outputs, **kw_inputs))
        # or, without kernel_args:  kernel_fn(*inputs, *outputs, **kw_inputs)
        return outputs

    Args:
        name: ``"namespace::op_name"``; the op is then ``torch.ops.namespace.op_name``.
        kernel_fn: the function that launches the kernels (a ``@flydsl.jit``
            function or any Python function). It writes the results into the
            output tensors; what it returns is ignored. Leave it out to use
            ``custom_op`` as a decorator.
        schema: the op's signature without its name, e.g.
            ``"(Tensor x, float eps=1e-5) -> (Tensor mean, Tensor rstd)"``.
            Results are ``Tensor``s (``-> Tensor``, ``-> (Tensor, Tensor)``,
            optionally named); an op that writes into an argument declares it
            mutable and returns nothing, e.g. ``"(Tensor x, Tensor(a!) out) -> ()"``.
            Arguments may be any type ``torch.library`` accepts (``int``,
            ``float``, ``bool``, ``str``, ``Tensor[]``, ...).
        out_like: ``out_like(*inputs, **kw_inputs)`` (the op's arguments only,
            never the outputs) returns the outputs, newly allocated: one tensor
            for ``-> Tensor``, a tuple with one tensor per result otherwise, on
            the inputs' device. It is also the op's fake (meta) implementation,
            run on ``FakeTensor``s by ``torch.compile``/``torch.export``, so it
            may only use the inputs' metadata (``torch.empty_like(x)``,
            ``x.new_empty(shape)``, ``x.shape``; symbolic shapes work), never
            their values. Default: ``torch.empty_like`` of the first tensor
            argument, per result. Its signature is checked when the op is
            registered and its result on every call (count, type, device, not
            an input itself).
        kernel_args: ``kernel_args(*inputs, *outputs, **kw_inputs)``, the op's
            arguments followed by its outputs, returns the tuple of positional
            arguments of ``kernel_fn``, e.g. for ``"(Tensor a, Tensor b) -> Tensor"``
            ``lambda a, b, out: (a, b, out, a.numel())``. Default: ``kernel_fn``
            receives ``(*inputs, *outputs, **kw_inputs)`` itself. When
            ``kernel_fn`` raises, the error gains a note naming the op and what
            each of ``kernel_fn``'s parameters received (which input or output),
            to catch arguments passed in the wrong order.
        device_types: device types the implementation is registered for (default:
            all; flydsl itself rejects tensors the active backend cannot use).
        tags: extra ``torch.Tag``s for the op.

    Returns:
        The ``torch.library.CustomOpDef``: call it like a function (or as
        ``torch.ops.namespace.op_name``). It is not differentiable until you call
        ``op.register_autograd(backward, setup_context=setup_context)``
        (``torch.library.register_autograd``): ``setup_context(ctx, inputs,
        output)`` saves what ``backward(ctx, *grads)`` needs, and ``backward``
        returns one gradient per input (``None`` for non-tensor ones), usually
        by calling another flydsl custom op. Its ``register_fake``,
        ``register_kernel`` and ``register_torch_dispatch`` work as in torch.

    Example::

        vadd_op = flydsl.torch.custom_op(
            "demo::vadd", vadd, schema="(Tensor a, Tensor b) -> Tensor",
            kernel_args=lambda a, b, out: (a, b, out, a.numel()))
        c = vadd_op(a, b)                    # or torch.ops.demo.vadd(a, b)

    The README ("PyTorch") has a tested example with two results and one with
    autograd.
    """
    if kernel_fn is None:
        return lambda fn: custom_op(name, fn, schema=schema, out_like=out_like,
                                    kernel_args=kernel_args, device_types=device_types,
                                    tags=tags)
    if not callable(kernel_fn):
        raise TypeError(f"flydsl.torch.custom_op: kernel_fn must be callable, got {kernel_fn!r}")
    if "::" not in name:
        raise ValueError(f"flydsl.torch.custom_op: name must look like 'namespace::op', "
                         f"got {name!r}")
    sig = _OpSignature(name, schema)
    positional = sig.inputs + sig.results          # what kernel_args / kernel_fn receive
    if out_like is not None:
        if not sig.results:
            raise ValueError(f"flydsl.torch.custom_op {name!r}: out_like is given but the "
                             f"schema {schema!r} declares no results")
        sig.check_accepts(out_like, "out_like", sig.inputs, "the op's arguments")
    if kernel_args is not None:
        sig.check_accepts(kernel_args, "kernel_args", positional,
                          "the op's arguments, then its outputs")
    else:
        sig.check_accepts(kernel_fn, _name_of(kernel_fn), positional,
                          "the op's arguments, then its outputs, as no kernel_args= maps them",
                          hint=f"; pass kernel_args=lambda {', '.join(positional)}: (...) to "
                               "choose its arguments")

    def allocate(args: tuple, kwargs: dict) -> tuple:
        if not sig.results:
            return ()
        if out_like is None:
            first = next((t for _, t in sig.named_tensors(args, kwargs)), None)
            if first is None:
                raise TypeError(f"flydsl.torch.custom_op {name!r}: pass out_like= to "
                                "allocate the outputs of an op without tensor arguments")
            return tuple(torch.empty_like(first) for _ in sig.results)
        return sig.check_outputs(out_like, out_like(*args, **kwargs), args, kwargs)

    def result(outs: tuple):
        if not sig.results:
            return None
        return outs[0] if len(outs) == 1 else outs

    def impl(*args, **kwargs):
        args, kwargs = sig.fill_defaults(args, kwargs)
        outs = allocate(args, kwargs)
        if kernel_args is None:
            call, call_kwargs = (*args, *outs), kwargs
        else:
            call, call_kwargs = kernel_args(*args, *outs, **kwargs), {}
            if not isinstance(call, (tuple, list)):
                raise _located(kernel_args, f"flydsl.torch.custom_op {name!r}: kernel_args "
                               f"must return a tuple of {_name_of(kernel_fn)}'s positional "
                               f"arguments, got {_describe(call)}")
        try:
            kernel_fn(*call, **call_kwargs)
        except Exception as exc:
            _add_note(exc, sig.describe_call(kernel_fn, call, call_kwargs, args, kwargs, outs,
                                             via_kernel_args=kernel_args is not None))
            raise
        return result(outs)

    def fake(*args, **kwargs):
        return result(allocate(*sig.fill_defaults(args, kwargs)))

    impl.__name__ = impl.__qualname__ = name.split("::")[1]
    impl.__doc__ = getattr(kernel_fn, "__doc__", None)
    op = torch.library.custom_op(name, mutates_args=sig.mutated, device_types=device_types,
                                 schema=schema, tags=tuple(tags) or None)(impl)
    op.register_fake(fake)
    return op


class _OpSignature:
    """The parsed schema of one op and the checks that name its arguments."""

    def __init__(self, name: str, schema: str):
        self.name = name
        self.schema = schema
        parsed = torch._C.parse_schema(name + schema)
        for ret in parsed.returns:
            if ret.type.kind() != "TensorType" or ret.alias_info is not None:
                raise ValueError(f"flydsl.torch.custom_op {name!r}: results must be plain "
                                 f"Tensors (mutated arguments are declared `Tensor(a!)` and "
                                 f"not returned), got {schema!r}")
        self.positional = [a for a in parsed.arguments if not a.kwarg_only]
        self.keyword = [a for a in parsed.arguments if a.kwarg_only]
        self.inputs = [a.name for a in self.positional]
        n_out = len(parsed.returns)
        self.results = [r.name or ("out" if n_out == 1 else f"out{i}")
                        for i, r in enumerate(parsed.returns)]
        self.mutated = [a.name for a in parsed.arguments
                        if a.alias_info is not None and a.alias_info.is_write]

    def fill_defaults(self, args: tuple, kwargs: dict) -> tuple:
        """torch passes only the arguments the caller gave; out_like, kernel_args and
        kernel_fn always get all of them, so their signatures need no defaults."""
        args = tuple(args) + tuple(a.default_value for a in self.positional[len(args):])
        return args, {a.name: kwargs.get(a.name, a.default_value) for a in self.keyword}

    def call_text(self, fn_name: str, positional: Sequence[str]) -> str:
        """How ``fn_name`` is called, e.g. ``out_like(x, eps, k=k)``."""
        keywords = [f"{a.name}={a.name}" for a in self.keyword]
        return f"{fn_name}({', '.join([*positional, *keywords])})"

    def check_accepts(self, fn: Callable, role: str, positional: Sequence[str],
                      meaning: str, hint: str = "") -> None:
        """At registration: ``fn`` can be called the way the op will call it."""
        try:
            params = inspect.signature(fn)
        except (TypeError, ValueError):           # builtins etc.: nothing to check
            return
        try:
            params.bind(*positional, **{a.name: None for a in self.keyword})
        except TypeError as exc:
            raise _located(fn, f"flydsl.torch.custom_op {self.name!r}: {role} is called as "
                           f"{self.call_text(role, positional)} ({meaning}), but it is "
                           f"defined as {role}{params}: {exc}{hint}") from None

    def check_outputs(self, out_like: Callable, outs: Any, args: tuple, kwargs: dict) -> tuple:
        """``out_like``'s result as a tuple with one new tensor per result, or an error
        naming the op, what was expected and what came back."""
        want = (f"{len(self.results)} new tensor{'s' if len(self.results) > 1 else ''} "
                f"({', '.join(self.results)}) as the schema {self.schema!r} declares")

        def fail(what: str) -> DSLTypeError:
            return _located(out_like, f"flydsl.torch.custom_op {self.name!r}: out_like "
                            f"{what}; it must return {want}")

        if isinstance(outs, torch.Tensor):
            outs = (outs,)
        elif isinstance(outs, (tuple, list)):
            outs = tuple(outs)
        else:
            raise fail(f"returned {_describe(outs)}")
        if len(outs) != len(self.results):
            raise fail(f"returned {len(outs)} tensor{'s' if len(outs) != 1 else ''}")
        inputs = dict(self.named_tensors(args, kwargs))
        devices = {t.device for t in inputs.values()}
        for i, (label, out) in enumerate(zip(self.results, outs)):
            if not isinstance(out, torch.Tensor):
                raise fail(f"returned {_describe(out)} as result {i} ({label})")
            same = next((n for n, t in inputs.items() if t is out), None)
            if same is None and any(o is out for o in outs[:i]):
                same = "an earlier result"
            if same is not None:
                raise fail(f"returned {same} itself as result {i} ({label}); allocate new "
                           f"tensors, e.g. torch.empty_like(x) or x.new_empty(shape)")
            if devices and out.device not in devices:
                raise fail(f"returned result {i} ({label}) on {out.device} while the inputs "
                           f"are on {', '.join(sorted(map(str, devices)))}; allocate it with "
                           f"x.new_empty(shape) or device=x.device")
        return outs

    def named_tensors(self, args: tuple, kwargs: dict):
        """("input 'x'", tensor) for each tensor argument, inside lists too."""
        for label, value in (*zip(self.inputs, args), *kwargs.items()):
            if isinstance(value, torch.Tensor):
                yield f"input {label!r}", value
            elif isinstance(value, (list, tuple)):
                for i, v in enumerate(value):
                    if isinstance(v, torch.Tensor):
                        yield f"input '{label}[{i}]'", v

    def describe_call(self, kernel_fn: Callable, call: Sequence, call_kwargs: dict,
                      args: tuple, kwargs: dict, outs: tuple, *, via_kernel_args: bool) -> str:
        """What each parameter of ``kernel_fn`` received, for errors raised inside it."""
        fn = _name_of(kernel_fn)
        origins = [*self.named_tensors(args, kwargs),
                   *((f"output {n!r}", v) for n, v in zip(self.results, outs))]

        def origin(value) -> str:      # tensors only, by identity
            label = next((n for n, v in origins if v is value), None)
            return f"{label}: {_describe(value)}" if label else _describe(value)

        lines = [f"{param} = {origin(v)}" for param, v in _bind_names(kernel_fn, call, call_kwargs)]
        order = self.call_text("kernel_args" if via_kernel_args else fn,
                               self.inputs + self.results)
        how = (f"kernel_args is called as {order} and returns {fn}'s arguments"
               if via_kernel_args else f"without kernel_args= it is called as {order}")
        return (f"in flydsl.torch.custom_op {self.name!r}: {fn} received\n    "
                + "\n    ".join(lines) + f"\n({how}: the op's arguments, then its outputs)")


def _bind_names(fn: Callable, call: Sequence, call_kwargs: dict) -> list:
    """(parameter name, value) for a call of ``fn``; positions when it has no signature."""
    try:
        bound = inspect.signature(fn).bind(*call, **call_kwargs)
    except (TypeError, ValueError):
        return [(f"argument {i}", v) for i, v in enumerate(call)] + list(call_kwargs.items())
    pairs = []
    for param, value in bound.arguments.items():
        kind = bound.signature.parameters[param].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            pairs += [(f"{param}[{i}]", v) for i, v in enumerate(value)]
        elif kind is inspect.Parameter.VAR_KEYWORD:
            pairs += list(value.items())
        else:
            pairs.append((param, value))
    return pairs


def _describe(value: Any) -> str:
    """A tensor as ``float32[4, 5]`` (plus its device when not the CPU); others by repr."""
    if isinstance(value, torch.Tensor):
        where = "" if value.device.type == "cpu" else f" on {value.device}"
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}{where}"
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    if value is None or isinstance(value, (bool, int, float, str)) \
            or type(value).__name__ in text:
        return text
    return f"{type(value).__name__} {text}"


def _name_of(fn: Callable) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def _located(fn: Callable, message: str) -> DSLTypeError:
    """A TypeError pointing at where the user's ``fn`` (a lambda, say) is defined."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        return DSLTypeError(message)
    line = linecache.getline(code.co_filename, code.co_firstlineno)
    return DSLTypeError(message, filename=code.co_filename, lineno=code.co_firstlineno,
                        source_line=line)


def _add_note(exc: BaseException, note: str) -> None:
    """Attach ``note`` to ``exc`` without changing its type (``except`` clauses keep
    matching); Python 3.10 has no ``add_note``, so the note joins the message there."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    elif exc.args and isinstance(exc.args[0], str):
        exc.args = (f"{exc.args[0]}\n{note}",) + exc.args[1:]
