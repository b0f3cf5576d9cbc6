"""docs/reference.md, the fx API reference: generated from the docstrings and up to
date, an entry for every public fx name with a return description and an example,
and every example run.

Examples come in three kinds (docs/gen_reference.py describes the convention):

* ``>>>`` lines: plain Python, run with :mod:`doctest` (the printed results must match);
* a program (it defines a ``@flydsl.kernel``/``@flydsl.jit`` function): run as a module;
* anything else is a kernel body: wrapped in a helper that one kernel calls, run on the
  CPU backend. Its free names are bound by how the example uses them: ``i`` is the
  thread's global index, ``n`` the element count, an indexed name (``x[i]``,
  ``t[r, c]``) a tensor of that rank, a name used inside an index an ``Int32`` below 8,
  an upper-case name a compile-time int, ``x``, ``y``, ``out`` and the first argument of
  an atomic tensors, and any other name a value read from a tensor.
"""
import ast
import builtins
import doctest
import importlib.util
import os
import sys

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "gen_reference", os.path.join(ROOT, "docs", "gen_reference.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module     # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


GEN = _load_generator()
ENTRIES = GEN.entries()
SECTION_TITLES = [title for title, _ in GEN.SECTIONS]


# -- the page -----------------------------------------------------------------------------

def test_reference_is_generated_from_the_current_docstrings():
    with open(GEN.REFERENCE, encoding="utf-8") as f:
        current = f.read()
    assert current == GEN.render(ENTRIES), (
        "docs/reference.md is stale: run `python docs/gen_reference.py`")


def test_every_public_fx_name_has_an_entry_in_a_section():
    documented = {name for e in ENTRIES for name in e.names}
    missing = sorted({f"fx.{n}" for n in fx.__all__} - documented)
    assert not missing, f"no reference entry for {missing}"
    for module in (fx.rocdl, fx.nvvm):
        short = module.__name__.rsplit(".", 1)[1]
        assert {f"fx.{short}.{n}" for n in module.__all__} <= documented
    unsorted = [e.names for e in ENTRIES if e.section not in SECTION_TITLES]
    assert not unsorted, (f"{unsorted} belong to no section: add them to SECTION_OF_NAME or "
                          "SECTION_OF_MODULE in docs/gen_reference.py")


def test_every_entry_has_an_example_and_callables_a_return_description():
    no_example = [e.names[0] for e in ENTRIES if not e.example]
    assert not no_example, f"docstrings without an Example: {no_example}"
    no_returns = [e.names[0] for e in ENTRIES
                  if any(callable(o) and not isinstance(o, type) for o in e.objs)
                  and not e.returns]
    assert not no_returns, f"docstrings without a 'Returns:' paragraph: {no_returns}"


def test_families_document_generated_names_once_and_nothing_else():
    """A generated family (``fx.Float32x4`` & co) is one entry listing every member;
    an ordinary name that merely looks alike is not swallowed by a family."""
    families = {e.family: e for e in ENTRIES if e.family}
    assert set(families) == {title for _, title, _ in GEN.FAMILIES}
    vectors = families["fx.<Type>x<N>"]
    assert vectors.names[0] == "fx.Float32x4" and vectors.example
    assert {"fx.Float16x8", "fx.Int4x32", "fx.Uint128x1"} <= set(vectors.names)
    assert "fx.rocdl.mfma_f32_32x32x8f16" in families["fx.rocdl.mfma_*"].names
    for ordinary in ("fx.Float32", "fx.Vector", "fx.VectorAlias", "fx.UniversalCopy128b",
                     "fx.rocdl.MFMA", "fx.max"):
        assert GEN.family_of(ordinary) is None, ordinary
    assert GEN.family_of("fx.Float32x4") and GEN.family_of("fx.rocdl.mfma_f32_16x16x4f32")


def test_the_generator_reads_the_docstring_convention():
    doc = ("Add things.\n\nReturns: the sum,\nan Int32.\n\nExample: ``y = f(x)``  # 3\n\n"
           "Backends: all.")
    assert GEN.split_docstring(doc) == ("Add things.", "the sum, an Int32.", "y = f(x)", "3",
                                        "Backends: all.")
    block = "S.\n\nExample::\n\n    a = 1\n\n    b = a\n\nNotes."
    assert GEN.split_docstring(block)[2:] == ("a = 1\n\nb = a", "", "Notes.")
    assert GEN.slug("`fx.thread_idx`, `fx.block_idx`") == "fxthread_idx-fxblock_idx"


def test_check_mode_reports_a_stale_page(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "reference.md"
    stale.write_text("old\n")
    monkeypatch.setattr(GEN, "REFERENCE", str(stale))
    assert GEN.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert GEN.main([]) == 0 and GEN.main(["--check"]) == 0


# -- the examples -------------------------------------------------------------------------

def kind(example: str) -> str:
    if example.lstrip().startswith(">>>"):
        return "doctest"
    if any(line.lstrip().startswith(("@flydsl.", "@flyc.")) for line in example.splitlines()):
        return "program"
    return "kernel"


def examples_of(which: str) -> list:
    return [(e.names[0], e.example) for e in ENTRIES if e.example and kind(e.example) == which]


@pytest.mark.parametrize("name,example", examples_of("doctest"))
def test_plain_python_example(name, example):
    test = doctest.DocTestParser().get_doctest(
        example, {"fx": fx, "flydsl": flydsl, "np": np}, name, None, 0)
    runner = doctest.DocTestRunner(
        optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    out: list = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, f"the example of {name} fails:\n" + "".join(out)


PRELUDE = "import numpy as np\nimport flydsl\nimport flydsl.expr as fx\n"


@pytest.mark.parametrize("name,example", examples_of("program"))
def test_program_example(name, example, tmp_path, monkeypatch):
    module = "doc_example_" + name.replace(".", "_")
    (tmp_path / f"{module}.py").write_text(PRELUDE + example + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module(module)


#: Elementwise dtype of the example's tensors and values ("f": Float32 by default).
FLAVOR = {name: "i" for name in (
    "fx.clz", "fx.popc", "fx.brev", "fx.ffs", "fx.atomic_and", "fx.atomic_or", "fx.atomic_xor",
    "fx.atomic_cas", "fx.absi", "fx.ctlz", "fx.ctpop", "fx.ipowi", "fx.shrui", "fx.cmpi",
    "fx.index_cast", "fx.rocdl.ds_bpermute")}
FLAVOR.update({"fx.atomic_inc": "u", "fx.atomic_dec": "u"})
CONSTANTS = {"BLOCK": 64, "MASK": 1}   # other upper-case names are 4
THREADS, BLOCKS = 64, 2
N = 8 * THREADS * BLOCKS               # elements per tensor row: x[i * 4 + k] fits
ROWS = 8
SMEM = 4 * N                           # dynamic shared memory bytes of the launch
TENSOR_NAMES = {"x", "y", "out"}      # tensors even where not indexed (fx.make_view(x, ...))
NOT_FREE = set(dir(builtins)) | {"fx", "flydsl", "np", "math"}


def _bindings(example: str, flavor: str) -> dict:
    """Free name -> the kernel expression passed for it, by how the example uses it."""
    tree = ast.parse(example)
    stored, loaded, tensors, indices = set(), [], {}, set()
    augmented = {id(node.target) for node in ast.walk(tree) if isinstance(node, ast.AugAssign)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            rank = len(node.slice.elts) if isinstance(node.slice, ast.Tuple) else 1
            tensors[node.value.id] = rank
            indices |= {n.id for n in ast.walk(node.slice) if isinstance(n, ast.Name)}
        if (isinstance(node, ast.Call) and ast.unparse(node.func).startswith("fx.atomic_")
                and node.args and isinstance(node.args[0], ast.Name)):
            tensors.setdefault(node.args[0].id, 1)      # the array an atomic updates
        if id(node) in augmented:
            loaded.append(node.id)      # `total += v` reads total first
        elif isinstance(node, ast.Name):
            (stored.add if isinstance(node.ctx, ast.Store) else loaded.append)(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)):
            stored |= {a.arg for a in node.args.args}
    out = {}
    for name in dict.fromkeys(loaded):
        if name in NOT_FREE or (name in stored and name not in tensors):
            continue
        if name in ("i", "n"):
            out[name] = name
        elif name in tensors or name in TENSOR_NAMES:
            out[name] = f"{flavor}{tensors.get(name, 1)}"
        elif name.isupper():
            out[name] = repr(CONSTANTS.get(name, 4))
        elif name in indices:
            out[name] = "(i % 8)"
        else:
            out[name] = f"{flavor}1[i]"
    return out


def _helper(k: int, name: str, example: str) -> tuple:
    """The source of a helper running ``example`` and the call that binds its names."""
    if example.rstrip().endswith(":"):       # a loop or if header alone
        example += "\n    pass"
    binds = _bindings(example, FLAVOR.get(name, "f"))
    body = "\n".join("    " + line for line in example.splitlines())
    source = f"def ex_{k}({', '.join(binds)}):  # {name}\n{body}\n"
    return source, f"ex_{k}({', '.join(binds.values())})"


KERNEL_HEAD = ("(f1: fx.Tensor, f2: fx.Tensor, i1: fx.Tensor, i2: fx.Tensor, u1: fx.Tensor, "
               "u2: fx.Tensor, n: fx.Int32):\n"
               "    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x\n")


def _kernel_module(tmp_path, examples: list):
    """A module with one helper per example, ``all_examples`` calling every helper, and
    ``example_<k>`` calling helper k alone."""
    helpers, calls = zip(*(_helper(k, name, ex) for k, (name, ex) in enumerate(examples)))
    src = [PRELUDE, *helpers]
    src.append("@flydsl.kernel\ndef all_examples" + KERNEL_HEAD
               + "".join(f"    {c}\n" for c in calls))
    for k, call in enumerate(calls):
        src.append(f"@flydsl.kernel\ndef example_{k}" + KERNEL_HEAD + f"    {call}\n")
    path = tmp_path / "doc_kernel_examples.py"
    path.write_text("\n\n".join(src))
    spec = importlib.util.spec_from_file_location("doc_kernel_examples", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _arguments():
    ramp = np.arange(N * ROWS).reshape(ROWS, N)
    f2 = (0.5 + (ramp % 97) / 97.0).astype(np.float32)
    i2 = (ramp % 7 + 1).astype(np.int32)
    u2 = i2.astype(np.uint32)
    return [f2[0].copy(), f2, i2[0].copy(), i2, u2[0].copy(), u2, N]


def test_kernel_body_examples_compile_and_run(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "0")    # what runs matters here, not how fast
    examples = examples_of("kernel")
    assert len(examples) > 50
    module = _kernel_module(tmp_path, examples)
    try:
        module.all_examples[BLOCKS, THREADS, SMEM](*_arguments())
        return
    except Exception:   # find which examples fail, each alone
        pass
    failures = []
    for k, (name, _) in enumerate(examples):
        try:
            getattr(module, f"example_{k}")[BLOCKS, THREADS, SMEM](*_arguments())
        except Exception as e:   # noqa: BLE001 (reported below)
            failures.append(f"{name}: {type(e).__name__}: {e}")
    assert failures, "the examples fail together but pass one by one"
    pytest.fail("kernel-body examples that fail:\n" + "\n".join(failures))
