"""A multi-tensor launch recognises a call like the last one by torch's C check of the
tensors' metadata (kernels.tensor_guard) instead of rebuilding its Python key, and
still treats a tensor whose shape, strides, dtype, storage or flags changed right."""
import pytest

torch = pytest.importorskip("torch")

from flydsl.torch import dynamo_backend as db  # noqa: E402
from flydsl.torch import kernels, multi_tensor as mt  # noqa: E402
from test_torch_multi_tensor import _all_steps  # noqa: E402  (a momentum step per parameter)

SHAPES = [(37,), (3, 7)]


def _flat(seed, shapes=SHAPES):
    gen = torch.Generator().manual_seed(seed)
    return [torch.rand(s, generator=gen) for s in shapes for _ in range(3)]


@pytest.fixture(scope="module")
def multi():
    from torch.fx.experimental.proxy_tensor import make_fx
    gm = make_fx(_all_steps, tracing_mode="fake")(*_flat(0))
    fused = db.fuse_pointwise(gm, "cpu", cost_rule=False)
    (mod,) = [m for m in fused.modules() if isinstance(m, mt.MultiTensorModule)]
    return fused, mod


def _check(fused, flat):
    got = fused(*flat)
    torch.testing.assert_close(got, _all_steps(*flat), rtol=1e-6, atol=1e-6)
    return got


def test_tensor_guard_checks_what_a_plan_depends_on():
    x = torch.rand(4, 6)
    check = kernels.tensor_guard([x])
    assert check is not None, "this torch has no TensorGuards"
    assert check(torch.rand(4, 6)) and check(torch.rand(8, 6)[4:])   # another storage, offset
    assert not check(torch.rand(6, 4).t())                           # strides
    assert not check(torch.rand(4, 7)[:, :6])                        # strides, same shape
    assert not check(torch.rand(4, 5))                               # shape
    assert not check(torch.rand(4, 6, dtype=torch.float64))          # dtype
    assert not check(torch.empty(4, 6, device="meta"))               # device
    assert not check(torch.rand(4, 6)._neg_view())                   # torch's negative bit
    assert not check(torch.rand(4, 6, requires_grad=True))
    pick = kernels.tensors_at([2, 0])
    assert pick(("a", "b", "c")) == ("c", "a") and kernels.tensors_at([1])((0, 5)) == (5,)


def test_a_call_like_the_last_one_skips_the_python_key(multi, monkeypatch):
    fused, mod = multi
    _check(fused, _flat(1))            # first launch (compiles), then the prepared one
    _check(fused, _flat(2))
    keys = []
    key = mod._key
    monkeypatch.setattr(mod, "_key", lambda args: keys.append(1) or key(args))
    before = mt.stats["multi_launches"]
    for seed in (3, 4):                # new tensors, same signature
        _check(fused, _flat(seed))
    assert keys == [] and mt.stats["multi_launches"] == before + 2


def test_changed_tensors_still_run_right(multi):
    fused, mod = multi
    _check(fused, _flat(5))
    before = dict(mt.stats)
    # strides: the last group's m transposed -> its groups run one by one
    flat = _flat(6)
    flat[-1] = torch.rand(7, 3).t()
    _check(fused, flat)
    assert mt.stats["per_group_calls"] == before["per_group_calls"] + 1
    # back to the first signature: its plan again, launched as one
    _check(fused, _flat(7))
    assert mt.stats["multi_launches"] == before["multi_launches"] + 1
    # other shapes: a plan of their own
    _check(fused, _flat(8, [(40,), (2, 7)]))
    assert mt.stats["multi_launches"] == before["multi_launches"] + 2
    # storage: views at an offset into larger tensors
    flat = [torch.rand(t.numel() + 16).narrow(0, 16, t.numel()).view(t.shape)
            for t in _flat(9)]
    _check(fused, flat)
    # flags: requires_grad, and torch's negative bit (inputs resolved, as eager reads them)
    flat = _flat(10)
    flat[0].requires_grad_()
    with torch.no_grad():
        _check(fused, flat)
    flat = _flat(11)
    flat[1] = (-flat[1])._neg_view()
    _check(fused, flat)
    _check(fused, _flat(12))


def test_a_dropped_plan_is_not_reused_through_the_last_check(multi):
    fused, mod = multi
    flat = _flat(13)
    _check(fused, flat)
    key = mod._key(flat)
    assert mod._last is not None and mod._last[1] == key
    mod._drop(key)                     # as a lost trial or a failed launch does
    assert mod._last is None
    before = mt.stats["per_group_calls"]
    _check(fused, _flat(14))
    assert mt.stats["per_group_calls"] == before + 1
    del mod.plans[key]                 # let the other tests' signature plan again
    mod._last = None


def test_each_result_is_its_own_tensor(multi):
    """Results are allocated one by one, as eager's are: no result keeps a buffer of
    all of them alive, and an optimizer step's megabytes are not one allocation."""
    fused, _ = multi
    got = _check(fused, _flat(30))
    assert all(t._base is None and t.is_contiguous() for t in got)
    assert len({t.untyped_storage().data_ptr() for t in got}) == len(got)
