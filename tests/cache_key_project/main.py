"""Run every kernel of kernels.py once; print {kernel: [result, from_disk_cache]}."""
import json
import os
import sys

import numpy as np

import flydsl

import kernels as K


def run(kernel, *extra):
    x, y = np.ones(1, np.float32), np.zeros(1, np.float32)
    prog = flydsl.compile(kernel, x, y, *extra)
    prog(x, y, *extra, grid=1, block=1)
    return [float(y[0]), prog.kernels[0].from_cache]


S = float(os.environ.get("CK_S", "2.0"))
results = {
    "closure_a": run(K.with_closure(K.Cfg(S))),
    "closure_b": run(K.with_closure(K.Cfg(S + 1.0))),
    "constexpr_a": run(K.from_constexpr, K.Cfg(S)),
    "constexpr_b": run(K.from_constexpr, K.Cfg(S + 1.0)),
    "hashed": run(K.from_hashed_constexpr, K.Hashed(S)),
    "unhashable": run(K.from_unhashable, K.Cfg(S)),
}
K.GLOBAL_OBJ.s = S
for name in ("from_env_at_import", "from_other_module", "from_staticmethod",
             "from_classmethod", "from_lru_cache", "from_partial", "from_global_object",
             "from_deep_constant", "from_instance_method", "from_environment"):
    results[name] = run(getattr(K, name))
json.dump(results, sys.stdout)
