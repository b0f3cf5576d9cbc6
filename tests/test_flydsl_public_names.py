"""FlyDSL 0.5's public names exist under the same module paths, or are documented as missing.

tests/data/flydsl_api_0_5_0.txt lists upstream FlyDSL 0.5.0's public names (public modules
only, one ``module name`` per line). Each must be an attribute of that module in our flydsl,
or be listed in docs/not-supported.md, section "FlyDSL 0.5 names not provided", with the
reason. A listed-as-missing name that now exists is a stale entry and fails too, so the page
stays true as names are added.

Entry forms in that section (one line each, the reason after an em dash)::

    - `flydsl.expr.math.sincos` — reason
    - `flydsl.expr.rocdl.cdna4`: `MFMAScale`, `LDSReadTrans` — reason shared by these names
"""
from __future__ import annotations

import importlib
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES_FILE = os.path.join(ROOT, "tests", "data", "flydsl_api_0_5_0.txt")
DOC = os.path.join(ROOT, "docs", "not-supported.md")
SECTION = "## FlyDSL 0.5 names not provided"

_ENTRY = re.compile(r"^- `(flydsl[\w.]*)`(?::\s*(?P<names>.*?))?\s+—\s+(?P<reason>\S.*)$")


def listed_names() -> list[tuple[str, str]]:
    """(module, name) pairs of the data file, in file order."""
    pairs = []
    with open(NAMES_FILE) as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#"):
                module, name = line.split()
                pairs.append((module, name))
    return pairs


def documented_missing() -> dict[tuple[str, str], str]:
    """(module, name) -> reason, from the doc section; malformed lines raise."""
    with open(DOC) as fh:
        text = fh.read()
    if SECTION not in text:
        return {}
    body = text.split(SECTION, 1)[1]
    body = re.split(r"^## ", body, maxsplit=1, flags=re.M)[0]
    entries: dict[tuple[str, str], str] = {}
    for line in body.splitlines():
        if not line.startswith("- "):
            continue
        m = _ENTRY.match(line.strip())
        if m is None:
            raise AssertionError(f"docs/not-supported.md, {SECTION!r}: cannot read this line "
                                 f"(want '- `module.name` — reason' or '- `module`: `a`, `b` — reason'):\n{line}")
        if m.group("names") is not None:
            module = m.group(1)
            names = re.findall(r"`([\w]+)`", m.group("names"))
            assert names, f"no backticked names after the module in: {line}"
        else:
            module, _, name = m.group(1).rpartition(".")
            names = [name]
        for name in names:
            entries[(module, name)] = m.group("reason")
    return entries


def _exists(module: str, name: str, cache: dict) -> bool:
    if module not in cache:
        try:
            cache[module] = importlib.import_module(module)
        except ImportError:
            cache[module] = None
    mod = cache[module]
    if mod is None:
        return False
    try:
        getattr(mod, name)
    except AttributeError:
        return False
    except Exception:  # a lazy attribute that fails to load is not provided either
        return False
    return True


def _grouped(pairs) -> str:
    by_module: dict[str, list[str]] = {}
    for module, name in pairs:
        by_module.setdefault(module, []).append(name)
    return "\n".join(f"  {m}: {' '.join(sorted(ns))}" for m, ns in sorted(by_module.items()))


@pytest.fixture(scope="module")
def status():
    cache: dict = {}
    pairs = listed_names()
    present = {p for p in pairs if _exists(*p, cache)}
    return pairs, present, documented_missing()


def test_names_file_is_well_formed():
    pairs = listed_names()
    assert len(pairs) > 900, "the FlyDSL 0.5.0 name list looks truncated"
    assert len(set(pairs)) == len(pairs), "duplicate lines in the name list"
    assert all(m == "flydsl" or m.startswith("flydsl.") for m, _ in pairs)
    assert not any(m.startswith("flydsl._") or n.startswith("_") and n != "__version__" for m, n in pairs), \
        "private names do not belong in the public list"


def test_every_flydsl_name_exists_or_is_documented(status):
    pairs, present, documented = status
    undocumented = [p for p in pairs if p not in present and p not in documented]
    if undocumented:
        pytest.fail(f"{len(undocumented)} FlyDSL 0.5 public names are missing from flydsl and not listed in "
                    f"docs/not-supported.md ({SECTION!r}). Provide them, or add a line per name (or per "
                    f"module) with the reason:\n{_grouped(undocumented)}", pytrace=False)


def test_documented_missing_names_are_really_missing(status):
    pairs, present, documented = status
    stale = sorted(p for p in documented if p in present)
    if stale:
        pytest.fail(f"these names exist now; remove them from docs/not-supported.md ({SECTION!r}):\n"
                    f"{_grouped(stale)}", pytrace=False)


def test_documented_names_are_flydsl_names(status):
    pairs, present, documented = status
    unknown = sorted(set(documented) - set(pairs))
    assert not unknown, ("docs/not-supported.md lists names that are not in FlyDSL 0.5's public list "
                         f"(typo?):\n{_grouped(unknown)}")


def test_the_check_sees_a_missing_name():
    """The existence check itself: a name absent from its module is reported missing."""
    cache: dict = {}
    assert _exists("flydsl.expr", "make_layout", cache)
    assert not _exists("flydsl.expr", "no_such_flydsl_name", cache)
    assert not _exists("flydsl.no_such_module", "x", cache)
