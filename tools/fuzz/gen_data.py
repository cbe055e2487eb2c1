"""The fuzz generator's "data" pool: ops that read an index, position, count, size or shape from a
tensor (gen.generate(seed, pool="data")). Each such tensor is a graph input three times in four (an
initializer otherwise), and a graph input carries a second value, "alt": the harness runs the EP on
the first value (eager, then the compiled trace), then on alt (the trace replayed with other data,
often hostile: past either end, negative, INT64_MIN/MAX, 2^40, a zero step), then on the first
again, and compares every Run with ORT's CPU EP on the same value. This is the path where a value
read at Run must be checked again: a trace built on benign data replayed on hostile data. Where alt
is not hostile, index-like tensors get another valid value, not the same one, so a replay that
kept the first values (a runtime input folded into the trace) shows as a mismatch.

Huge sizes are 2^40 and above: ORT's CPU EP must refuse them at allocation (a size it could
allocate but not fill, tens of GiB, would take the machine's memory rather than fail)."""
from __future__ import annotations

import numpy as np

from gen import FLOATS, HOSTILE, Gen, broadcast

HUGE = [2**40, 2**62, 2**63 - 1]


def size_feed(g: Gen, arr, alt, dtype="int64", const_p=0.25):
    """A tensor of indices or sizes: an initializer (const_p of the time) or a graph input whose
    second value is alt. It is not offered to later nodes as data."""
    arr = np.asarray(arr, dtype=dtype)
    if g.chance(const_p):
        return g.const(arr, dtype)
    name = g.name("i")
    alt = np.asarray(alt, dtype=dtype).reshape(arr.shape)
    g.inputs.append({"name": name, "dtype": str(arr.dtype), "shape": list(arr.shape), "data": arr.ravel().tolist(),
                     "alt": alt.ravel().tolist()})
    return name


def spoil(g: Gen, arr, bad, p=0.6):
    """A copy of arr with one element set to one of `bad` (p of the time; arr itself otherwise)."""
    out = np.array(arr, copy=True)
    if out.size and g.chance(p):
        info = np.iinfo(out.dtype)
        choices = [b for b in bad if info.min <= b <= info.max]
        if choices:
            out.flat[int(g.rng.integers(out.size))] = g.choice(choices)
    return out


def valid_indices(g: Gen, n, shape, dtype="int64", allow_neg=True):
    if n == 0:
        return np.zeros(shape, dtype)
    return g.rng.integers(-n if allow_neg else 0, n, size=shape).astype(dtype)


def index_bad(n):
    return [n, -n - 1, n + 3] + HOSTILE + [-(2**31), 2**31 - 1]


def float_data(g: Gen, shape=None, rank_lo=1, rank_hi=4):
    return g.pick(lambda v: v[1] == "float32" and len(v[2]) >= rank_lo and len(v[2]) < rank_hi, fresh_dtype="float32",
                  fresh_shape=shape or g.shape(int(g.rng.integers(rank_lo, rank_hi))))


# ---- builders ---------------------------------------------------------------------------------------

def b_gather_nd(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0 and v[1] != "bool", fresh_dtype="float32",
               fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    b = int(g.rng.integers(0, 2)) if r >= 2 else 0
    k = int(g.rng.integers(1, r - b + 1))
    mid = g.shape(int(g.rng.integers(0, 2)))
    lead = tuple(x[2][:b]) + mid
    def draw():
        return np.stack([valid_indices(g, x[2][b + j], lead) for j in range(k)], axis=-1).astype(np.int64)
    arr = draw()
    idx = size_feed(g, arr, spoil(g, draw(), index_bad(max(x[2][b:b + k]))))
    g.node(op, [x[0], idx], [(x[1], lead + tuple(x[2][b + k:]))], batch_dims=b)
    return True


def b_scatter_nd(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0 and v[1] in ("float32", "float64", "int32", "int64"), fresh_dtype="float32",
               fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    k = int(g.rng.integers(1, r + 1))
    lead = x[2][:k]
    cells = int(np.prod(lead))
    red = g.choice(["none", "none", "add", "mul", "max", "min"])
    m = int(g.rng.integers(0, min(cells, 4) + 1))

    def draw():
        if red == "none":   # distinct index tuples: duplicates with reduction none are unspecified
            flat = g.rng.permutation(cells)[:m] if cells else np.zeros(0, np.int64)
        else:
            flat = g.rng.integers(0, cells, size=m) if cells else np.zeros(0, np.int64)
        arr = np.stack(np.unravel_index(flat, lead), axis=-1).astype(np.int64) if m else np.zeros((0, k), np.int64)
        return np.where(g.rng.random(arr.shape) < 0.3, arr - np.array(lead, np.int64), arr)   # negative forms
    arr = draw()
    idx = size_feed(g, arr, spoil(g, draw(), index_bad(max(lead))))
    upd = g.feed(x[1], (m,) + tuple(x[2][k:]))
    g.node(op, [x[0], idx, upd], [(x[1], x[2])], reduction=None if red == "none" and g.chance(0.5) else red)
    return True


def b_one_hot(g: Gen, op):
    ishape = g.shape(int(g.rng.integers(1, 3)))   # ORT's shape inference wants rank >= 1
    depth = int(g.rng.integers(1, 6))
    dt = g.choice(["int64", "int32", "float32"])
    arr = g.rng.integers(-depth - 2, depth + 2, size=ishape).astype(dt)
    alt = np.array(arr, copy=True)
    if alt.size and dt != "float32":
        alt = spoil(g, arr, HOSTILE)
    idx = size_feed(g, arr, alt, dt, const_p=0.1)
    dshape = () if g.chance(0.5) else (1,)
    dep = size_feed(g, np.full(dshape, depth), np.full(dshape, g.choice([depth, depth + 1, 0, -1] + HUGE)))
    vdt = g.choice(["float32", "int64"])
    vals = g.const(np.array([0, 1] if g.chance(0.5) else [-2, 3], vdt), vdt)
    r = len(ishape)
    axis = int(g.rng.integers(-r - 1, r + 1))
    a = axis % (r + 1)
    g.node(op, [idx, dep, vals], [(vdt, tuple(ishape[:a]) + (depth,) + tuple(ishape[a:]))], axis=axis)
    return True


def b_pad(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0 and v[1] != "bool", fresh_dtype="float32",
               fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    mode = g.choice(["constant", "constant", "reflect", "edge", "wrap"])
    axes = sorted(g.rng.choice(r, size=int(g.rng.integers(1, r + 1)), replace=False).tolist())
    use_axes = g.chance(0.4)
    if not use_axes:
        axes = list(range(r))
    lo = [int(g.rng.integers(-x[2][a], x[2][a] + 3)) for a in axes]
    hi = [int(g.rng.integers(-x[2][a], x[2][a] + 3)) for a in axes]
    shape = list(x[2])
    for a, p, q in zip(axes, lo, hi):
        shape[a] += p + q
    pads = np.array(lo + hi, np.int64)
    pin = size_feed(g, pads, spoil(g, pads, [-(2**63), 2**63 - 1, 2**40, -(2**40), -100]))
    ins = [x[0], pin]
    if mode == "constant" and g.chance(0.5):
        ins.append(g.const(np.array(g.data(x[1], ()), x[1]), x[1]))
    if use_axes:
        if len(ins) == 2:
            ins.append("")
        ins.append(g.const(np.array([a - r if g.chance(0.3) else a for a in axes], np.int64)))
    g.node(op, ins, [(x[1], tuple(max(d, 0) for d in shape))], mode=mode)
    return True


def b_top_k(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0 and v[1] in ("float32", "int64", "int32"), fresh_dtype="float32",
               fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    axis = int(g.rng.integers(-r, r))
    n = x[2][axis]
    k = int(g.rng.integers(0, n + 1))
    kin = size_feed(g, [k], [g.choice([k, n, n + 1, -1, 0] + HUGE + [-(2**63)])])
    shape = list(x[2])
    shape[axis] = k
    g.node(op, [x[0], kin], [(x[1], tuple(shape)), ("int64", tuple(shape))], axis=axis,
           largest=int(g.rng.integers(0, 2)), sorted=1)
    return True


def _range_count(start, limit, delta):
    if delta == 0:
        return 0
    return max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)


def b_range(g: Gen, op):
    dt = g.choice(["int64", "int32", "float32"])
    start, delta = int(g.rng.integers(-5, 6)), g.choice([1, 2, -1, 3, -2])
    limit = start + delta * int(g.rng.integers(-1, 6))
    n = _range_count(start, limit, delta)
    info = np.iinfo(dt) if dt != "float32" else np.iinfo("int64")
    extremes = [int(info.min), int(info.max), 2**40, -(2**40)]
    alt = [start, limit, delta]
    if g.chance(0.5):
        k = int(g.rng.integers(3))
        alt[k] = 0 if k == 2 else g.choice([v for v in extremes if int(info.min) <= v <= int(info.max)])
    # a count of 2^26 to 2^40 elements would only take the machine's memory and time on both sides
    # (past 2^40 both must refuse at allocation)
    if 2**26 <= _range_count(*alt) < 2**40:
        alt = [start, limit, delta]
    ins = [size_feed(g, np.array(v), np.array(a), dt, const_p=0.3) for v, a in zip((start, limit, delta), alt)]
    g.node(op, ins, [(dt, (n,))])
    return True


def b_constant_of_shape(g: Gen, op):
    shape = g.shape(int(g.rng.integers(0, 4)))
    arr = np.array(shape, np.int64)
    shp = size_feed(g, arr, spoil(g, arr, [-1, -(2**63)] + HUGE) if arr.size else arr)
    attrs = {}
    dt = "float32"
    if g.chance(0.6):
        dt = g.choice(["float32", "int64", "int32", "float16"])
        attrs["value"] = {"tensor": {"dtype": dt, "shape": [1], "data": [g.data(dt, ()).item()]}}
    g.node(op, [shp], [(dt, tuple(shape))], **attrs)
    return True


def b_compress(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0, fresh_dtype="float32", fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    use_axis = g.chance(0.7)
    n = x[2][int(g.rng.integers(r))] if use_axis else int(np.prod(x[2]))
    axis = next(i for i, d in enumerate(x[2]) if d == n) if use_axis else None
    length = int(g.rng.integers(0, n + 1)) if not g.chance(0.1) else n + 1
    cond = g.rng.random(length) < 0.5
    alt = g.rng.random(length) < 0.5
    name = size_feed(g, cond, alt, "bool")
    kept = int(cond[:n].sum())
    shape = (kept,) if axis is None else tuple(kept if i == axis else d for i, d in enumerate(x[2]))
    g.node(op, [x[0], name], [(x[1], shape)], axis=axis if axis is None or g.chance(0.7) else axis - r)
    return True


def b_non_zero(g: Gen, op):
    x = g.pick(lambda v: v[1] != "float16", fresh_dtype=g.choice(["float32", "int64", "bool"]))
    # NonZero's data decides its shape: run it on a fresh input whose alt has another count
    if g.chance(0.5):
        arr = g.data(x[1], x[2])
        if x[1] != "bool":
            arr = np.where(g.rng.random(x[2]) < 0.4, 0, arr).astype(x[1])
        alt = np.where(g.rng.random(x[2]) < 0.5, 0, arr).astype(x[1]) if arr.size else arr
        name = size_feed(g, arr, alt, x[1], const_p=0)
        nnz = int(np.count_nonzero(arr))
        g.node(op, [name], [("int64", (len(x[2]), nnz))])
        return True
    return False


def b_split(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0, fresh_dtype="float32", fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    axis = int(g.rng.integers(-r, r))
    n = x[2][axis]
    parts = int(g.rng.integers(1, 4))
    cuts = sorted(g.rng.integers(0, n + 1, size=parts - 1).tolist())
    sizes = np.diff([0] + cuts + [n]).astype(np.int64)
    sin = size_feed(g, sizes, spoil(g, sizes, [-1, n + 1, 2**40, -(2**63), 2**63 - 1]))
    outs = []
    for s in sizes:
        shape = list(x[2])
        shape[axis] = int(s)
        outs.append((x[1], tuple(shape)))
    g.node(op, [x[0], sin], outs, axis=axis)
    return True


def b_reverse_sequence(g: Gen, op):
    x = float_data(g, rank_lo=2)
    t_axis = int(g.rng.integers(0, 2))
    b_axis = 1 - t_axis
    t, b = x[2][t_axis], x[2][b_axis]
    def draw():
        return g.rng.integers(0 if t == 0 else 1, t + 1, size=b).astype(np.int64)
    lens = draw()
    lin = size_feed(g, lens, spoil(g, draw(), [t + 1, -1, 0, 2**40, -(2**63)]))
    g.node(op, [x[0], lin], [(x[1], x[2])], time_axis=t_axis, batch_axis=b_axis)
    return True


def b_expand_rt(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) < 4, fresh_dtype="float32")
    target = [d if g.chance(0.5) else (g.dim() if d == 1 else 1) for d in x[2]]
    target = [g.dim() for _ in range(int(g.rng.integers(0, 2)))] + target
    arr = np.array(target, np.int64)
    alt = spoil(g, arr, [-1, 2**40, 2**62, -(2**63), 0, 7]) if arr.size else arr
    g.node(op, [x[0], size_feed(g, arr, alt)], [(x[1], broadcast(x[2], target))])
    return True


def b_tile_rt(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0, fresh_dtype="float32", fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    reps = np.array([int(g.rng.integers(0, 3)) for _ in x[2]], np.int64)
    alt = spoil(g, reps, [-1, 2**40, 2**62, -(2**63), 3])
    g.node(op, [x[0], size_feed(g, reps, alt)], [(x[1], tuple(d * int(k) for d, k in zip(x[2], reps)))])
    return True


def b_reshape_rt(g: Gen, op):
    x = g.pick(lambda v: True, fresh_dtype="float32")
    n = int(np.prod(x[2]))
    target = [n] if g.chance(0.5) else [-1]
    if n and n % 2 == 0 and g.chance(0.5):
        target = [2, -1] if g.chance(0.5) else [n // 2, 2]
    dims = [n] if len(target) == 1 else [2, n // 2] if target[0] == 2 else [n // 2, 2]
    arr = np.array(target, np.int64)
    alt = spoil(g, arr, [-1, -2, 0, 2**40, -(2**63), 2**63 - 1, n + 1])
    g.node(op, [x[0], size_feed(g, arr, alt)], [(x[1], tuple(dims))])
    return True


def b_slice_rt(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0, fresh_dtype="float32", fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    a = int(g.rng.integers(r))
    n = x[2][a]
    step = g.choice([1, 1, 2, -1])
    s, e = int(g.rng.integers(-n - 2, n + 3)), int(g.rng.integers(-n - 2, n + 3))
    shape = list(x[2])
    shape[a] = len(range(*slice(s, e, step).indices(n)))
    big = [2**62, -(2**62), 2**63 - 1, -(2**63), 10**9]
    starts = size_feed(g, [s], [g.choice(big + [s])])
    ends = size_feed(g, [e], [g.choice(big + [e])])
    ins = [x[0], starts, ends, g.const(np.array([a], np.int64))]
    if step != 1 or g.chance(0.5):
        ins.append(size_feed(g, [step], [g.choice([step, -step, 2**62, -(2**63)])]))
    g.node(op, ins, [(x[1], tuple(shape))])
    return True


def b_cumsum_rt(g: Gen, op):
    x = g.pick(lambda v: v[1] in ("float32", "float64", "int32", "int64") and len(v[2]) > 0, fresh_dtype="float32",
               fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    ax = int(g.rng.integers(-r, r))
    axin = size_feed(g, np.array(ax), np.array(g.choice([ax, r, -r - 1, 2**40, -(2**63)])))
    g.node(op, [x[0], axin], [(x[1], x[2])], exclusive=int(g.rng.integers(0, 2)), reverse=int(g.rng.integers(0, 2)))
    return True


def b_trilu_rt(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) >= 2, fresh_dtype="float32", fresh_shape=g.shape(int(g.rng.integers(2, 4))))
    k = int(g.rng.integers(-4, 5))
    kin = size_feed(g, np.array(k), np.array(g.choice([k, 2**63 - 1, -(2**63), 2**40, -(2**40)])))
    g.node(op, [x[0], kin], [(x[1], x[2])], upper=int(g.rng.integers(0, 2)))
    return True


def b_max_unpool(g: Gen, op):
    n, c, h, w = (int(g.rng.integers(1, 3)), int(g.rng.integers(1, 3)), int(g.rng.integers(1, 4)), int(g.rng.integers(1, 4)))
    x = g.feed("float32", (n, c, h, w))
    oh, ow = 2 * h, 2 * w
    total = n * c * oh * ow
    # distinct positions (duplicates are unspecified), each inside its own (n, c) plane as MaxPool gives
    def draw():
        arr = np.zeros((n, c, h, w), np.int64)
        for i in range(n):
            for j in range(c):
                arr[i, j] = (i * c + j) * oh * ow + g.rng.permutation(oh * ow)[:h * w].reshape(h, w)
        return arr
    arr = draw()
    idx = size_feed(g, arr, spoil(g, draw(), [total, -1, total + 7, 2**40, -(2**63), 2**63 - 1], p=0.7))
    g.node(op, [x, idx], [("float32", (n, c, oh, ow))], kernel_shape=[2, 2], strides=[2, 2])
    return True


def b_grid_sample(g: Gen, op):
    n, c, h, w = (int(g.rng.integers(1, 3)), int(g.rng.integers(1, 3)), int(g.rng.integers(1, 5)), int(g.rng.integers(1, 5)))
    x = g.feed("float32", (n, c, h, w))
    ho, wo = int(g.rng.integers(1, 4)), int(g.rng.integers(1, 4))
    grid = g.rng.uniform(-1.3, 1.3, (n, ho, wo, 2)).astype(np.float32)
    alt = np.array(grid, copy=True)
    if g.chance(0.7):
        alt.flat[int(g.rng.integers(alt.size))] = g.choice([1e30, -1e30, np.inf, -np.inf, 3e9, -3e9])
    gin = size_feed(g, grid, alt, "float32", const_p=0.1)
    mode = g.choice(["linear", "nearest", "cubic"])
    g.node(op, [x, gin], [("float32", (n, c, ho, wo))], mode=mode,
           padding_mode=g.choice(["zeros", "border", "reflection"]), align_corners=int(g.rng.integers(0, 2)))
    return True


def b_roi_align(g: Gen, op):
    n, c, h, w = (int(g.rng.integers(1, 3)), int(g.rng.integers(1, 3)), int(g.rng.integers(2, 6)), int(g.rng.integers(2, 6)))
    x = g.feed("float32", (n, c, h, w))
    r = int(g.rng.integers(1, 4))
    x1, y1 = g.rng.uniform(-1, w, r), g.rng.uniform(-1, h, r)
    rois = np.stack([x1, y1, x1 + g.rng.uniform(0, w, r), y1 + g.rng.uniform(0, h, r)], axis=1).astype(np.float32)
    ralt = np.array(rois, copy=True)
    if g.chance(0.5):
        ralt.flat[int(g.rng.integers(ralt.size))] = g.choice([1e30, -1e30, 3e9, -3e9, 1e6])
    bidx = g.rng.integers(0, n, size=r).astype(np.int64)
    rin = size_feed(g, rois, ralt, "float32", const_p=0.1)
    bin_ = size_feed(g, bidx, spoil(g, g.rng.integers(0, n, size=r).astype(np.int64), [n, -1, 2**40, -(2**63)]))
    oh, ow = int(g.rng.integers(1, 4)), int(g.rng.integers(1, 4))
    g.node(op, [x, rin, bin_], [("float32", (r, c, oh, ow))], output_height=oh, output_width=ow,
           sampling_ratio=int(g.rng.integers(0, 3)), mode=g.choice(["avg", "max"]),
           coordinate_transformation_mode=g.choice(["half_pixel", "output_half_pixel"]),
           spatial_scale=float(g.choice([1.0, 0.5])))
    return True


def b_gather_rt(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0, fresh_dtype="float32", fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    r = len(x[2])
    axis = int(g.rng.integers(-r, r))
    a = axis % r
    dt = g.choice(["int64", "int32"])
    if op == "GatherElements":
        ishape = tuple(int(g.rng.integers(0, d + 1)) if i != a else g.dim() for i, d in enumerate(x[2]))
        out = ishape
    else:
        ishape = g.shape(int(g.rng.integers(0, 3)))
        out = x[2][:a] + tuple(ishape) + x[2][a + 1:]
    arr = valid_indices(g, x[2][a], ishape, dt)
    idx = size_feed(g, arr, spoil(g, valid_indices(g, x[2][a], ishape, dt), index_bad(x[2][a])), dt)
    g.node(op, [x[0], idx], [(x[1], out)], axis=axis)
    return True


def b_resize(g: Gen, op):
    x = float_data(g, rank_lo=1, rank_hi=5)
    r = len(x[2])
    if g.chance(0.5):   # sizes
        sizes = np.array([d if g.chance(0.5) else int(g.rng.integers(0, 7)) for d in x[2]], np.int64)
        alt = spoil(g, sizes, [-1, 0, 2**40, 2**62, -(2**63)])
        ins = [x[0], "", "", size_feed(g, sizes, alt)]
        out = tuple(int(v) for v in sizes)
    else:               # scales
        scales = np.array([1.0 if g.chance(0.5) else float(g.choice([0.5, 2.0, 1.5, 3.0])) for _ in x[2]], np.float32)
        alt = np.array(scales, copy=True)
        if g.chance(0.6):
            alt[int(g.rng.integers(r))] = g.choice([0.0, -1.0, 1e12, np.inf, np.nan, 1e-30])
        ins = [x[0], "", size_feed(g, scales, alt, "float32")]
        out = tuple(int(np.floor(d * sc)) for d, sc in zip(x[2], scales))
    mode = g.choice(["nearest", "linear", "cubic"])
    g.node(op, ins, [(x[1], out)], mode=mode)
    return True


def b_center_crop_pad(g: Gen, op):
    x = g.pick(lambda v: len(v[2]) > 0, fresh_dtype="float32", fresh_shape=g.shape(int(g.rng.integers(1, 4))))
    shape = np.array([int(g.rng.integers(0, d + 3)) for d in x[2]], np.int64)
    alt = spoil(g, shape, [-1, 2**40, -(2**63), 2**62])
    g.node(op, [x[0], size_feed(g, shape, alt)], [(x[1], tuple(int(v) for v in shape))])
    return True


def b_window(g: Gen, op):
    n = int(g.rng.integers(0, 9))
    dt = g.choice(["int64", "int32"])
    # int32 holds no size past memory that is not also one both sides would fill (2^31 - 1 floats)
    size = size_feed(g, np.array(n), np.array(g.choice([n, 0, -1, -(2**31) if dt == "int32" else 2**40])), dt)
    g.node(op, [size], [("float32", (n,))], periodic=int(g.rng.integers(0, 2)))
    return True


def b_dft(g: Gen, op):
    b, n = int(g.rng.integers(1, 3)), int(g.rng.integers(1, 7))
    x = g.feed("float32", (b, n, g.choice([1, 2])))
    length = int(g.rng.integers(1, 9))
    lin = size_feed(g, np.array(length), np.array(g.choice([length, 0, -1, 2**40, -(2**63)])))
    inverse = int(g.rng.integers(0, 2))
    onesided = int(g.rng.integers(0, 2)) if not inverse else 0
    cols = length // 2 + 1 if onesided else length
    g.node(op, [x, lin, g.const(np.array(1, np.int64))], [("float32", (b, cols, 2))], inverse=inverse, onesided=onesided)
    return True


def b_col2im(g: Gen, op):
    n, c = int(g.rng.integers(1, 3)), int(g.rng.integers(1, 3))
    kh, kw = int(g.rng.integers(1, 3)), int(g.rng.integers(1, 3))
    h, w = int(g.rng.integers(kh, kh + 4)), int(g.rng.integers(kw, kw + 4))
    blocks = (h - kh + 1) * (w - kw + 1)
    x = g.feed("float32", (n, c * kh * kw, blocks))
    image = np.array([h, w], np.int64)
    block = np.array([kh, kw], np.int64)
    ialt = spoil(g, image, [0, -1, 2**40, -(2**63), h + 5])
    balt = spoil(g, block, [0, -1, 2**40, -(2**63)], p=0.3)
    g.node(op, [x, size_feed(g, image, ialt), size_feed(g, block, balt)], [("float32", (n, c, h, w))])
    return True


def b_nms(g: Gen, op):
    b, cl, n = int(g.rng.integers(1, 3)), int(g.rng.integers(1, 3)), int(g.rng.integers(0, 6))
    boxes = g.rng.uniform(-2, 10, (b, n, 4)).astype(np.float32)
    balt = np.array(boxes, copy=True)
    if balt.size and g.chance(0.5):
        balt.flat[int(g.rng.integers(balt.size))] = g.choice([np.inf, -np.inf, np.nan, 1e30])
    scores = g.rng.random((b, cl, n)).astype(np.float32)
    k = int(g.rng.integers(0, 5))
    ins = [size_feed(g, boxes, balt, "float32", const_p=0.1), g.feed("float32", scores.shape, scores),
           size_feed(g, np.array([k]), np.array([g.choice([k, -1, 2**40, 2**63 - 1, -(2**63)])]))]
    if g.chance(0.7):
        ins.append(g.const(np.array([float(g.choice([0.0, 0.3, 0.7]))], np.float32), "float32"))
    # its output's row count depends on the data: declared only by rank
    g.node(op, ins, [("int64", (0, 3))], center_point_box=int(g.rng.integers(0, 2)))
    g.values.pop()   # the declared shape is not the real one: nothing consumes it
    return True


def b_affine_grid(g: Gen, op):
    n, h, w = int(g.rng.integers(1, 3)), int(g.rng.integers(1, 5)), int(g.rng.integers(1, 5))
    theta = g.feed("float32", (n, 2, 3))
    size = np.array([n, 1, h, w], np.int64)
    alt = spoil(g, size, [-1, 0, 2**40, -(2**63), n + 1])
    g.node(op, [theta, size_feed(g, size, alt)], [("float32", (n, h, w, 2))], align_corners=int(g.rng.integers(0, 2)))
    return True


def b_gather_block_quantized(g: Gen, op):
    rows, blocks = int(g.rng.integers(1, 6)), int(g.rng.integers(1, 3))
    bs = 16
    data = g.feed("uint8", (rows, blocks * bs // 2), g.rng.integers(0, 256, (rows, blocks * bs // 2)).astype(np.uint8))
    scales = g.feed("float32", (rows, blocks), g.rng.uniform(0.1, 2, (rows, blocks)).astype(np.float32))
    ishape = g.shape(int(g.rng.integers(1, 3)))
    dt = g.choice(["int64", "int32"])
    arr = valid_indices(g, rows, ishape, dt)
    idx = size_feed(g, arr, spoil(g, valid_indices(g, rows, ishape, dt), index_bad(rows)), dt)
    g.node(op, [data, idx, scales], [("float32", tuple(ishape) + (blocks * bs,))], domain="com.microsoft",
           block_size=bs, gather_axis=0, quantize_axis=1)
    return True


def _sequence(g: Gen):
    """A sequence built inside the graph (SplitToSequence along axis 0, split sizes read at Run):
    (name, the parts' shapes). The sequence is not offered to other builders."""
    x = g.pick(lambda v: len(v[2]) > 0 and v[2][0] > 0 and v[1] != "bool", fresh_dtype="float32",
               fresh_shape=(int(g.rng.integers(1, 5)),) + g.shape(int(g.rng.integers(0, 2))))
    n = x[2][0]
    parts = int(g.rng.integers(1, 4))
    cuts = sorted(g.rng.integers(0, n + 1, size=parts - 1).tolist())
    sizes = np.diff([0] + cuts + [n]).astype(np.int64)
    sin = size_feed(g, sizes, spoil(g, sizes, [-1, n + 1, 2**40, -(2**63)], p=0.3))
    (seq,) = g.node("SplitToSequence", [x[0], sin], [("seq", ())], axis=0)
    g.values.pop()
    return seq, x[1], [(int(k),) + tuple(x[2][1:]) for k in sizes], x[2]


def _position(g: Gen, n, insert=False):
    lo, hi = -n, n if insert else n - 1
    pos = int(g.rng.integers(lo, hi + 1)) if hi >= lo else 0
    other = int(g.rng.integers(lo, hi + 1)) if hi >= lo else 0   # another valid position
    bad = [hi + 1, lo - 1, 2**40, -(2**63), 2**63 - 1]
    return size_feed(g, np.array(pos), np.array(g.choice(bad) if g.chance(0.6) else other), const_p=0.2), pos


def b_sequence_at(g: Gen, op):
    seq, dt, shapes, _ = _sequence(g)
    pin, pos = _position(g, len(shapes))
    g.node(op, [seq, pin], [(dt, shapes[pos])])
    return True


def b_sequence_erase(g: Gen, op):
    seq, dt, shapes, _ = _sequence(g)
    pin, _ = _position(g, len(shapes))
    (erased,) = g.node(op, [seq, pin], [("seq", ())])
    g.values.pop()
    g.node("SequenceLength", [erased], [("int64", ())])
    return True


def b_sequence_insert(g: Gen, op):
    seq, dt, shapes, xshape = _sequence(g)
    part = g.feed(dt, shapes[0])
    pin, _ = _position(g, len(shapes), insert=True)
    (grown,) = g.node(op, [seq, part, pin], [("seq", ())])
    g.values.pop()
    out = (xshape[0] + shapes[0][0],) + tuple(xshape[1:])
    g.node("ConcatFromSequence", [grown], [(dt, out)], axis=0)
    return True


def b_ms_rotary(g: Gen, op):
    """com.microsoft RotaryEmbedding: position_ids [B, S], or one start offset, read at Run."""
    b, sq, heads, half = (int(g.rng.integers(1, 3)), int(g.rng.integers(1, 5)), int(g.rng.integers(1, 3)),
                          int(g.rng.integers(1, 5)))
    max_pos = int(g.rng.integers(sq, 17))
    x = g.feed("float32", (b, sq, heads * 2 * half))
    ang = np.arange(max_pos)[:, None] * (0.3 + np.arange(half))[None, :]
    cos, sin = g.const(np.cos(ang), "float32"), g.const(np.sin(ang), "float32")
    bad = [max_pos, -1, 2**40, -(2**63), 2**63 - 1]
    if g.chance(0.7):
        def draw():
            return g.rng.integers(0, max_pos, size=(b, sq)).astype(np.int64)
    else:   # one start offset: positions offset .. offset + S - 1
        def draw():
            return np.array([int(g.rng.integers(0, max_pos - sq + 1))], np.int64)
    pos = draw()
    pin = size_feed(g, pos, spoil(g, draw(), bad), const_p=0.1)
    g.node(op, [x, pin, cos, sin], [("float32", (b, sq, heads * 2 * half))], domain="com.microsoft",
           interleaved=int(g.rng.integers(0, 2)), num_heads=heads)
    return True


def b_gqa(g: Gen, op):
    """com.microsoft GroupQueryAttention after a past of P rows: seqlens_k (each batch's length - 1)
    and total_sequence_length read at Run; another valid pattern of lengths, or a hostile one."""
    b, kv = int(g.rng.integers(1, 3)), int(g.rng.integers(1, 3))
    rotary = g.rng.random() < 0.5   # ORT's rotary takes head sizes of a multiple of 16
    heads, h, past, sq = kv * int(g.rng.integers(1, 3)), 16 if rotary else 8, int(g.rng.integers(1, 6)), int(g.rng.integers(1, 3))
    total = past + sq
    q = g.feed("float32", (b, sq, heads * h))
    k, v = g.feed("float32", (b, sq, kv * h)), g.feed("float32", (b, sq, kv * h))
    pk, pv = g.feed("float32", (b, kv, past, h)), g.feed("float32", (b, kv, past, h))

    def draw():   # each batch's past may be shorter than the buffer: seqlens_k in [S - 1, total - 1]
        return g.rng.integers(sq - 1, total, size=b).astype(np.int32)
    lens = draw()
    sin_ = size_feed(g, lens, spoil(g, draw(), [total, -1, 2**31 - 1, -(2**31)]), "int32", const_p=0)
    tin = size_feed(g, np.array(total), np.array(g.choice([total, total, 0, -1, total + 1])), "int32", const_p=0.2)
    ins, attrs = [q, k, v, pk, pv, sin_, tin], {"num_heads": heads, "kv_num_heads": kv}
    if rotary:   # from caches of fewer or more rows than the positions reach
        rows, half = int(g.rng.integers(1, total + 3)), h // 2   # ORT's: a multiple of 8 up to h / 2
        ins += [g.const(np.cos(np.arange(rows * half, dtype=np.float32) * 0.1).reshape(rows, half), "float32"),
                g.const(np.sin(np.arange(rows * half, dtype=np.float32) * 0.1).reshape(rows, half), "float32")]
        attrs.update(do_rotary=1, rotary_interleaved=int(g.rng.integers(0, 2)))
    if g.rng.random() < 0.3:
        attrs["local_window_size"] = int(g.rng.integers(1, total + 1))
    if g.rng.random() < 0.2:
        attrs["softcap"] = float(g.choice([0.5, 2.0, 30.0]))
    g.node(op, ins, [("float32", (b, sq, heads * h)), ("float32", (b, kv, total, h)),
                     ("float32", (b, kv, total, h))], domain="com.microsoft", **attrs)
    return True


DATA_BUILDERS = {
    "GatherND": b_gather_nd, "ScatterND": b_scatter_nd, "OneHot": b_one_hot, "Pad": b_pad, "TopK": b_top_k,
    "Range": b_range, "ConstantOfShape": b_constant_of_shape, "Compress": b_compress, "NonZero": b_non_zero,
    "Split": b_split, "ReverseSequence": b_reverse_sequence, "Expand": b_expand_rt, "Tile": b_tile_rt,
    "Reshape": b_reshape_rt, "Slice": b_slice_rt, "CumSum": b_cumsum_rt, "Trilu": b_trilu_rt,
    "MaxUnpool": b_max_unpool, "GridSample": b_grid_sample, "RoiAlign": b_roi_align, "Gather": b_gather_rt,
    "GatherElements": b_gather_rt, "Resize": b_resize, "CenterCropPad": b_center_crop_pad, "HannWindow": b_window,
    "BlackmanWindow": b_window, "DFT": b_dft, "Col2Im": b_col2im, "NonMaxSuppression": b_nms,
    "AffineGrid": b_affine_grid, "GatherBlockQuantized": b_gather_block_quantized, "SequenceAt": b_sequence_at,
    "SequenceErase": b_sequence_erase, "SequenceInsert": b_sequence_insert, "RotaryEmbedding": b_ms_rotary,
    "GroupQueryAttention": b_gqa,
}
# core ops that consume what the data ops give (arithmetic, casts, reductions, joins)
CORE_MIX = ["Add", "Mul", "Neg", "Relu", "Cast", "ReduceSum", "ReduceMax", "Concat", "Where", "MatMul", "Transpose",
            "Unsqueeze", "Equal", "Less"]
