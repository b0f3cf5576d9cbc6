"""What every block-scope algorithm shares: parsing ``[dtype, block_size, algorithm]``,
choosing the default policy per target, building and caching the specialized class."""
from __future__ import annotations

from typing import Any, Tuple

from ....expr.struct import struct
from .._common import require_power_of_two
from .._common import warp_threads as _target_warp_threads

__all__ = ["BlockAlgorithmMeta", "storage_struct"]


def storage_struct(name: str, **fields: Any) -> type:
    """A shared-memory struct type with the given ``Array`` fields."""
    return struct(type(name, (), {"__annotations__": fields}))


def _block_shape(block_size: Any) -> Tuple[int, int, int]:
    dims = tuple(block_size) if isinstance(block_size, (tuple, list)) else (block_size, 1, 1)
    if len(dims) != 3:
        raise TypeError(f"block_size must be an int or an (x, y, z) tuple, got {block_size!r}")
    for name, dim in zip("xyz", dims):
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise TypeError(f"block_size.{name} must be a positive Python int, got {dim!r}")
    return dims


_SPECIALIZED: dict = {}


class BlockAlgorithmMeta(type):
    """Gives a block algorithm its ``[dtype, block_size(, algorithm)]`` specialization.

    A concrete metaclass sets ``_algorithms`` (its policy enum) and ``_shared_storage``
    (policy -> ``(dtype, block_threads, warp_threads) -> struct type``; a policy missing
    from it is refused by name), and answers :meth:`_default_algorithm_for`. The
    specialized class (cached per class, parameters, policy and warp size) has
    ``dtype``, ``block_size``, ``block_threads``, ``algorithm``, ``warp_threads``,
    ``num_warps`` and ``SharedStorage``.
    """

    _algorithms: type = None
    _shared_storage: dict = {}

    def _default_algorithm_for(cls, target: Any) -> Any:
        """The policy used when the caller names none, for ``target`` (a
        :class:`~flydsl.compiler.backends.GPUTarget`)."""
        raise NotImplementedError(f"{cls.__name__} must implement _default_algorithm_for")

    def __getitem__(cls, params: Any) -> type:
        if cls.block_threads is not None:
            raise TypeError(f"{cls.__name__} is already specialized")
        params = params if isinstance(params, tuple) else (params,)
        if not 2 <= len(params) <= 3:
            raise TypeError(f"{cls.__name__}[dtype, block_size] or "
                            f"{cls.__name__}[dtype, block_size, algorithm]")
        dtype, block_size = params[0], _block_shape(params[1])
        if len(params) == 3:
            algorithm = params[2]
        else:
            from ....compiler.backends import current_target
            algorithm = cls._default_algorithm_for(current_target())
        if not isinstance(algorithm, cls._algorithms):
            raise TypeError(f"expected a {cls._algorithms.__name__}, got {algorithm!r}")
        threads = block_size[0] * block_size[1] * block_size[2]
        require_power_of_two(threads, "block_size x * y * z")
        warp_threads = min(_target_warp_threads(), threads)
        key = (cls, dtype, block_size, algorithm, warp_threads)
        if key not in _SPECIALIZED:
            make_storage = cls._shared_storage.get(algorithm)
            if make_storage is None:
                raise NotImplementedError(f"{cls._algorithms.__name__}.{algorithm.name} is not "
                                          f"implemented")
            _SPECIALIZED[key] = type(
                f"{cls.__name__}[{getattr(dtype, '__name__', dtype)}, {threads}, "
                f"{algorithm.name}]", (cls,),
                {"__module__": cls.__module__, "dtype": dtype, "block_size": block_size, "block_threads": threads,
                 "algorithm": algorithm, "warp_threads": warp_threads,
                 "num_warps": threads // warp_threads,
                 "SharedStorage": make_storage(dtype, threads, warp_threads)})
        return _SPECIALIZED[key]
