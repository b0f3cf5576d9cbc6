"""Launch drivers: how each kind of device loads and runs binaries (see ``base``),
and the registry that names them (see ``registry``)."""
from .base import Driver, Launcher, stream_handle
from .registry import (ENTRY_POINT_GROUP, get_driver, list_drivers, lookup_driver_class,
                       rediscover_entry_points, register_driver, unregister_driver)

__all__ = ["Driver", "ENTRY_POINT_GROUP", "Launcher", "get_driver", "list_drivers",
           "lookup_driver_class", "rediscover_entry_points", "register_driver",
           "stream_handle", "unregister_driver"]
