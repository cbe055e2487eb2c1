"""Generator of a transformer encoder block as an exporter would emit it (float32, opset 20).

The graph spells attention out op by op: Q/K/V projections (MatMul + Add), the head split through a
Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain with symbolic batch/sequence dims, scaled
dot-product attention with an additive mask, the output projection, residual Adds,
LayerNormalization and a Gelu feed-forward network. Weights are random with a fixed seed.

    from transformer import make_encoder_block, make_inputs
    model = make_encoder_block(hidden=256, heads=4, ffn=1024, layers=2)   # ModelProto bytes
    feeds = make_inputs(batch=1, seq=128, hidden=256)                      # {"x": ..., "mask": ...}
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 20


class _Builder:
    """Collects nodes and initializers; hands out unique value names."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, stem: str, value) -> str:
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, stem: str, shape, scale: float) -> str:
        return self.const(stem, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type: str, inputs, stem: str | None = None, **attrs) -> str:
        out = self.name(stem or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=out + "_node", **attrs))
        return out


def _linear(b: _Builder, x: str, n_in: int, n_out: int, stem: str) -> str:
    w = b.weight(f"{stem}_w", (n_in, n_out), 1.0 / np.sqrt(n_in))
    bias = b.weight(f"{stem}_b", (n_out,), 0.02)
    return b.op("Add", [b.op("MatMul", [x, w], f"{stem}_mm"), bias], stem)


def _layer_norm(b: _Builder, x: str, hidden: int, stem: str) -> str:
    scale = b.const(f"{stem}_scale", (1.0 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32))
    bias = b.weight(f"{stem}_bias", (hidden,), 0.1)
    return b.op("LayerNormalization", [x, scale, bias], stem, axis=-1, epsilon=1e-5)


def _batch_seq_dims(b: _Builder, x: str) -> tuple[str, str]:
    """The exporter idiom for dynamic dims: Shape -> Gather(scalar index) -> Unsqueeze -> [1]."""
    shape = b.op("Shape", [x], "shape")
    axes0 = b.const("axes0", np.array([0], np.int64))
    dims = []
    for i in (0, 1):
        idx = b.const(f"idx{i}", np.array(i, np.int64))
        dim = b.op("Gather", [shape, idx], f"dim{i}", axis=0)
        dims.append(b.op("Unsqueeze", [dim, axes0], f"dim{i}_1d"))
    return dims[0], dims[1]


def _attention(b: _Builder, x: str, mask: str, hidden: int, heads: int) -> str:
    head_dim = hidden // heads
    batch, seq = _batch_seq_dims(b, x)
    heads_shape = b.op("Concat", [batch, seq, b.const("hd", np.array([heads, head_dim], np.int64))],
                       "heads_shape", axis=0)
    merged_shape = b.op("Concat", [batch, seq, b.const("h", np.array([hidden], np.int64))],
                        "merged_shape", axis=0)

    def split_heads(t: str, perm) -> str:
        return b.op("Transpose", [b.op("Reshape", [t, heads_shape], "split")], "heads", perm=perm)

    q = split_heads(_linear(b, x, hidden, hidden, "q"), [0, 2, 1, 3])   # [B,H,S,D]
    k = split_heads(_linear(b, x, hidden, hidden, "k"), [0, 2, 3, 1])   # [B,H,D,S]
    v = split_heads(_linear(b, x, hidden, hidden, "v"), [0, 2, 1, 3])   # [B,H,S,D]
    scores = b.op("MatMul", [q, k], "scores")
    scores = b.op("Div", [scores, b.const("sqrt_d", np.array(np.sqrt(head_dim), np.float32))], "scaled")
    scores = b.op("Add", [scores, mask], "masked")
    probs = b.op("Softmax", [scores], "probs", axis=-1)
    ctx = b.op("MatMul", [probs, v], "ctx")                               # [B,H,S,D]
    ctx = b.op("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3])            # [B,S,H,D]
    ctx = b.op("Reshape", [ctx, merged_shape], "ctx_merged")              # [B,S,hidden]
    return _linear(b, ctx, hidden, hidden, "o")


def _encoder_layer(b: _Builder, x: str, mask: str, hidden: int, heads: int, ffn: int) -> str:
    attn = _attention(b, x, mask, hidden, heads)
    h = _layer_norm(b, b.op("Add", [x, attn], "residual1"), hidden, "ln1")
    f = _linear(b, h, hidden, ffn, "ffn1")
    f = b.op("Gelu", [f], "gelu", approximate="none")
    f = _linear(b, f, ffn, hidden, "ffn2")
    return _layer_norm(b, b.op("Add", [h, f], "residual2"), hidden, "ln2")


def make_encoder_block(hidden: int = 256, heads: int = 4, ffn: int = 1024, layers: int = 1,
                       seed: int = 0) -> bytes:
    """Serialized ModelProto of `layers` encoder layers. Inputs: x float[batch, seq, hidden] and
    mask float[batch, 1, 1, seq] (additive: 0 keeps a position, a large negative drops it).
    Output: y float[batch, seq, hidden]."""
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    b = _Builder(np.random.default_rng(seed))
    x = "x"
    for _ in range(layers):
        x = _encoder_layer(b, x, "mask", hidden, heads, ffn)
    b.nodes[-1].output[0] = "y"  # the last LayerNormalization writes the graph output
    graph = helper.make_graph(
        b.nodes, "encoder_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", 1, 1, "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden])],
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="onnxruntime-ep-mlx examples/transformer.py")
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model.SerializeToString()


def make_inputs(batch: int = 1, seq: int = 128, hidden: int = 256, seed: int = 1,
                masked_tail: int = 0) -> dict:
    """Feeds for make_encoder_block: x ~ N(0, 1); the last `masked_tail` positions are masked."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((batch, 1, 1, seq), np.float32)
    if masked_tail:
        mask[..., seq - masked_tail:] = -10000.0
    return {"x": rng.standard_normal((batch, seq, hidden)).astype(np.float32), "mask": mask}


if __name__ == "__main__":
    import sys
    out = sys.argv[1] if len(sys.argv) > 1 else "encoder_block.onnx"
    with open(out, "wb") as f:
        f.write(make_encoder_block())
    print(f"wrote {out}")
