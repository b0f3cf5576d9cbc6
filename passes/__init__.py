"""flydsl's own IR passes, written in Python over the MLIR Python API.

Installed as ``flydsl.passes`` (the top-level ``passes/`` folder is its source).
"""
