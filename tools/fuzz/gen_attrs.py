"""The fuzz generator's "attrs" pool: a hostile model file. Nodes whose attributes (axes, perms,
kernels, strides, pads, dilations, groups, block sizes, counts, dtypes) are drawn from the edges of
int64 some of the time: 0, -1, 2^31, 2^62, INT64_MIN/MAX. The EP must decline such a node, refuse
the Run, or answer as ORT does; never overflow (`make sanitize`-style runs put UBSan on it). ORT
itself may fail on such a model in ways of its own, so the harness takes ORT's answers from a child
process for this pool (harness.run_spec). Each node stands alone: its output is a graph output and
is offered to no later node (its shape is what the attributes make it, which may be nothing)."""
from __future__ import annotations

import numpy as np

from gen import Gen

EDGES = [0, -1, 1, 2**31 - 1, 2**31, 2**32 + 1, 2**62, -(2**62), -(2**63), 2**63 - 1]


def pick(g: Gen, normal):
    """normal (an int, or a callable giving one) most of the time, an edge of int64 otherwise."""
    if g.chance(0.35):
        return g.choice(EDGES)
    return normal() if callable(normal) else normal


def picks(g: Gen, normals):
    return [pick(g, v) for v in normals]


def emit(g: Gen, op, ins, dtype, **attrs):
    """A node whose only output is a graph output (shape unknown to the generator)."""
    g.node(op, ins, [(dtype, ())], **attrs)
    g.values.pop()
    return True


def image(g: Gen, rank):
    n, c = int(g.rng.integers(1, 3)), int(g.rng.integers(1, 4))
    return g.feed("float32", (n, c) + tuple(int(g.rng.integers(2, 7)) for _ in range(rank - 2))), c


def b_conv(g: Gen, op):
    rank = int(g.rng.integers(3, 5))
    x, c = image(g, rank)
    nsp = rank - 2
    group = pick(g, 1)
    k = [int(g.rng.integers(1, 3)) for _ in range(nsp)]
    cin = c // group if isinstance(group, int) and group > 0 and c % group == 0 else c
    w = g.feed("float32", (2, cin) + tuple(k))
    attrs = {"group": group, "strides": picks(g, [1] * nsp), "dilations": picks(g, [1] * nsp),
             "pads": picks(g, [0] * (2 * nsp))}
    if op == "ConvTranspose":
        attrs["output_padding"] = picks(g, [0] * nsp)
    return emit(g, op, [x, w], "float32", **{k2: v for k2, v in attrs.items() if g.chance(0.7)})


def b_pool(g: Gen, op):
    rank = int(g.rng.integers(3, 5))
    x, _ = image(g, rank)
    nsp = rank - 2
    attrs = {"kernel_shape": picks(g, [2] * nsp), "strides": picks(g, [1] * nsp), "pads": picks(g, [0] * (2 * nsp))}
    if op == "MaxPool" and g.chance(0.5):
        attrs["dilations"] = picks(g, [1] * nsp)
    if op == "LpPool":
        attrs["p"] = pick(g, 2)
    if g.chance(0.3):
        attrs["auto_pad"] = g.choice(["SAME_UPPER", "SAME_LOWER", "VALID"])
        attrs.pop("pads")
    return emit(g, op, [x], "float32", **attrs)


def b_blocks(g: Gen, op):
    x = g.feed("float32", (1, 8, 4, 4))
    # no blocksize whose square wraps int64 (2^32 and up): ONNX's shape inference divides by it, and
    # SIGFPE takes ORT's process, the EP's session with it
    return emit(g, op, [x], "float32", blocksize=g.choice([2, 2, 0, -1, 3, 46341, 2**31 - 1, -(2**63)]))


def b_axis(g: Gen, op):
    """Ops whose axis attribute is model data."""
    rank = int(g.rng.integers(1, 4))
    x = g.feed("float32", tuple(int(g.rng.integers(1, 4)) for _ in range(rank)))
    axis = pick(g, lambda: int(g.rng.integers(-rank, rank)))
    ins = [x]
    if op == "Gather":
        ins.append(g.const(np.array([0], np.int64)))
    if op == "Concat":
        ins.append(x)
    if op == "Split":   # num_outputs stays small: ORT's own shape inference builds that many outputs
        return emit(g, op, ins, "float32", axis=axis, num_outputs=g.choice([2, 2, 0, -1, 3, 5]))
    if op in ("ArgMax", "ArgMin"):
        g.node(op, ins, [("int64", ())], axis=axis, keepdims=pick(g, 1))
        g.values.pop()
        return True
    return emit(g, op, ins, "float32", axis=axis)


def b_transpose(g: Gen, op):
    rank = int(g.rng.integers(1, 4))
    x = g.feed("float32", tuple(int(g.rng.integers(1, 4)) for _ in range(rank)))
    perm = [int(p) for p in g.rng.permutation(rank)]
    if g.chance(0.4):
        perm[int(g.rng.integers(rank))] = g.choice(EDGES)
    return emit(g, op, [x], "float32", perm=perm)


def b_lrn(g: Gen, op):
    x, _ = image(g, 4)
    return emit(g, op, [x], "float32", size=pick(g, 3))


def b_eye_like(g: Gen, op):
    x = g.feed("float32", (int(g.rng.integers(1, 5)), int(g.rng.integers(1, 5))))
    return emit(g, op, [x], "float32", k=pick(g, 0))


def b_one_hot_axis(g: Gen, op):
    idx = g.feed("int64", (3,), np.array([0, 1, 2]))
    return emit(g, op, [idx, g.const(np.array(4, np.int64)), g.const(np.array([0.0, 1.0], np.float32), "float32")],
                "float32", axis=pick(g, -1))


def b_shape(g: Gen, op):
    x = g.feed("float32", (2, 3, 4))
    return emit(g, op, [x], "int64", start=pick(g, 0), end=pick(g, 3))


def b_group_norm(g: Gen, op):
    x = g.feed("float32", (1, 4, 3))
    return emit(g, op, [x, g.const(np.ones(4, np.float32), "float32"), g.const(np.zeros(4, np.float32), "float32")],
                "float32", num_groups=pick(g, 2))


def b_cast(g: Gen, op):
    x = g.feed("float32", (3,))
    return emit(g, op, [x], "float32", to=pick(g, 1))


def b_eye_free_trilu(g: Gen, op):
    x = g.feed("float32", (3, 3))
    return emit(g, op, [x, g.const(np.array(pick(g, 0), np.int64))], "float32", upper=pick(g, 1))


def b_reduce(g: Gen, op):
    x = g.feed("float32", (2, 3))
    return emit(g, op, [x, g.const(np.array([pick(g, 1)], np.int64))], "float32", keepdims=pick(g, 1))


def b_depth(g: Gen, op):
    x = g.feed("float32", (2, 3, 4))
    return emit(g, op, [x, g.const(np.ones(4, np.float32), "float32")], "float32", axis=pick(g, -1),
                epsilon=float(g.choice([1e-5, 0.0, -1.0, 1e30])))


def b_unique(g: Gen, op):
    x = g.feed("float32", (2, 3))
    g.node(op, [x], [("float32", ()), ("int64", ()), ("int64", ()), ("int64", ())], axis=pick(g, 0),
           sorted=pick(g, 1))
    for _ in range(4):
        g.values.pop()
    return True


BUILDERS = {
    "Conv": b_conv, "ConvTranspose": b_conv, "MaxPool": b_pool, "AveragePool": b_pool, "LpPool": b_pool,
    "DepthToSpace": b_blocks, "SpaceToDepth": b_blocks, "Softmax": b_axis, "LogSoftmax": b_axis, "Flatten": b_axis,
    "Gather": b_axis, "Concat": b_axis, "Split": b_axis, "ArgMax": b_axis, "ArgMin": b_axis, "CumSum": None,
    "Transpose": b_transpose, "LRN": b_lrn, "EyeLike": b_eye_like, "OneHot": b_one_hot_axis, "Shape": b_shape,
    "GroupNormalization": b_group_norm, "Cast": b_cast, "Trilu": b_eye_free_trilu, "ReduceSum": b_reduce,
    "LayerNormalization": b_depth, "Unique": b_unique,
}
BUILDERS = {k: v for k, v in BUILDERS.items() if v is not None}
