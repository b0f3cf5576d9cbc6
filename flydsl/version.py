"""flydsl's version: a leaf module (the compile-cache key reads it)."""
__version__ = "0.1.0"
