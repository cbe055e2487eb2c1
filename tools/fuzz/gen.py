"""Seeded generator of random valid ONNX graphs over ops the EP claims (docs/OPERATORS.md).

generate(seed) -> spec: a JSON-serialisable dict (graph inputs with their data, initializers,
nodes, outputs) that harness.build_model() turns into a model and feeds. Graphs are chains/DAGs
of 1-8 nodes over a pool of values: every node takes existing values or fresh inputs, so later
nodes consume earlier outputs. Shapes have rank 0-4 with dims 0-5 (0 and 1 on purpose),
broadcasting operands drop or squash dims, attributes are drawn from the ONNX spec's ranges, and
index-taking ops get hostile indices (past either end, 1e9, 2^40, INT64_MIN) some of the time.
Everything is opset 21. The same seed always gives the same spec."""
from __future__ import annotations

import numpy as np

OPSET = 21
FLOATS = ["float32", "float16", "float64"]
INTS = ["int64", "int32", "int8", "uint8"]
NUMERIC = FLOATS + INTS
ALL = NUMERIC + ["bool"]
# How often a graph's first input gets each dtype.
DTYPE_WEIGHTS = {"float32": 6, "float16": 2, "float64": 1, "int64": 2, "int32": 2, "int8": 0.5,
                 "uint8": 0.5, "bool": 0.5}
HOSTILE = [10**9, -(10**9), 2**40, -(2**63), 2**63 - 1]


class Gen:
    def __init__(self, seed: int):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.values = []        # (name, dtype, shape) usable as node inputs
        self.inputs = []        # graph inputs: dict(name, dtype, shape, data)
        self.inits = []         # initializers: same form
        self.nodes = []
        self.out_dtypes = {}    # every node output's dtype (values a builder withdrew included)
        self.n = 0

    # ---- helpers ---------------------------------------------------------------------------
    def name(self, p):
        self.n += 1
        return f"{p}{self.n}"

    def chance(self, p):
        return self.rng.random() < p

    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def dim(self):
        r = self.rng.random()
        return 0 if r < 0.05 else 1 if r < 0.3 else int(self.rng.integers(2, 6))

    def shape(self, rank=None):
        rank = int(self.rng.integers(0, 5)) if rank is None else rank
        return tuple(self.dim() for _ in range(rank))

    def data(self, dtype, shape, lo=None, hi=None):
        rng = self.rng
        if dtype == "bool":
            return rng.random(shape) < 0.5
        if dtype in FLOATS:
            a = rng.standard_normal(shape) * 2
            if lo is not None:
                a = rng.uniform(lo, hi, shape)
            return a.astype(dtype)
        info = np.iinfo(dtype)
        lo = max(info.min, -20 if lo is None else lo)
        hi = min(info.max, 20 if hi is None else hi)
        return rng.integers(lo, hi + 1, size=shape).astype(dtype)

    def feed(self, dtype, shape, arr=None, const=False):
        arr = self.data(dtype, shape) if arr is None else np.asarray(arr, dtype=dtype)
        name = self.name("c" if const else "x")
        (self.inits if const else self.inputs).append(
            {"name": name, "dtype": str(arr.dtype), "shape": list(arr.shape), "data": arr.ravel().tolist()})
        if not const:
            self.values.append((name, str(arr.dtype), tuple(arr.shape)))
        return name

    def const(self, arr, dtype="int64"):
        return self.feed(dtype, np.shape(arr), np.asarray(arr, dtype=dtype), const=True)

    def pick(self, pred=lambda v: True, fresh_dtype=None, fresh_shape=None):
        """An existing value satisfying pred (later values preferred), else a fresh input."""
        cands = [v for v in self.values if pred(v)]
        if cands and (fresh_dtype is None or self.chance(0.85)):
            w = np.arange(1, len(cands) + 1, dtype=float) ** 2
            return cands[int(self.rng.choice(len(cands), p=w / w.sum()))]
        if fresh_dtype is None:
            return None
        shape = self.shape() if fresh_shape is None else fresh_shape
        name = self.feed(fresh_dtype, shape)
        return self.values[-1] if self.values[-1][0] == name else (name, fresh_dtype, tuple(shape))

    def node(self, op, ins, outs, **attrs):
        """outs: list of (dtype, shape); returns the output names."""
        names = [self.name("v") for _ in outs]
        self.nodes.append({"op": op, "inputs": list(ins), "outputs": names,
                           "attrs": {k: v for k, v in attrs.items() if v is not None}})
        for nm, (dt, sh) in zip(names, outs):
            self.values.append((nm, dt, tuple(int(d) for d in sh)))
            self.out_dtypes[nm] = dt
        return names

    def bcast_shape(self, shape):
        """A shape that broadcasts against `shape`: trailing dims kept or set to 1."""
        keep = int(self.rng.integers(0, len(shape) + 1))
        tail = list(shape[len(shape) - keep:]) if keep else []
        return tuple(1 if self.chance(0.3) else d for d in tail)

    def dtype_value(self, dtypes, fresh=True):
        dt = self.choice(dtypes)
        return self.pick(lambda v: v[1] in dtypes, fresh_dtype=dt if fresh else None)


def broadcast(a, b):
    return tuple(np.broadcast_shapes(tuple(a), tuple(b)))


# ---- op builders: each returns True when it added a node ----------------------------------------

UNARY = {  # op -> dtypes the registry row claims (and ORT's CPU EP mostly has)
    "Abs": NUMERIC, "Neg": ["float32", "float16", "float64", "int64", "int32", "int8"],
    "Exp": FLOATS, "Log": FLOATS, "Sqrt": FLOATS, "Relu": ["float32", "float16", "float64", "int32", "int64", "int8"],
    "Sigmoid": FLOATS, "Tanh": FLOATS, "Ceil": FLOATS, "Floor": FLOATS, "Sin": ["float32", "float16"],
    "Cos": ["float32", "float16"], "Erf": ["float32", "float16"], "Reciprocal": FLOATS, "Sign": NUMERIC,
    "Identity": ALL, "Not": ["bool"],
}
BINARY = {"Add": NUMERIC, "Sub": NUMERIC, "Mul": NUMERIC, "Div": NUMERIC, "Pow": ["float32", "float16", "float64", "int32", "int64"],
          "Mod": NUMERIC, "Equal": ALL, "Less": NUMERIC, "Greater": NUMERIC, "And": ["bool"], "Or": ["bool"]}
CMP = {"Equal", "Less", "Greater"}


def b_unary(g: Gen, op):
    x = g.dtype_value(UNARY[op])
    g.node(op, [x[0]], [(x[1], x[2])])
    return True


def b_binary(g: Gen, op):
    a = g.dtype_value(BINARY[op])
    dt = a[1]
    if op == "Pow" and dt in INTS:   # integer Pow: small non-negative exponents (overflow is undefined)
        b = (g.feed(dt, g.bcast_shape(a[2]), g.data(dt, g.bcast_shape(a[2]), 0, 3)),)
        bshape = next(v[2] for v in g.values if v[0] == b[0])
    else:
        b = g.pick(lambda v: v[1] == dt and v[0] != a[0] and _bcastable(v[2], a[2]))
        if b is None or g.chance(0.4):
            shape = g.bcast_shape(a[2])
            if g.chance(0.3):        # the fresh operand is the larger one
                shape = tuple(g.dim() for _ in range(g.rng.integers(0, 2))) + tuple(a[2])
            name = g.feed(dt, shape)
            b = (name, dt, shape)
        bshape = b[2]
    ins = [a[0], b[0]] if g.chance(0.5) or op == "Pow" else [b[0], a[0]]
    attrs = {}
    if op == "Mod":
        attrs["fmod"] = 1 if dt in FLOATS else int(g.rng.integers(0, 2))
    out_dt = "bool" if op in CMP else dt
    g.node(op, ins, [(out_dt, broadcast(a[2], bshape))], **attrs)
    return True


def _bcastable(a, b):
    try:
        np.broadcast_shapes(tuple(a), tuple(b))
        return True
    except ValueError:
        return False


def b_variadic(g: Gen, op):
    a = g.dtype_value(FLOATS if op in ("Sum", "Mean") else NUMERIC)
    ins, shape = [a[0]], a[2]
    for _ in range(int(g.rng.integers(0, 3))):
        s = g.bcast_shape(a[2])
        ins.append(g.feed(a[1], s))
        shape = broadcast(shape, s)
    g.node(op, ins, [(a[1], shape)])
    return True


def _axes(g: Gen, rank, allow_empty=True):
    if rank == 0:
        return []
    k = int(g.rng.integers(0 if allow_empty else 1, rank + 1))
    axes = sorted(g.rng.choice(rank, size=k, replace=False).tolist())
    return [a - rank if g.chance(0.3) else a for a in axes]


REDUCE = {"ReduceSum": ["float32", "float16", "float64", "int32", "int64"],
          "ReduceMean": ["float32", "float16", "float64", "int32", "int64"],
          "ReduceProd": ["float32", "float64", "int32", "int64"],
          "ReduceMax": NUMERIC, "ReduceMin": NUMERIC}


def b_reduce(g: Gen, op):
    x = g.dtype_value(REDUCE[op])
    r = len(x[2])
    axes = _axes(g, r)
    keep = int(g.rng.integers(0, 2))
    noop = int(g.rng.integers(0, 2)) if not axes else None
    ins = [x[0]]
    if axes or g.chance(0.5):
        ins.append(g.const(np.array(axes, np.int64)))
    if not axes and noop:
        shape = x[2]
    else:
        red = {a % r for a in axes} if axes else set(range(r))
        if any(x[2][a] == 0 for a in red) and op in ("ReduceMax", "ReduceMin") and x[1] in INTS:
            pass  # empty reductions: ORT's identity value (documented) -- keep
        shape = tuple((1 if i in red else d) for i, d in enumerate(x[2]) if keep or i not in red)
    g.node(op, ins, [(x[1], shape)], keepdims=keep, noop_with_empty_axes=noop)
    return True


def b_argmax(g: Gen, op):
    x = g.pick(lambda v: v[1] in NUMERIC and len(v[2]) > 0 and 0 not in v[2], fresh_dtype="float32",
               fresh_shape=tuple(max(1, d) for d in g.shape(int(g.rng.integers(1, 4)))))
    r = len(x[2])
    axis = int(g.rng.integers(-r, r))
    keep = int(g.rng.integers(0, 2))
    shape = tuple(1 if i == axis % r else d for i, d in enumerate(x[2]) if keep or i != axis % r)
    g.node(op, [x[0]], [("int64", shape)], axis=axis, keepdims=keep, select_last_index=int(g.rng.integers(0, 2)))
    return True


def b_softmax(g: Gen, op):
    x = g.pick(lambda v: v[1] in ("float32", "float16") and len(v[2]) > 0, fresh_dtype="float32",
               fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    g.node(op, [x[0]], [(x[1], x[2])], axis=int(g.rng.integers(-r, r)))
    return True


def b_cumsum(g: Gen, op):
    x = g.pick(lambda v: v[1] in ("float32", "float64", "int32", "int64") and len(v[2]) > 0, fresh_dtype="float32",
               fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    ax = g.const(np.array(int(g.rng.integers(-r, r)), np.int64))
    g.node(op, [x[0], ax], [(x[1], x[2])], exclusive=int(g.rng.integers(0, 2)), reverse=int(g.rng.integers(0, 2)))
    return True


def b_reshape(g: Gen, op):
    x = g.pick(lambda v: True, fresh_dtype="float32")
    n = int(np.prod(x[2]))
    dims = []
    rest = n
    for _ in range(int(g.rng.integers(0, 4))):
        divs = [d for d in range(1, 6) if rest % d == 0] if rest else [0, 1, 2]
        d = g.choice(divs)
        dims.append(d)
        rest = rest // d if d else 0
    if n == 0 and 0 not in dims:
        dims.append(0)
    elif n != 0:
        dims.append(rest)
    target = list(dims)
    if n and target and g.chance(0.4):
        target[int(g.rng.integers(len(target)))] = -1
    if g.chance(0.3) and target and len(x[2]) >= 1 and n:
        i = int(g.rng.integers(min(len(target), len(x[2]))))
        if target[i] == x[2][i] and target[i] != 0:
            target[i] = 0   # 0 copies the input dim
    if 0 in dims and -1 in target:
        target = list(dims)
    g.node(op, [x[0], g.const(np.array(target, np.int64))], [(x[1], tuple(dims))])
    return True


def b_transpose(g: Gen, op):
    x = g.pick(lambda v: True, fresh_dtype="float32")
    r = len(x[2])
    if r == 0 or g.chance(0.2):
        g.node(op, [x[0]], [(x[1], x[2][::-1])])
        return True
    perm = g.rng.permutation(r).tolist()
    g.node(op, [x[0]], [(x[1], tuple(x[2][p] for p in perm))], perm=perm)
    return True


def b_flatten(g: Gen, op):
    x = g.pick(lambda v: True, fresh_dtype="float32")
    r = len(x[2])
    axis = int(g.rng.integers(-r, r + 1))
    a = axis % (r + 1) if axis < 0 else axis
    g.node(op, [x[0]], [(x[1], (int(np.prod(x[2][:a])), int(np.prod(x[2][a:]))))], axis=axis)
    return True


def b_squeeze(g: Gen, op):
    x = g.pick(lambda v: 1 in v[2])
    if x is None:
        return False
    ones = [i for i, d in enumerate(x[2]) if d == 1]
    if g.chance(0.3):
        g.node(op, [x[0]], [(x[1], tuple(d for d in x[2] if d != 1))])
        return True
    k = int(g.rng.integers(1, len(ones) + 1))
    axes = sorted(g.rng.choice(ones, size=k, replace=False).tolist())
    shape = tuple(d for i, d in enumerate(x[2]) if i not in axes)
    axes = [a - len(x[2]) if g.chance(0.3) else a for a in axes]
    g.node(op, [x[0], g.const(np.array(axes, np.int64))], [(x[1], shape)])
    return True


def b_unsqueeze(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) < 4, fresh_dtype="float32")
    r = len(x[2])
    k = int(g.rng.integers(1, 3))
    out_r = r + k
    axes = sorted(g.rng.choice(out_r, size=k, replace=False).tolist())
    shape, it = [], iter(x[2])
    for i in range(out_r):
        shape.append(1 if i in axes else next(it))
    axes = [a - out_r if g.chance(0.3) else a for a in axes]
    g.node(op, [x[0], g.const(np.array(axes, np.int64))], [(x[1], tuple(shape))])
    return True


def b_slice(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0, fresh_dtype="float32", fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    axes = g.rng.choice(r, size=int(g.rng.integers(1, r + 1)), replace=False).tolist()
    starts, ends, steps, shape = [], [], [], list(x[2])
    for a in axes:
        n = x[2][a]
        step = g.choice([1, 1, 1, 2, 3, -1, -2])
        big = [2**62, -(2**62), 2**63 - 1, -(2**63), 10**9]

        def endpoint():
            return g.choice(big) if g.chance(0.15) else int(g.rng.integers(-n - 2, n + 3))
        s, e = endpoint(), endpoint()
        starts.append(s)
        ends.append(e)
        steps.append(step)
        shape[a] = len(range(*slice(s, e, step).indices(n)))
    ins = [x[0], g.const(np.array(starts, np.int64)), g.const(np.array(ends, np.int64)),
           g.const(np.array([a - r if g.chance(0.3) else a for a in axes], np.int64))]
    if any(st != 1 for st in steps) or g.chance(0.5):
        ins.append(g.const(np.array(steps, np.int64)))
    g.node(op, ins, [(x[1], tuple(shape))])
    return True


def b_concat(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0, fresh_dtype="float32", fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    axis = int(g.rng.integers(-r, r))
    ins, total = [x[0]], x[2][axis]
    for _ in range(int(g.rng.integers(1, 3))):
        s = list(x[2])
        s[axis] = g.dim()
        total += s[axis]
        ins.append(g.feed(x[1], s))
    if g.chance(0.5):
        g.rng.shuffle(ins)
    shape = list(x[2])
    shape[axis] = total
    g.node(op, ins, [(x[1], tuple(shape))], axis=axis)
    return True


def indices(g: Gen, n, shape, dtype="int64", allow_neg=True):
    """Index data for an axis of length n: valid (negative too) or, 15% of the time, hostile."""
    if n == 0:
        arr = np.zeros(shape, dtype)
    else:
        arr = g.rng.integers(-n if allow_neg else 0, n, size=shape).astype(dtype)
    if arr.size and g.chance(0.15):
        info = np.iinfo(dtype)
        bad = g.choice([n, -n - 1, n + 3] + [h for h in HOSTILE if info.min <= h <= info.max]
                       + [int(info.min), int(info.max)])
        arr.flat[int(g.rng.integers(arr.size))] = bad
    return arr


def b_gather(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0, fresh_dtype="float32", fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    axis = int(g.rng.integers(-r, r))
    ishape = g.shape(int(g.rng.integers(0, 3)))
    dt = g.choice(["int64", "int64", "int32"])
    idx = g.feed(dt, ishape, indices(g, x[2][axis], ishape, dt), const=g.chance(0.2))
    a = axis % r
    g.node(op, [x[0], idx], [(x[1], x[2][:a] + tuple(ishape) + x[2][a + 1:])], axis=axis)
    return True


def b_gather_elements(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0, fresh_dtype="float32", fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    axis = int(g.rng.integers(-r, r))
    ishape = tuple(int(g.rng.integers(0, d + 1)) if i != axis % r else g.dim() for i, d in enumerate(x[2]))
    dt = g.choice(["int64", "int32"])
    idx = g.feed(dt, ishape, indices(g, x[2][axis], ishape, dt))
    g.node(op, [x[0], idx], [(x[1], ishape)], axis=axis)
    return True


def b_scatter_elements(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0 and v[1] in NUMERIC, fresh_dtype="float32",
               fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    axis = int(g.rng.integers(-r, r))
    a = axis % r
    n = x[2][a]
    red = g.choice(["none", "none", "add", "mul", "max", "min"])
    ishape = tuple(int(g.rng.integers(0, d + 1)) if i != a else int(g.rng.integers(0, n + 1)) for i, d in enumerate(x[2]))
    if red == "none":   # unique indices along the axis (duplicates with none are unspecified)
        perm = g.rng.permutation(n)[:ishape[a]] if n else np.zeros(0, np.int64)
        perm = np.where(g.rng.random(perm.shape) < 0.3, perm - n, perm)
        shp = [1] * r
        shp[a] = ishape[a]
        arr = np.broadcast_to(perm.reshape(shp), ishape).astype(np.int64).copy()
        if arr.size and g.chance(0.15):
            arr.flat[int(g.rng.integers(arr.size))] = g.choice([n, -n - 1] + HOSTILE)
    else:
        arr = indices(g, n, ishape)
    idx = g.feed("int64", ishape, arr)
    upd = g.feed(x[1], ishape)
    g.node(op, [x[0], idx, upd], [(x[1], x[2])], axis=axis, reduction=None if red == "none" and g.chance(0.5) else red)
    return True


def b_where(g: Gen, op):
    c = g.pick(lambda v: v[1] == "bool", fresh_dtype="bool")
    x = g.pick(lambda v: v[1] != "bool" and _bcastable(v[2], c[2]), fresh_dtype="float32", fresh_shape=g.bcast_shape(c[2]))
    ys = g.bcast_shape(broadcast(c[2], x[2]))
    y = g.feed(x[1], ys)
    ins = [c[0], x[0], y] if g.chance(0.5) else [c[0], y, x[0]]
    g.node(op, ins, [(x[1], broadcast(broadcast(c[2], x[2]), ys))])
    return True


ONNX_DT = {"float32": 1, "uint8": 2, "int8": 3, "int32": 6, "int64": 7, "bool": 9, "float16": 10, "float64": 11}


def b_cast(g: Gen, op):
    x = g.pick(lambda v: True, fresh_dtype="float32")
    to = g.choice(list(ONNX_DT))
    g.node(op, [x[0]], [(to, x[2])], to=ONNX_DT[to])
    return True


def b_matmul(g: Gen, op):
    dts = ["float32", "float16", "float64", "int32", "int64"]
    a = g.pick(lambda v: v[1] in dts and len(v[2]) > 0, fresh_dtype=g.choice(dts),
               fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    k = a[2][-1]
    nn = g.dim()
    bshape = (k,) if g.chance(0.2) else (k, nn)
    if len(bshape) == 2 and len(a[2]) >= 3 and g.chance(0.3):
        bshape = (a[2][-3],) + bshape
    arr = g.data(a[1], bshape, -3, 3)
    b = g.feed(a[1], bshape, arr, const=g.chance(0.3))
    if len(a[2]) == 1 and len(bshape) == 1:
        out = ()
    elif len(a[2]) == 1:
        out = bshape[:-2] + (bshape[-1],)
    elif len(bshape) == 1:
        out = a[2][:-1]
    else:
        out = broadcast(a[2][:-2], bshape[:-2]) + (a[2][-2], bshape[-1])
    ins = [a[0], b]
    g.node(op, ins, [(a[1], out)])
    return True


def b_layernorm(g: Gen, op):
    x = g.pick(lambda v: v[1] in ("float32", "float16", "float64") and len(v[2]) > 0, fresh_dtype="float32",
               fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    axis = int(g.rng.integers(-r, r))
    nshape = x[2][axis % r:]
    ins = [x[0], g.feed(x[1], nshape, const=g.chance(0.5))]
    if g.chance(0.6):
        ins.append(g.feed(x[1], nshape, const=g.chance(0.5)))
    g.node(op, ins, [(x[1], x[2])], axis=axis, epsilon=float(g.choice([1e-5, 1e-3, 0.1])))
    return True


def b_clip(g: Gen, op):
    x = g.dtype_value(["float32", "float16", "float64", "int32", "int64"])
    lo, hi = sorted(g.data(x[1], (2,)).tolist())
    if g.chance(0.1):
        lo, hi = hi, lo
    ins = [x[0], g.const(np.array(lo, x[1]), x[1]) if g.chance(0.7) else ""]
    if g.chance(0.7):
        ins.append(g.const(np.array(hi, x[1]), x[1]))
    while ins and ins[-1] == "":
        ins.pop()
    g.node(op, ins, [(x[1], x[2])])
    return True


def b_expand(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) < 4, fresh_dtype="float32")
    target = [d if g.chance(0.5) else (g.dim() if d == 1 else 1) for d in x[2]]
    target = [g.dim() for _ in range(int(g.rng.integers(0, 2)))] + target
    g.node(op, [x[0], g.const(np.array(target, np.int64))], [(x[1], broadcast(x[2], target))])
    return True


def b_tile(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0, fresh_dtype="float32", fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    reps = [int(g.rng.integers(0, 4)) if g.chance(0.2) else int(g.rng.integers(1, 3)) for _ in x[2]]
    g.node(op, [x[0], g.const(np.array(reps, np.int64))], [(x[1], tuple(d * k for d, k in zip(x[2], reps)))])
    return True


def b_trilu(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) >= 2, fresh_dtype="float32", fresh_shape=g.shape(int(g.rng.integers(2, 4))))
    ins = [x[0]]
    if g.chance(0.6):
        ins.append(g.const(np.array(int(g.rng.integers(-4, 5)), np.int64)))
    g.node(op, ins, [(x[1], x[2])], upper=int(g.rng.integers(0, 2)))
    return True


BUILDERS = {op: b_unary for op in UNARY}
BUILDERS.update({op: b_binary for op in BINARY})
BUILDERS.update({"Max": b_variadic, "Min": b_variadic, "Sum": b_variadic, "Mean": b_variadic})
BUILDERS.update({op: b_reduce for op in REDUCE})
BUILDERS.update({"ArgMax": b_argmax, "ArgMin": b_argmax, "Softmax": b_softmax, "LogSoftmax": b_softmax,
                 "CumSum": b_cumsum, "Reshape": b_reshape, "Transpose": b_transpose, "Flatten": b_flatten,
                 "Squeeze": b_squeeze, "Unsqueeze": b_unsqueeze, "Slice": b_slice, "Concat": b_concat,
                 "Gather": b_gather, "GatherElements": b_gather_elements, "ScatterElements": b_scatter_elements,
                 "Where": b_where, "Cast": b_cast, "MatMul": b_matmul, "LayerNormalization": b_layernorm,
                 "Clip": b_clip, "Expand": b_expand, "Tile": b_tile, "Trilu": b_trilu})
OPS = sorted(BUILDERS)


POOLS = ("core", "data", "attrs")


def _pool(name):
    """(op names, {op: builder}) of a pool: "core" (the ops above) or "data" (gen_data.py: ops that
    read an index, size or shape from a tensor, with a mix of core ops to consume their outputs)."""
    if name == "core":
        return OPS, BUILDERS
    if name == "attrs":
        import gen_attrs
        return sorted(gen_attrs.BUILDERS), gen_attrs.BUILDERS
    import gen_data
    builders = dict(gen_data.DATA_BUILDERS)
    builders.update({op: BUILDERS[op] for op in gen_data.CORE_MIX if op not in builders})
    ops = sorted(gen_data.DATA_BUILDERS) * 2 + sorted(gen_data.CORE_MIX)   # data ops drawn twice as often
    return ops, builders


def generate(seed: int, pool: str = "core") -> dict:
    ops, builders = _pool(pool)
    g = Gen(seed)
    first = list(DTYPE_WEIGHTS)
    w = np.array([DTYPE_WEIGHTS[d] for d in first])
    for _ in range(int(g.rng.integers(1, 3))):
        g.feed(first[int(g.rng.choice(len(first), p=w / w.sum()))], g.shape())
    n_nodes = int(g.rng.integers(1, 9))
    tries = 0
    while len(g.nodes) < n_nodes and tries < 50:
        tries += 1
        op = g.choice(ops)
        builders[op](g, op)
    used = {i for nd in g.nodes for i in nd["inputs"]}
    produced = [(o, g.out_dtypes[o]) for nd in g.nodes for o in nd["outputs"]]
    outputs = [{"name": o, "dtype": dt} for o, dt in produced if o not in used]
    if g.nodes and g.nodes[-1]["outputs"][0] not in [o["name"] for o in outputs]:
        o = g.nodes[-1]["outputs"][0]
        outputs.append({"name": o, "dtype": next(dt for nm, dt in produced if nm == o)})
    inputs = [i for i in g.inputs if i["name"] in used]   # a fresh input nothing consumed is dropped
    spec = {"seed": seed, "opset": OPSET, "inputs": inputs, "inits": g.inits, "nodes": g.nodes, "outputs": outputs}
    if pool != "core":   # contrib nodes' outputs are typed here: ONNX's shape inference does not know them
        spec["pool"] = pool
        spec["dtypes"] = {nm: dt for nm, dt in g.out_dtypes.items() if dt != "seq"}
    return spec
