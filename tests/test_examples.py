"""Every example runs on the CPU backend and matches numpy (each checks itself)."""
import importlib

import pytest

EXAMPLES = ["vector_add", "softmax", "block_sum", "warp_reduce", "matmul", "layernorm"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_on_cpu(name):
    module = importlib.import_module(name)
    module.main()


def test_vector_add_api_exactly_as_documented():
    import numpy as np
    from vector_add import vadd
    a = np.arange(1000, dtype=np.float32)
    b = np.ones(1000, dtype=np.float32)
    c = np.zeros(1000, dtype=np.float32)
    vadd(a, b, c, a.size)
    np.testing.assert_array_equal(c, a + 1)


def test_vector_add_with_torch_tensors():
    torch = pytest.importorskip("torch")
    from vector_add import vadd
    a = torch.randn(5000)
    b = torch.randn(5000)
    c = torch.empty(5000)
    vadd(a, b, c, a.numel())
    assert torch.allclose(c, a + b)
