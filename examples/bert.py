"""Generator of a BERT-like encoder as ORT's transformers optimizer emits it (float32, random weights).

    input_ids, segment_ids, attention_mask (int32, or int64 followed by Cast to int32)
    EmbedLayerNormalization (word + position + segment embeddings, LayerNorm; mask -> mask_index)
    per layer:  Attention (com.microsoft, fused QKV weights, mask_index [batch] or the raw 2-D mask)
                  or Q/K/V MatMul + MultiHeadAttention (packed bias, key_padding_mask [batch, seq])
                MatMul (output dense) + SkipLayerNormalization (residual, bias folded in)
                MatMul + BiasGelu or FastGelu (bias folded in) + MatMul + SkipLayerNormalization
    pooler:     Gather token 0 + MatMul + Add + Tanh

Outputs: last_hidden_state float [batch, seq, hidden] and pooler_output float [batch, hidden].
The key padding mask is right padding (1 = token, 0 = padding), as BERT tokenizers produce.

    from bert import make_bert, make_inputs
    model = make_bert(hidden=64, heads=4, layers=2, attention="Attention")
    feeds = make_inputs(batch=2, seq=16, lengths=[16, 9])
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
MS = "com.microsoft"
EPSILON = 1e-12


class _Builder:
    """Collects nodes and initializers; draws random weights."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def init(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, shape, scale: float) -> str:
        return self.init(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def node(self, op: str, name: str, inputs, outputs=None, domain: str = "", **attrs):
        outs = outputs if outputs is not None else [f"{name}_output"]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, domain=domain or None, **attrs))
        return outs[0] if len(outs) == 1 else outs


def _ln_params(b: _Builder, stem: str, hidden: int) -> tuple[str, str]:
    gamma = b.init(f"{stem}.weight", (1.0 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32))
    return gamma, b.weight(f"{stem}.bias", (hidden,), 0.1)


def _attention(b: _Builder, i: int, x: str, hidden: int, heads: int, attention: str, mask: str) -> str:
    stem = f"encoder.layer.{i}.attention.self"
    if attention == "Attention":
        w = b.weight(f"{stem}.qkv.weight", (hidden, 3 * hidden), 1.0 / np.sqrt(hidden))
        bias = b.weight(f"{stem}.qkv.bias", (3 * hidden,), 0.02)
        return b.node("Attention", f"Attention_{i}", [x, w, bias, mask], domain=MS, num_heads=heads)
    qkv = []
    for p in ("query", "key", "value"):
        w = b.weight(f"{stem}.{p}.weight", (hidden, hidden), 1.0 / np.sqrt(hidden))
        qkv.append(b.node("MatMul", f"MatMul_{p}_{i}", [x, w]))
    bias = b.weight(f"{stem}.qkv.bias", (3 * hidden,), 0.02)
    return b.node("MultiHeadAttention", f"MultiHeadAttention_{i}", qkv + [bias, mask], domain=MS, num_heads=heads)


def _skip_ln(b: _Builder, name: str, x: str, skip: str, hidden: int, stem: str) -> str:
    gamma, beta = _ln_params(b, f"{stem}.LayerNorm", hidden)
    bias = b.weight(f"{stem}.dense.bias", (hidden,), 0.02)
    return b.node("SkipLayerNormalization", name, [x, skip, gamma, beta, bias], domain=MS, epsilon=EPSILON)


def _layer(b: _Builder, i: int, x: str, hidden: int, heads: int, ffn: int, attention: str, gelu: str,
           mask: str) -> str:
    attn = _attention(b, i, x, hidden, heads, attention, mask)
    wo = b.weight(f"encoder.layer.{i}.attention.output.dense.weight", (hidden, hidden), 1.0 / np.sqrt(hidden))
    proj = b.node("MatMul", f"MatMul_attn_out_{i}", [attn, wo])
    h = _skip_ln(b, f"SkipLayerNorm_attn_{i}", proj, x, hidden, f"encoder.layer.{i}.attention.output")
    w1 = b.weight(f"encoder.layer.{i}.intermediate.dense.weight", (hidden, ffn), 1.0 / np.sqrt(hidden))
    b1 = b.weight(f"encoder.layer.{i}.intermediate.dense.bias", (ffn,), 0.02)
    f = b.node(gelu, f"{gelu}_{i}", [b.node("MatMul", f"MatMul_ffn1_{i}", [h, w1]), b1], domain=MS)
    w2 = b.weight(f"encoder.layer.{i}.output.dense.weight", (ffn, hidden), 1.0 / np.sqrt(ffn))
    f = b.node("MatMul", f"MatMul_ffn2_{i}", [f, w2])
    return _skip_ln(b, f"SkipLayerNorm_ffn_{i}", f, h, hidden, f"encoder.layer.{i}.output")


def make_bert(hidden: int = 64, heads: int = 4, ffn: int = 256, layers: int = 2, vocab: int = 512,
              max_positions: int = 128, type_vocab: int = 2, attention: str = "Attention", mask: str = "index",
              gelu: str = "BiasGelu", input_dtype: str = "int32", seed: int = 0) -> bytes:
    """Serialized ModelProto. attention: "Attention" or "MultiHeadAttention". mask: "index"
    (EmbedLayerNormalization's mask_index [batch], Attention only) or "raw" (the 2-D int32 mask).
    gelu: "BiasGelu" or "FastGelu". input_dtype: "int32" or "int64" (Cast to int32 inserted)."""
    if attention not in ("Attention", "MultiHeadAttention"):
        raise ValueError(f"attention must be Attention or MultiHeadAttention, not {attention!r}")
    if mask not in ("index", "raw"):
        raise ValueError(f"mask must be 'index' or 'raw', not {mask!r}")
    if gelu not in ("BiasGelu", "FastGelu"):
        raise ValueError(f"gelu must be BiasGelu or FastGelu, not {gelu!r}")
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    b = _Builder(np.random.default_rng(seed))
    in_type = {"int32": TensorProto.INT32, "int64": TensorProto.INT64}[input_dtype]
    ids, seg, am = "input_ids", "segment_ids", "attention_mask"
    if in_type == TensorProto.INT64:
        ids, seg, am = (b.node("Cast", f"Cast_{n}", [n], to=TensorProto.INT32) for n in (ids, seg, am))

    gamma, beta = _ln_params(b, "embeddings.LayerNorm", hidden)
    emb_inputs = [ids, seg, b.weight("embeddings.word_embeddings.weight", (vocab, hidden), 1.0),
                  b.weight("embeddings.position_embeddings.weight", (max_positions, hidden), 0.5),
                  b.weight("embeddings.token_type_embeddings.weight", (type_vocab, hidden), 0.5), gamma, beta, am]
    x, mask_index = b.node("EmbedLayerNormalization", "EmbedLayerNormalization_0", emb_inputs, domain=MS,
                           outputs=["embed_output", "mask_index"], epsilon=EPSILON)
    attn_mask = mask_index if mask == "index" else am
    for i in range(layers):
        x = _layer(b, i, x, hidden, heads, ffn, attention, gelu, attn_mask)
    b.nodes[-1].output[0] = "last_hidden_state"

    first = b.node("Gather", "Gather_cls", ["last_hidden_state", b.init("cls_index", np.array(0, np.int64))], axis=1)
    pooled = b.node("MatMul", "MatMul_pooler", [first, b.weight("pooler.dense.weight", (hidden, hidden),
                                                                  1.0 / np.sqrt(hidden))])
    pooled = b.node("Add", "Add_pooler", [pooled, b.weight("pooler.dense.bias", (hidden,), 0.02)])
    b.node("Tanh", "Tanh_pooler", [pooled], outputs=["pooler_output"])

    inputs = [helper.make_tensor_value_info(n, in_type, ["batch", "seq"])
              for n in ("input_ids", "segment_ids", "attention_mask")]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", hidden]),
               helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch", hidden])]
    graph = helper.make_graph(b.nodes, "bert", inputs, outputs, initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS, 1)],
                              producer_name="onnxruntime-ep-mlx examples/bert.py")
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model.SerializeToString()


def make_inputs(batch: int = 2, seq: int = 16, lengths=None, vocab: int = 512, input_dtype: str = "int32",
                seed: int = 1) -> dict:
    """Feeds: random token ids, segment 0 for the first half and 1 for the rest, and a right-padded
    mask of the given lengths (default: no padding). Padding positions get token id 0."""
    rng = np.random.default_rng(seed)
    lengths = list(lengths) if lengths is not None else [seq] * batch
    if len(lengths) != batch or any(not 1 <= n <= seq for n in lengths):
        raise ValueError("lengths must give 1..seq tokens per batch entry")
    mask = (np.arange(seq)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    ids = rng.integers(1, vocab, size=(batch, seq)) * mask
    segments = np.broadcast_to((np.arange(seq) >= seq // 2).astype(np.int64), (batch, seq)) * mask
    dt = np.dtype(input_dtype)
    return {"input_ids": ids.astype(dt), "segment_ids": np.ascontiguousarray(segments).astype(dt),
            "attention_mask": mask.astype(dt)}


if __name__ == "__main__":
    import sys
    out = sys.argv[1] if len(sys.argv) > 1 else "bert.onnx"
    with open(out, "wb") as f:
        f.write(make_bert())
    print(f"wrote {out}")
