"""The same computation as an ONNX model, written directly against MLX (Python mlx.core).

`MlxReference(model_bytes)` walks the graph once per call and issues one mx op per ONNX node,
with weights uploaded once as evaluated mx arrays, shape arithmetic done in Python, and one
mx.eval per call: what a person porting the model to MLX by hand would write, and so the
ceiling for any MLX execution provider. The graph is read once at load into plain Python tuples
(names, attributes): a call touches no protobuf, which would add ~10 us per node that a
hand-written port does not pay. Only the ops the benchmark workloads use are covered.

Decoders (genai layout, examples/llm.py): MatMulNBits and GatherBlockQuantized keep ORT's packed
bytes viewed as uint32, which is MLX's affine packing, with biases -scale * zero_point
(mx.quantized_matmul / mx.dequantize; other block sizes are dequantized once at load);
GroupQueryAttention is mx.fast.rope (frequencies read back from the cos/sin caches, checked at
load) + concatenation with the past + mx.fast.scaled_dot_product_attention, for unpadded batches;
the attention-mask subgraph runs on the host.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import mlx.core as mx
import numpy as np
import onnx
from onnx import helper, numpy_helper

MLX_GROUPS = (32, 64, 128)  # group sizes of MLX's affine quantization


class _Node(NamedTuple):
    """One ONNX node, read out of its protobuf once."""
    op_type: str
    domain: str
    name: str
    input: tuple
    output: tuple
    attrs: dict

    @staticmethod
    def of(node) -> "_Node":
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        return _Node(node.op_type, node.domain, node.name, tuple(node.input), tuple(node.output), attrs)


def _pads_nhwc(pads, nd):
    return [(pads[i], pads[i + nd]) for i in range(nd)]


def _maybe_integer(elem_type: int) -> bool:
    """Whether a feed of this ONNX element type may be integer (unknown types: yes)."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).kind in "iu"
    except Exception:  # noqa: BLE001 - undefined or exotic types: assume the host path
        return True


def _mx_dtype(np_dtype):
    return mx.bool_ if np.dtype(np_dtype) == np.bool_ else getattr(mx, np.dtype(np_dtype).name)


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """uint8 [..., L] of `bits`-wide values (element 0 in the low bits) -> uint8 [..., count]."""
    per = 8 // bits
    shifts = (np.arange(per, dtype=np.uint8) * bits).astype(np.uint8)
    v = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return v.reshape(*packed.shape[:-1], -1)[..., :count]


class _Quantized:
    """A block-quantized [rows, K] weight (MatMulNBits' B, GatherBlockQuantized's table) in MLX's
    affine form, or dequantized to float when MLX's kernels do not take its block size."""

    def __init__(self, packed: np.ndarray, scales: np.ndarray, zp: np.ndarray | None, rows: int, k: int,
                 bits: int, block: int):
        k_blocks = (k + block - 1) // block
        scales = scales.reshape(rows, k_blocks)
        if zp is None:
            zpf = np.full((rows, k_blocks), 2 ** (bits - 1), np.float32)
        elif zp.dtype == np.uint8:
            zpf = _unpack(zp.reshape(rows, -1), bits, k_blocks).astype(np.float32)
        else:
            zpf = zp.reshape(rows, k_blocks).astype(np.float32)
        self.bits, self.block, self.k = bits, block, k
        packed = np.ascontiguousarray(packed.reshape(rows, -1))
        self.affine = block in MLX_GROUPS and k % block == 0 and bits in (2, 4, 8)
        if self.affine:
            self.w = mx.array(packed.view(np.uint32))
            self.scales = mx.array(scales)
            self.biases = mx.array((-scales.astype(np.float32) * zpf).astype(scales.dtype))
            mx.eval(self.w, self.scales, self.biases)
        else:
            q = _unpack(packed, bits, k_blocks * block).astype(np.float32).reshape(rows, k_blocks, block)
            deq = (q - zpf[..., None]) * scales.astype(np.float32)[..., None]
            self.dense = mx.array(deq.reshape(rows, -1)[:, :k].astype(scales.dtype))
            mx.eval(self.dense)

    def matmul(self, x):
        """x [..., K] @ W^T."""
        if self.affine:
            return mx.quantized_matmul(x, self.w, self.scales, self.biases, transpose=True,
                                       group_size=self.block, bits=self.bits)
        return x @ self.dense.T

    def rows(self, idx):
        """Dequantized rows W[idx]: idx's shape + [K]."""
        if self.affine:
            return mx.dequantize(self.w[idx], self.scales[idx], self.biases[idx], group_size=self.block,
                                 bits=self.bits)
        return self.dense[idx]


def _rope_periods(cos: np.ndarray, sin: np.ndarray):
    """mx.fast.rope's `freqs` (periods, 1 / inverse frequency) when the caches are the standard
    table cos/sin(position * inv_freq); None otherwise (then the rotation is written out). The
    inverse frequencies are the slopes of the unwrapped angles over the first rows (a least-squares
    fit, so that float16 caches, rounded to ~1e-3, still give them to ~1e-6), checked against the
    caches within their dtype's rounding."""
    if cos.ndim != 2 or cos.shape != sin.shape or cos.shape[0] < 2:
        return None
    rows = min(cos.shape[0], 512)
    c, s = cos[:rows].astype(np.float64), sin[:rows].astype(np.float64)
    ang = np.unwrap(np.arctan2(s, c), axis=0)  # steps below pi: inv_freq <= 1 rad per position
    pos = np.arange(rows, dtype=np.float64)
    inv = (pos @ ang) / (pos @ pos)  # least-squares slope through the origin
    if np.any(inv <= 0):
        return None
    tol = 1e-4 if cos.dtype.itemsize >= 4 else 4e-3
    fit = np.outer(pos, inv)
    if np.abs(np.cos(fit) - c).max() > tol or np.abs(np.sin(fit) - s).max() > tol:
        return None
    return mx.array((1.0 / inv).astype(np.float32))


class MlxReference:
    def __init__(self, model: bytes):
        m = onnx.load_from_string(model)
        self.nodes = [_Node.of(n) for n in m.graph.node]
        self.opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 21)
        arrays = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        self.host = {k: v for k, v in arrays.items() if v.dtype.kind in "iu" and v.size <= 64}
        self.quant = {}   # node name -> _Quantized
        self.rope = {}    # node name -> periods for mx.fast.rope, or None
        packed_only = set()  # weights, scales, zero points: held by self.quant only
        for n in self.nodes:
            if n.op_type in ("MatMulNBits", "GatherBlockQuantized") and n.domain == "com.microsoft":
                self.quant[n.name] = self._quantized(n, arrays)
                weight_inputs = (1, 2, 3) if n.op_type == "MatMulNBits" else (0, 2, 3)
                packed_only.update(n.input[i] for i in weight_inputs if i < len(n.input) and n.input[i] in arrays)
            if n.op_type == "GroupQueryAttention" and n.attrs.get("do_rotary", 0):
                self.rope[n.name] = _rope_periods(arrays[n.input[7]], arrays[n.input[8]])
        self.consts = {k: mx.array(v) for k, v in arrays.items() if k not in packed_only}
        mx.eval(list(self.consts.values()))
        self.outputs = [o.name for o in m.graph.output]
        # Names that may hold host (NumPy) values at run time: small integer constants, integer
        # feeds, and what nodes whose inputs all may be host produce (an over-approximation).
        maybe_host = set(self.host) | {i.name for i in m.graph.input if _maybe_integer(i.type.tensor_type.elem_type)}
        for n in self.nodes:
            if n.op_type == "Shape" or all(i in maybe_host for i in n.input if i):
                maybe_host.update(n.output)
        # Per node, the values it is the last reader of: dropped from the environment once it ran,
        # as intermediates die in straight-line hand-written code, so that MLX may free or reuse
        # their buffers during the eval.
        last = {}
        for i, n in enumerate(self.nodes):
            for name in n.input:
                last[name] = i
        dead_after = [[] for _ in self.nodes]
        for name, i in last.items():
            if name and name not in self.outputs:
                dead_after[i].append(name)
        self.steps = [(n, self._fast(n, maybe_host), dead) for n, dead in zip(self.nodes, dead_after)]

    @staticmethod
    def _fast(n, maybe_host):
        """The ops of overhead-bound graphs bound once into a closure over the inputs: walking
        _node's chain of tests costs a few µs a node that hand-written code does not pay. None:
        _node handles the node."""
        op = n.op_type
        if op == "MatMul":
            return lambda x: [x[0] @ x[1]]
        if op == "Relu":
            return lambda x: [mx.maximum(x[0], 0)]
        f = {"Add": mx.add, "Sub": mx.subtract, "Mul": mx.multiply, "Div": mx.divide}.get(op)
        if f is not None and (op == "Div" or not all(i in maybe_host for i in n.input)):
            return lambda x: [f(x[0], x[1])]
        return None

    @staticmethod
    def _quantized(n, arrays) -> _Quantized:
        a = n.attrs
        bits, block = a.get("bits", 4), a.get("block_size", 128)
        if n.op_type == "MatMulNBits":
            if len(n.input) > 4 and n.input[4]:
                raise NotImplementedError("MatMulNBits with g_idx")
            zp = arrays[n.input[3]] if len(n.input) > 3 and n.input[3] else None
            return _Quantized(arrays[n.input[1]], arrays[n.input[2]], zp, a["N"], a["K"], bits, block)
        data = arrays[n.input[0]]
        if a.get("gather_axis", 0) != 0 or a.get("quantize_axis", 1) not in (1, -1) or data.ndim != 2:
            raise NotImplementedError("GatherBlockQuantized other than a 2-D table, gather_axis 0, quantize_axis 1")
        zp = arrays[n.input[3]] if len(n.input) > 3 and n.input[3] else None
        k = data.shape[1] * 8 // bits
        return _Quantized(data, arrays[n.input[2]], zp, data.shape[0], k, bits, block)

    def __call__(self, feeds: dict):
        return [np.array(r) for r in self.run_mx(feeds)]

    def run_mx(self, feeds: dict) -> list:
        """The outputs as evaluated mx arrays. Feeds may be NumPy arrays, or mx arrays for
        float inputs (integer feeds must be NumPy: shape arithmetic reads them on the host): a
        decode loop feeds the previous step's present.* back as they came out, a KV cache that
        stays in MLX as in a hand-written port."""
        env = dict(self.consts)
        host = dict(self.host)
        for k, v in feeds.items():
            if isinstance(v, mx.array):
                env[k] = v
                continue
            env[k] = mx.array(v)
            if np.asarray(v).dtype.kind in "iu":
                host[k] = np.asarray(v)
        for node, fast, dead in self.steps:
            x = [env.get(i) if i else None for i in node.input]  # packed weights live in self.quant
            outs = fast(x) if fast else self._node(node, x, host)
            for name, val in zip(node.output, outs):
                if name:
                    env[name] = val
            for name in dead:
                env.pop(name, None)
        results = [env[o] for o in self.outputs]
        mx.eval(results)
        return results

    def _host(self, n, host, value):
        host[n.output[0]] = value
        return [mx.array(value)]

    def _node(self, n, x, host):
        a = n.attrs
        op = n.op_type
        if op == "MatMul":
            return [x[0] @ x[1]]
        if op == "Gemm":
            A = x[0].T if a.get("transA") else x[0]
            B = x[1].T if a.get("transB") else x[1]
            y = a.get("alpha", 1.0) * (A @ B)
            return [y + a.get("beta", 1.0) * x[2] if len(x) > 2 and x[2] is not None else y]
        if op in ("Add", "Sub", "Mul") and all(i in host for i in n.input):
            f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op]
            return self._host(n, host, f(host[n.input[0]], host[n.input[1]]))
        if op in ("Add", "Sub", "Mul", "Div"):
            f = {"Add": mx.add, "Sub": mx.subtract, "Mul": mx.multiply, "Div": mx.divide}[op]
            return [f(x[0], x[1])]
        if op == "ReduceSum" and n.input[0] in host:
            axes = tuple(int(v) for v in host[n.input[1]]) if len(n.input) > 1 and n.input[1] else None
            return self._host(n, host, np.sum(host[n.input[0]], axis=axes, keepdims=bool(a.get("keepdims", 1))))
        if op == "Cast":
            to = helper.tensor_dtype_to_np_dtype(a["to"])
            if n.input[0] in host:
                return self._host(n, host, host[n.input[0]].astype(to))
            return [x[0].astype(_mx_dtype(to))]
        if op == "SimplifiedLayerNormalization":
            if a.get("axis", -1) not in (-1, x[0].ndim - 1):
                raise NotImplementedError("SimplifiedLayerNormalization over more than the last axis")
            return [mx.fast.rms_norm(x[0], x[1], a.get("epsilon", 1e-5))]
        if op == "SkipSimplifiedLayerNormalization":
            total = x[0] + x[1]
            if len(x) > 3 and x[3] is not None:
                total = total + x[3]
            return [mx.fast.rms_norm(total, x[2], a.get("epsilon", 1e-5)), None, None, total]
        if op == "MatMulNBits":
            y = self.quant[n.name].matmul(x[0])
            return [y + x[5] if len(x) > 5 and x[5] is not None else y]
        if op == "GatherBlockQuantized":
            return [self.quant[n.name].rows(x[1])]
        if op == "GroupQueryAttention":
            return self._gqa(n, a, x, host)
        if op == "Relu":
            return [mx.maximum(x[0], 0)]
        if op == "Tanh":
            return [mx.tanh(x[0])]
        if op == "Sigmoid":
            return [mx.sigmoid(x[0])]
        if op == "Gelu":
            return [0.5 * x[0] * (1 + mx.erf(x[0] / math.sqrt(2.0)))]
        if op == "Softmax":
            if self.opset >= 13:
                return [mx.softmax(x[0], axis=a.get("axis", -1))]
            ax = a.get("axis", 1) % x[0].ndim  # before opset 13: softmax of the input flattened to 2-D at axis
            flat = x[0].reshape(int(np.prod(x[0].shape[:ax])), -1)
            return [mx.softmax(flat, axis=-1).reshape(x[0].shape)]
        if op == "LayerNormalization":
            return [mx.fast.layer_norm(x[0], x[1], x[2] if len(x) > 2 else None, a.get("epsilon", 1e-5))]
        if op == "Transpose":
            return [mx.transpose(x[0], a.get("perm"))]
        if op == "Shape":
            host[n.output[0]] = np.array(x[0].shape, np.int64)
            return [mx.array(host[n.output[0]])]
        if op == "Gather":
            if n.input[0] not in host:
                return [mx.take(x[0], x[1], axis=a.get("axis", 0))]
            return self._host(n, host, np.take(host[n.input[0]], host[n.input[1]], axis=a.get("axis", 0)))
        if op == "Unsqueeze":
            v = np.expand_dims(host[n.input[0]], tuple(host[n.input[1]]))
            host[n.output[0]] = v
            return [mx.array(v)]
        if op == "Concat":
            if all(i in host for i in n.input):
                v = np.concatenate([host[i] for i in n.input], axis=a["axis"])
                host[n.output[0]] = v
                return [mx.array(v)]
            return [mx.concatenate(x, axis=a["axis"])]
        if op == "Reshape":
            shape = [int(s) if s != 0 else x[0].shape[i] for i, s in enumerate(host[n.input[1]])]
            return [mx.reshape(x[0], shape)]
        if op == "Flatten":
            ax = a.get("axis", 1)
            return [mx.reshape(x[0], (int(np.prod(x[0].shape[:ax])), -1))]
        if op == "Dropout" or op == "Identity":
            return [x[0]]
        if op == "Conv":
            return [self._conv(x, a)]
        if op in ("MaxPool", "AveragePool"):
            return [self._pool(op, x[0], a)]
        if op == "GlobalAveragePool":
            return [mx.mean(x[0], axis=tuple(range(2, x[0].ndim)), keepdims=True)]
        if op == "LSTM":
            return self._lstm(n, x)
        if op == "BatchNormalization":
            shape = (1, -1) + (1,) * (x[0].ndim - 2)
            inv = mx.rsqrt(x[4].reshape(shape) + a.get("epsilon", 1e-5))
            return [(x[0] - x[3].reshape(shape)) * inv * x[1].reshape(shape) + x[2].reshape(shape)]
        raise NotImplementedError(op)

    @staticmethod
    def _lstm(n, x):
        """A forward LSTM with the default activations, as one would write it in MLX: the input
        projection for every step at once, then per step h @ R^T and the gates."""
        a = n.attrs
        if a.get("direction", b"forward") not in (b"forward", "forward") or len(n.input) > 4 or "activations" in a:
            raise NotImplementedError("LSTM other than forward with default activations, X, W, R and B")
        xs, w, r, b = x[0], x[1][0], x[2][0], x[3][0]
        hidden = r.shape[1]
        proj = xs @ w.T + b[: 4 * hidden] + b[4 * hidden:]
        rt = r.T
        h = mx.zeros((xs.shape[1], hidden), xs.dtype)
        c = mx.zeros_like(h)
        ys = []
        for t in range(xs.shape[0]):
            g = proj[t] + h @ rt
            i, o, f, cc = (g[:, k * hidden:(k + 1) * hidden] for k in range(4))
            c = mx.sigmoid(f) * c + mx.sigmoid(i) * mx.tanh(cc)
            h = mx.sigmoid(o) * mx.tanh(c)
            ys.append(h)
        return [mx.expand_dims(mx.stack(ys), 1), mx.expand_dims(h, 0), mx.expand_dims(c, 0)]

    def _gqa(self, n, a, x, host):
        """com.microsoft GroupQueryAttention for batches without padding (every seqlens_k + 1 ==
        total_sequence_length) whose past buffer holds exactly the past: the new keys/values are
        appended to the past, queries at positions past..past+S-1 see keys up to their own."""
        q, k, v, past_k, past_v = x[0], x[1], x[2], x[3], x[4]
        if k is None:
            raise NotImplementedError("GroupQueryAttention with packed QKV")
        if a.get("softcap", 0.0) or a.get("local_window_size", -1) != -1 or a.get("smooth_softmax", 0) \
                or any(i for i in n.input[9:]) or not a.get("causal", 1):
            raise NotImplementedError("GroupQueryAttention with softcap/local window/smooth softmax/extra inputs")
        heads, kv_heads = a["num_heads"], a["kv_num_heads"]
        total = int(np.asarray(host[n.input[6]]).reshape(-1)[0])
        if np.any(np.asarray(host[n.input[5]]).reshape(-1) + 1 != total):
            raise NotImplementedError("GroupQueryAttention on a padded batch")
        B, S, hidden = q.shape
        D = hidden // heads
        past = total - S
        if past_k is not None and past_k.shape[2] != past:
            raise NotImplementedError("past buffer longer than the past")
        q = q.reshape(B, S, heads, D).transpose(0, 2, 1, 3)
        k = k.reshape(B, S, kv_heads, D).transpose(0, 2, 1, 3)
        v = v.reshape(B, S, kv_heads, D).transpose(0, 2, 1, 3)
        if a.get("do_rotary", 0):
            q, k = (self._rotary(n, a, t, x[7], x[8], past) for t in (q, k))
        if past > 0:
            k = mx.concatenate([past_k, k], axis=2)
            v = mx.concatenate([past_v, v], axis=2)
        scale = a.get("scale", 0.0) or 1.0 / math.sqrt(D)
        o = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask="causal" if S > 1 else None)
        return [o.transpose(0, 2, 1, 3).reshape(B, S, hidden), k, v]

    def _rotary(self, n, a, t, cos, sin, offset):
        dims = 2 * cos.shape[1]
        interleaved = bool(a.get("rotary_interleaved", 0))
        periods = self.rope.get(n.name)
        if periods is not None:
            return mx.fast.rope(t, dims, traditional=interleaved, base=None, scale=1.0, offset=offset, freqs=periods)
        S = t.shape[2]
        c, s = cos[offset:offset + S], sin[offset:offset + S]
        r, rest = t[..., :dims], t[..., dims:]
        if interleaved:
            x1, x2 = r[..., 0::2], r[..., 1::2]
            r = mx.stack([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).reshape(r.shape)
        else:
            x1, x2 = r[..., :dims // 2], r[..., dims // 2:]
            r = mx.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
        return mx.concatenate([r, rest], axis=-1) if rest.shape[-1] else r

    def _conv(self, x, a):
        nd = x[1].ndim - 2
        pads = a.get("pads", [0] * 2 * nd)
        w = mx.moveaxis(x[1], 1, -1)                       # OIHW -> OHWI
        y = mx.conv_general(mx.moveaxis(x[0], 1, -1), w, stride=a.get("strides", [1] * nd),
                            padding=(pads[:nd], pads[nd:]), kernel_dilation=a.get("dilations", [1] * nd),
                            groups=a.get("group", 1))
        if len(x) > 2 and x[2] is not None:
            y = y + x[2]
        return mx.moveaxis(y, -1, 1)

    def _pool(self, op, x, a):
        k = a["kernel_shape"]
        nd = len(k)
        s = a.get("strides", [1] * nd)
        pads = a.get("pads", [0] * 2 * nd)
        xh = mx.moveaxis(x, 1, -1)                          # NCHW -> NHWC
        fill = -math.inf if op == "MaxPool" else 0.0
        xh = mx.pad(xh, [(0, 0)] + _pads_nhwc(pads, nd) + [(0, 0)], constant_values=fill)
        N, H, W, C = xh.shape
        oh = (H - k[0]) // s[0] + 1
        ow = (W - k[1]) // s[1] + 1
        if a.get("ceil_mode"):
            oh = -(-(H - k[0]) // s[0]) + 1
            ow = -(-(W - k[1]) // s[1]) + 1
            xh = mx.pad(xh, [(0, 0), (0, (oh - 1) * s[0] + k[0] - H), (0, (ow - 1) * s[1] + k[1] - W), (0, 0)],
                        constant_values=fill)
        xh = mx.contiguous(xh)
        st = [H * W * C, W * C, C, 1]
        H2, W2 = xh.shape[1], xh.shape[2]
        st = [H2 * W2 * C, W2 * C, C, 1]
        win = mx.as_strided(xh, (N, oh, ow, k[0], k[1], C),
                            (st[0], st[1] * s[0], st[2] * s[1], st[1], st[2], st[3]))
        y = mx.max(win, axis=(3, 4)) if op == "MaxPool" else mx.mean(win, axis=(3, 4))
        return mx.moveaxis(y, -1, 1)
