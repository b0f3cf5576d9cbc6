"""FlyDSL's ``flydsl.expr.utils``: the module path upstream kernels import their value
helpers from (``from flydsl.expr.utils.arith import ArithValue, _to_raw``)."""
