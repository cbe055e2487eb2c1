"""The same computation as an ONNX model, written directly against MLX (Python mlx.core).

`MlxReference(model_bytes)` walks the graph once per call and issues one mx op per ONNX node,
with weights uploaded once as evaluated mx arrays, shape arithmetic done in Python, and one
mx.eval per call: what a person porting the model to MLX by hand would write, and so the
ceiling for any MLX execution provider. Only the ops the benchmark workloads use are covered.
"""
from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import onnx
from onnx import numpy_helper


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _pads_nhwc(pads, nd):
    return [(pads[i], pads[i + nd]) for i in range(nd)]


class MlxReference:
    def __init__(self, model: bytes):
        m = onnx.load_from_string(model)
        self.graph = m.graph
        self.consts = {t.name: mx.array(numpy_helper.to_array(t)) for t in m.graph.initializer}
        self.host = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer
                     if numpy_helper.to_array(t).dtype.kind in "iu" and numpy_helper.to_array(t).size <= 64}
        mx.eval(list(self.consts.values()))
        self.outputs = [o.name for o in m.graph.output]

    def __call__(self, feeds: dict):
        env = dict(self.consts)
        host = dict(self.host)
        for k, v in feeds.items():
            env[k] = mx.array(v)
        for node in self.graph.node:
            outs = self._node(node, env, host)
            for name, val in zip(node.output, outs):
                env[name] = val
        results = [env[o] for o in self.outputs]
        mx.eval(results)
        return [np.array(r) for r in results]

    def _node(self, n, env, host):
        a = _attrs(n)
        x = [env[i] if i else None for i in n.input]
        op = n.op_type
        if op == "MatMul":
            return [x[0] @ x[1]]
        if op == "Gemm":
            A = x[0].T if a.get("transA") else x[0]
            B = x[1].T if a.get("transB") else x[1]
            y = a.get("alpha", 1.0) * (A @ B)
            return [y + a.get("beta", 1.0) * x[2] if len(x) > 2 and x[2] is not None else y]
        if op in ("Add", "Sub", "Mul", "Div"):
            f = {"Add": mx.add, "Sub": mx.subtract, "Mul": mx.multiply, "Div": mx.divide}[op]
            return [f(x[0], x[1])]
        if op == "Relu":
            return [mx.maximum(x[0], 0)]
        if op == "Tanh":
            return [mx.tanh(x[0])]
        if op == "Sigmoid":
            return [mx.sigmoid(x[0])]
        if op == "Gelu":
            return [0.5 * x[0] * (1 + mx.erf(x[0] / math.sqrt(2.0)))]
        if op == "Softmax":
            return [mx.softmax(x[0], axis=a.get("axis", -1))]
        if op == "LayerNormalization":
            return [mx.fast.layer_norm(x[0], x[1], x[2] if len(x) > 2 else None, a.get("epsilon", 1e-5))]
        if op == "Transpose":
            return [mx.transpose(x[0], a.get("perm"))]
        if op == "Shape":
            host[n.output[0]] = np.array(x[0].shape, np.int64)
            return [mx.array(host[n.output[0]])]
        if op == "Gather":
            v = np.take(host[n.input[0]], host[n.input[1]], axis=a.get("axis", 0))
            host[n.output[0]] = v
            return [mx.array(v)]
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
        if op == "BatchNormalization":
            shape = (1, -1) + (1,) * (x[0].ndim - 2)
            inv = mx.rsqrt(x[4].reshape(shape) + a.get("epsilon", 1e-5))
            return [(x[0] - x[3].reshape(shape)) * inv * x[1].reshape(shape) + x[2].reshape(shape)]
        raise NotImplementedError(op)

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
