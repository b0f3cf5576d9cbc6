"""A helper defined in one module and imported by another (`helpers.py`)."""


def twice(v):
    return v * 2.0
