"""The README's kernel-language reference: every ``fx`` builtin has a row, and each
row's example is code that a test in this folder runs (it appears verbatim there)."""
import os
import re

import flydsl.expr as fx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
#: Names in fx that are types or loop helpers, documented in prose instead of the table.
NOT_IN_TABLE = {"BFloat16", "Bool", "Constexpr", "DType", "Float16", "Float32", "Float64",
                "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64",
                "Tensor", "range", "range_constexpr", "static_range",
                # the layout model's types (README: "Layouts, copies and MMA")
                "Boolean", "BufferCopy", "CopyAtom", "IntTuple", "Layout", "MmaAtom",
                "ScaledBasis", "StaticInt", "Stream", "ThrCopy", "ThrMma", "TiledCopy",
                "TiledMma", "UniversalCopy",
                # more storage types (README "Types"; docs/reference.md lists each) and
                # the FlyDSL module namespaces fx.arith, fx.gpu, fx.math, fx.typing
                "Float8E5M2FNUZ", "UInt128", "arith", "gpu", "math", "typing"}


def flydsl_names() -> set:
    """FlyDSL 0.5's ``flydsl.expr`` names (tests/data/flydsl_api_0_5_0.txt): flydsl has
    them for FlyDSL programs, and docs/reference.md documents each with an example that
    tests/test_docs_reference.py runs; the README's table is the core kernel language."""
    names = set()
    with open(os.path.join(TESTS, "data", "flydsl_api_0_5_0.txt")) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2 and parts[0].startswith("flydsl.expr"):
                names.add(parts[1])
    return names


def reference_rows() -> list:
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text.split("## Kernel language reference", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) == 3 and cells[0].startswith("`fx."):
            rows.append(cells)
    return rows


def test_every_builtin_has_a_reference_row():
    documented = set()
    for name_cell, _, _ in reference_rows():
        documented.update(re.findall(r"`fx\.(\w+)", name_cell))
    missing = set(fx.__all__) - NOT_IN_TABLE - documented - flydsl_names()
    assert not missing, f"README reference lacks rows for: {sorted(missing)}"


def test_every_reference_example_is_run_by_a_test():
    sources = "".join(open(os.path.join(TESTS, f)).read()
                      for f in os.listdir(TESTS) if f.endswith(".py") and f != os.path.basename(__file__))
    rows = reference_rows()
    assert len(rows) > 40
    for name, what, example in rows:
        code = re.findall(r"`([^`]+)`", example)
        assert code and what, f"row {name} needs a description and an example"
        for snippet in code:
            assert snippet in sources, f"the example {snippet!r} ({name}) is in no test"
