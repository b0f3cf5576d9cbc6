"""Pluggable compile backends: what each target compiles (see ``base``) and
the registry that names them (see ``registry``)."""
from .base import BaseBackend, GPUTarget, PipelineFragment, PythonPass
from .current import compile_backend_name, current_target
from .registry import (
    AUTO_ORDER,
    ENTRY_POINT_GROUP,
    backend_tags,
    get_backend,
    list_backends,
    lookup_backend_class,
    register_backend,
    rediscover_entry_points,
    resolve_target,
    selected_backend_name,
    unregister_backend,
)
from ...errors import InvalidBackend

__all__ = [
    "AUTO_ORDER", "ENTRY_POINT_GROUP", "BaseBackend", "GPUTarget", "InvalidBackend",
    "compile_backend_name", "current_target",
    "PipelineFragment", "PythonPass", "backend_tags", "get_backend", "list_backends",
    "lookup_backend_class", "register_backend", "rediscover_entry_points", "resolve_target",
    "selected_backend_name", "unregister_backend",
]
