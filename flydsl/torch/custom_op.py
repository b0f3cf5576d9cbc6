"""Registering ``@flydsl.jit`` functions as ``torch.library`` custom ops."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

import torch

OutLike = Callable[..., Union[torch.Tensor, Sequence[torch.Tensor]]]


def custom_op(name: str, kernel_fn: Optional[Callable] = None, *, schema: str,
              out_like: Optional[OutLike] = None,
              kernel_args: Optional[Callable[..., Sequence[Any]]] = None,
              device_types: Union[None, str, Sequence[str]] = None,
              tags: Sequence[torch.Tag] = ()) -> Any:
    """Register ``kernel_fn`` (a ``@flydsl.jit`` function) as the PyTorch op ``name``.

    The op works in eager mode, inside ``torch.compile(fullgraph=True)``
    (dynamo sees an opaque op and uses the fake implementation, so there is no
    graph break) and in ``torch.export``.

    Args:
        name: ``"namespace::op_name"``; the op is then ``torch.ops.namespace.op_name``.
        kernel_fn: the function that launches the kernels. Called as
            ``kernel_fn(*kernel_args(*inputs, *outputs))``: by default the op's
            arguments followed by its freshly allocated outputs. Leave it out to
            use ``custom_op`` as a decorator.
        schema: the op's signature without its name, e.g.
            ``"(Tensor a, Tensor b) -> Tensor"``. Outputs are ``Tensor`` results
            (``-> Tensor``, ``-> (Tensor, Tensor)``); an op that writes into an
            argument declares it mutable and returns nothing, e.g.
            ``"(Tensor x, Tensor(a!) out) -> ()"``. Arguments may be any type
            ``torch.library`` accepts (``int``, ``float``, ``bool``, ``str``, ...).
        out_like: ``out_like(*inputs, **kw_inputs)`` allocates the outputs (one
            tensor, or a sequence with one tensor per result). It also serves as
            the fake (meta) implementation, so it must only use the inputs'
            metadata (``torch.empty_like``, ``x.new_empty(shape)``, ...), which
            makes shapes, dtypes and devices of the outputs known to
            ``torch.compile``/``torch.export``, including symbolic shapes. Default:
            ``torch.empty_like`` of the first tensor argument, per result.
        kernel_args: maps ``(*inputs, *outputs, **kw_inputs)`` to the positional
            arguments of ``kernel_fn``, e.g. ``lambda a, b, c: (a, b, c, a.numel())``.
        device_types: device types the implementation is registered for (default:
            all; flydsl itself rejects tensors the active backend cannot use).
        tags: extra ``torch.Tag``s for the op.

    Returns:
        The ``torch.library.CustomOpDef``: call it like a function, or use
        ``.register_autograd(...)`` to make it differentiable.

    Example::

        vadd_op = flydsl.torch.custom_op(
            "demo::vadd", vadd, schema="(Tensor a, Tensor b) -> Tensor",
            kernel_args=lambda a, b, c: (a, b, c, a.numel()))
        c = vadd_op(a, b)                    # or torch.ops.demo.vadd(a, b)
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
    parsed = torch._C.parse_schema(name + schema)
    for ret in parsed.returns:
        if ret.type.kind() != "TensorType" or ret.alias_info is not None:
            raise ValueError(f"flydsl.torch.custom_op {name!r}: results must be plain "
                             f"Tensors (mutated arguments are declared `Tensor(a!)` and not "
                             f"returned), got {schema!r}")
    mutated = [a.name for a in parsed.arguments
               if a.alias_info is not None and a.alias_info.is_write]
    n_out = len(parsed.returns)

    def allocate(args: tuple, kwargs: dict) -> tuple:
        if n_out == 0:
            return ()
        if out_like is None:
            first = next((a for a in list(args) + list(kwargs.values())
                          if isinstance(a, torch.Tensor)), None)
            if first is None:
                raise TypeError(f"{name}: pass out_like= to allocate the outputs of an op "
                                "without tensor arguments")
            return tuple(torch.empty_like(first) for _ in range(n_out))
        outs = out_like(*args, **kwargs)
        outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
        if len(outs) != n_out or not all(isinstance(o, torch.Tensor) for o in outs):
            raise TypeError(f"{name}: out_like must return {n_out} tensor(s) as the schema "
                            f"says, got {outs!r}")
        return outs

    def result(outs: tuple):
        if n_out == 0:
            return None
        return outs[0] if n_out == 1 else outs

    def impl(*args, **kwargs):
        outs = allocate(args, kwargs)
        call = kernel_args(*args, *outs, **kwargs) if kernel_args is not None \
            else (*args, *outs)
        if kernel_args is None:
            kernel_fn(*call, **kwargs)
        else:
            kernel_fn(*call)
        return result(outs)

    def fake(*args, **kwargs):
        return result(allocate(args, kwargs))

    impl.__name__ = impl.__qualname__ = name.split("::")[1]
    impl.__doc__ = getattr(kernel_fn, "__doc__", None)
    op = torch.library.custom_op(name, mutates_args=mutated, device_types=device_types,
                                 schema=schema, tags=tuple(tags) or None)(impl)
    op.register_fake(fake)
    return op
