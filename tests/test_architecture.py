"""The package's structure: every package is installed, and no module imports
another that (directly or through others) imports it back, counting imports inside
functions too (cycles hidden in function-local imports are cycles)."""
import ast
import os
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = None

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Import name -> source folder (flydsl.passes ships from the top-level passes/).
PACKAGE_DIRS = {"flydsl": os.path.join(ROOT, "flydsl"), "flydsl.passes": os.path.join(ROOT, "passes")}


def modules() -> dict:
    """Import name -> file, for every module of flydsl and flydsl.passes."""
    found = {}
    for package, folder in PACKAGE_DIRS.items():
        for dirpath, dirnames, files in os.walk(folder):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in files:
                if not name.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), folder)[:-3]
                rel = rel.replace(os.sep, ".").removesuffix("__init__").rstrip(".")
                found[f"{package}.{rel}" if rel else package] = os.path.join(dirpath, name)
    return found


def imports_of(module: str, path: str, known: dict) -> set:
    """Modules of ``known`` that ``module`` imports, anywhere in the file, except
    under ``if TYPE_CHECKING:``."""
    tree = ast.parse(open(path).read())
    is_package = path.endswith("__init__.py")
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
               and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in skipped or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = module if is_package else module.rpartition(".")[0]
            if node.level:
                parts = base.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module
            targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target
                       for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != module:
                out.add(t)
    return out


def cycles(graph: dict) -> list:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = iter(range(1 << 30))

    def visit(v):
        index[v] = low[v] = next(counter)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_even_through_function_local_imports():
    known = modules()
    graph = {m: imports_of(m, path, known) for m, path in known.items()}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: Layers, bottom first (docs/architecture.md): a module imports only its own layer
#: and those below. Matched by longest prefix.
LAYERS = {
    "flydsl.errors": 0, "flydsl.tracebacks": 0, "flydsl.version": 0, "flydsl.plugins": 0,
    "flydsl.private_files": 0,
    "flydsl.compiler.target": 0, "flydsl.compiler.options": 0,
    "flydsl.expr": 1, "flydsl._mlir": 1,   # the MLIR bindings under FlyDSL's name
    "flydsl.runtime": 2, "flydsl.passes": 2,
    "flydsl.compiler": 3,
    "flydsl": 4,                 # the user API: __init__, jit, kernel, launch_context, cli
    "flydsl.autotune": 4,
    # do_bench times autotune's candidates, so it sits with the user API (it imports
    # only the compiler and runtime layers); the rest of testing/ is an integration.
    "flydsl.testing.bench": 4,
    "flydsl.torch": 5, "flydsl.testing": 5, "flydsl.gpu_kit": 5,
}


def layer(module: str) -> int:
    prefix = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[prefix]


def test_no_layer_imports_a_layer_above_it():
    known = modules()
    upward = sorted(f"{m} -> {t}" for m, path in known.items()
                    for t in imports_of(m, path, known) if layer(t) > layer(m))
    assert upward == []


@pytest.mark.skipif(tomllib is None, reason="tomllib needs Python 3.11")
def test_every_package_folder_is_installed():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    packages = {m for m, path in modules().items() if path.endswith("__init__.py")}
    assert packages == listed
