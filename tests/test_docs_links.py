"""Every relative link in README.md and docs/*.md resolves: the file (or folder) exists,
and a ``#anchor`` names a heading of the target page, as GitHub renders it.

This is what ``mkdocs build --strict`` would check for these pages, without a
dependency to download: links to files, and anchors (GitHub's heading ids: lower case,
punctuation dropped, spaces as hyphens, ``-1``, ``-2`` for repeats). Links inside code
are not links; ``http(s):`` and ``mailto:`` links are not fetched.
"""
import glob
import importlib.util
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT)
                               for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def _load_slug():
    """GitHub's heading ids: the generator of docs/reference.md writes its links with
    the same function."""
    spec = importlib.util.spec_from_file_location(
        "gen_reference", os.path.join(ROOT, "docs", "gen_reference.py"))
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module.slug


slug = _load_slug()


def prose(text: str) -> str:
    """``text`` without fenced code blocks and code spans."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def anchors(path: str) -> set:
    """The ids GitHub gives the headings of the Markdown file ``path``."""
    with open(path, encoding="utf-8") as f:
        text = _FENCE.sub("", f.read())
    seen: dict = {}
    out = set()
    for title in _HEADING.findall(text):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)    # a link: its text
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: str) -> list:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = prose(f.read())
    return _LINK.findall(text) + _REF_DEF.findall(text)


def test_pages_and_links_are_found():
    assert {"README.md", "docs/reference.md", "docs/not-supported.md",
            "docs/jit-vs-triton.md", "docs/gpu-profiling.md",
            "docs/cpu-performance.md", "docs/architecture.md"} <= set(PAGES)
    assert len(links("docs/reference.md")) > 150      # its table of contents
    assert slug("`fx.thread_idx`, `fx.block_idx`") == "fxthread_idx-fxblock_idx"
    assert slug("Timing kernels: do_bench") == "timing-kernels-do_bench"
    assert anchors(os.path.join(ROOT, "README.md")) >= {"set-up-two-commands",
                                                        "kernel-language-reference"}


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    here = os.path.dirname(os.path.join(ROOT, page))
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):     # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = os.path.normpath(os.path.join(here, path)) if path else os.path.join(ROOT, page)
        if not os.path.exists(file):
            broken.append(f"{target}: no such file")
        elif anchor and file.endswith(".md") and anchor not in anchors(file):
            broken.append(f"{target}: no heading with that id in {os.path.relpath(file, ROOT)}")
    assert not broken, f"broken links in {page}: {broken}"
