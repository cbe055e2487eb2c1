"""Generator of a decoder-only LLM in onnxruntime-genai's model-builder layout (random weights).

The graph follows what genai's builder emits for a Llama/Qwen2-style model with GroupQueryAttention:

    input_ids ─ Gather (or GatherBlockQuantized for int4) ─ embeddings
    attention_mask ─ ReduceSum(keepdims=0) ─ Sub 1 ─ Cast int32 ─ seqlens_k [batch]
    attention_mask ─ Shape ─ Gather 1 ─ Cast int32 ─ total_sequence_length (scalar)
    per layer:  [Skip]SimplifiedLayerNormalization ─ Q/K/V MatMul(NBits) (+ bias Add) ─
                GroupQueryAttention(do_rotary=1, cos/sin caches, past/present KV) ─ O MatMul ─
                SkipSimplifiedLayerNormalization ─ gate/up MatMul ─ Sigmoid, Mul (SiLU) ─ Mul ─ down
    final SkipSimplifiedLayerNormalization (output 0 only) ─ lm_head MatMul(NBits) ─ logits

Inputs: input_ids int64 [batch, seq], attention_mask int64 [batch, total_seq],
past_key_values.{i}.key/value [batch, kv_heads, past_seq, head_dim]. Outputs: logits
[batch, seq, vocab], present.{i}.key/value [batch, kv_heads, total_seq, head_dim].
Weights are random with a fixed seed; int4 weights are drawn directly in MatMulNBits' packed form
(asymmetric, uint8 zero points, as ORT's MatMulNBitsQuantizer writes them).

    from llm import TINY, QWEN25_05B, make_llm, save_llm, empty_past, step_feeds
    model = make_llm(TINY, weights="int4", block_size=32)        # ModelProto bytes
    save_llm("qwen.onnx", QWEN25_05B, weights="int4")             # big: external data file
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 21
MS = "com.microsoft"


@dataclasses.dataclass(frozen=True)
class LLMConfig:
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 128
    vocab: int = 128
    context: int = 256          # rows of the cos/sin caches (max_position_embeddings)
    rope_theta: float = 10000.0
    qkv_bias: bool = True       # Qwen2 has biases on the Q/K/V projections
    rms_norm_eps: float = 1e-6  # genai writes the config's rms_norm_eps into every norm

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


TINY = LLMConfig()
# Qwen2.5-0.5B's shapes (for benchmarks; far too big for tests).
QWEN25_05B = LLMConfig(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864, vocab=151936,
                       context=32768, rope_theta=1000000.0, qkv_bias=True)

_NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


class _Builder:
    """Collects nodes and initializers; draws the random weights."""

    def __init__(self, cfg: LLMConfig, io_dtype: int, weights: str, block_size: int, accuracy_level: int,
                 seed: int, legacy_seqlens: bool = False):
        self.cfg = cfg
        self.io = io_dtype
        self.np_io = _NP[io_dtype]
        self.weights = weights
        self.block_size = block_size
        self.accuracy_level = accuracy_level
        self.legacy_seqlens = legacy_seqlens
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.consts: dict[str, str] = {}

    # ---- graph plumbing ------------------------------------------------------------------
    def init(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def const(self, value, dtype) -> str:
        """Shared small constants, named as genai names them (/model/constants/...)."""
        arr = np.array(value, dtype=dtype)
        key = f"/model/constants/{arr.dtype}/{arr.ndim}D/{','.join(str(v) for v in arr.flatten())}"
        if key not in self.consts:
            self.consts[key] = self.init(key, arr)
        return self.consts[key]

    def node(self, op: str, name: str, inputs, n_out: int = 1, domain: str = "", outputs=None, **attrs):
        outs = outputs if outputs is not None else [f"{name}/output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, domain=domain or None, **attrs))
        return outs[0] if len(outs) == 1 else outs

    # ---- weights -------------------------------------------------------------------------
    def dense(self, name: str, n_in: int, n_out: int) -> np.ndarray:
        return (self.rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(self.np_io)

    def int4_blocks(self, rows: int, k: int):
        """Random MatMulNBits-packed weights for `rows` output rows of K inputs: data
        [rows, k_blocks, block_size/2] uint8, scales [rows, k_blocks], zero points
        [rows, ceil(k_blocks/2)] uint8. Dequantized values have a standard deviation near
        1/sqrt(K), like the dense weights."""
        bs = self.block_size
        k_blocks = (k + bs - 1) // bs
        q = self.rng.integers(0, 16, size=(rows, k_blocks * bs), dtype=np.uint8)
        q[:, k:] = 0  # padding of the last block
        packed = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(rows, k_blocks, bs // 2)
        zp = self.rng.integers(7, 10, size=(rows, k_blocks + (k_blocks % 2)), dtype=np.uint8)
        zp_packed = zp[:, 0::2] | (zp[:, 1::2] << 4)
        scales = (self.rng.uniform(0.5, 1.5, size=(rows, k_blocks)) / (4.6 * np.sqrt(k))).astype(self.np_io)
        return packed, scales, zp_packed

    def linear(self, name: str, x: str, n_in: int, n_out: int) -> str:
        """MatMul with a dense [in, out] weight, or MatMulNBits for int4."""
        wname = name.replace("/", ".").strip(".") + ".weight"
        if self.weights == "int4":
            packed, scales, zp = self.int4_blocks(n_out, n_in)
            ins = [x, self.init(wname + ".int4", packed), self.init(wname + ".scales", scales),
                   self.init(wname + ".zero_points", zp)]
            attrs = dict(K=n_in, N=n_out, bits=4, block_size=self.block_size)
            if self.accuracy_level:
                attrs["accuracy_level"] = self.accuracy_level
            return self.node("MatMulNBits", f"{name}/MatMulNBits", ins, domain=MS, **attrs)
        return self.node("MatMul", f"{name}/MatMul", [x, self.init(wname, self.dense(name, n_in, n_out))])

    def norm_weight(self, name: str) -> str:
        return self.init(name, (1.0 + 0.1 * self.rng.standard_normal(self.cfg.hidden)).astype(self.np_io))


def _mask_subgraph(b: _Builder) -> tuple[str, str]:
    """seqlens_k and total_sequence_length from attention_mask, exactly as genai builds them. The
    current builder reduces with keepdims=0 (seqlens_k [batch]); builders before it kept the
    reduced axis (seqlens_k [batch, 1]), which ORT's GroupQueryAttention accepts too and which
    models exported back then still carry (legacy_seqlens=True)."""
    base = "/model/attn_mask_reformat/attn_mask_subgraph"
    rsum = b.node("ReduceSum", f"{base}/ReduceSum", ["attention_mask", b.const([1], np.int64)],
                  keepdims=1 if b.legacy_seqlens else 0)
    sub = b.node("Sub", f"{base}/Sub", [rsum, b.const([1], np.int64)])
    seqlens_k = b.node("Cast", f"{base}/Sub/Cast", [sub], to=TensorProto.INT32)
    shape = b.node("Shape", f"{base}/Shape", ["attention_mask"])
    total = b.node("Gather", f"{base}/Gather", [shape, b.const(1, np.int64)], axis=0)
    total_seq_len = b.node("Cast", f"{base}/Gather/Cast", [total], to=TensorProto.INT32)
    return seqlens_k, total_seq_len


def _embedding(b: _Builder) -> str:
    cfg = b.cfg
    if b.weights == "int4":
        packed, scales, zp = b.int4_blocks(cfg.vocab, cfg.hidden)
        # Same packing as MatMulNBits, viewed as [vocab, hidden/2] (genai's shared-weight layout).
        ins = [b.init("model.embed_tokens.qweight", packed.reshape(cfg.vocab, -1)), "input_ids",
               b.init("model.embed_tokens.scales", scales), b.init("model.embed_tokens.qzeros", zp)]
        return b.node("GatherBlockQuantized", "/model/embed_tokens/GatherBlockQuantized", ins, domain=MS,
                      bits=4, block_size=b.block_size, gather_axis=0, quantize_axis=1)
    table = b.rng.standard_normal((cfg.vocab, cfg.hidden)).astype(b.np_io)
    return b.node("Gather", "/model/embed_tokens/Gather", [b.init("model.embed_tokens.weight", table), "input_ids"],
                  axis=0)


def _rotary_caches(b: _Builder) -> tuple[str, str]:
    """cos/sin caches [context, head_dim/2] as genai builds them from scratch."""
    cfg = b.cfg
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim))
    t = np.arange(cfg.context, dtype=np.int64).astype(np.float32)
    freqs = np.outer(t, inv_freq).astype(np.float32)
    return (b.init("cos_cache", np.cos(freqs).astype(b.np_io)), b.init("sin_cache", np.sin(freqs).astype(b.np_io)))


def _attention(b: _Builder, layer: int, x: str, seqlens_k: str, total_seq_len: str, cos: str, sin: str) -> str:
    cfg = b.cfg
    base = f"/model/layers.{layer}/attn"
    kv = cfg.kv_heads * cfg.head_dim
    proj = {}
    for p, n_out in (("q", cfg.hidden), ("k", kv), ("v", kv)):
        y = b.linear(f"{base}/{p}_proj", x, cfg.hidden, n_out)
        if cfg.qkv_bias:
            bias = (0.1 * b.rng.standard_normal(n_out)).astype(b.np_io)
            bias = b.init(f"model.layers.{layer}.attn.{p}_proj.bias", bias)
            y = b.node("Add", f"{base}/{p}_proj/Add", [y, bias])
        proj[p] = y
    ins = [proj["q"], proj["k"], proj["v"], f"past_key_values.{layer}.key", f"past_key_values.{layer}.value",
           seqlens_k, total_seq_len, cos, sin]
    outs = [f"{base}/GroupQueryAttention/output_0", f"present.{layer}.key", f"present.{layer}.value"]
    attn = b.node("GroupQueryAttention", f"{base}/GroupQueryAttention", ins, domain=MS, outputs=outs,
                  num_heads=cfg.heads, kv_num_heads=cfg.kv_heads, scale=float(1.0 / np.sqrt(cfg.head_dim)),
                  do_rotary=1, rotary_interleaved=0)[0]
    return b.linear(f"{base}/o_proj", attn, cfg.hidden, cfg.hidden)


def _mlp(b: _Builder, layer: int, x: str) -> str:
    cfg = b.cfg
    base = f"/model/layers.{layer}/mlp"
    gate = b.linear(f"{base}/gate_proj", x, cfg.hidden, cfg.intermediate)
    up = b.linear(f"{base}/up_proj", x, cfg.hidden, cfg.intermediate)
    sig = b.node("Sigmoid", f"{base}/act_fn/Sigmoid", [gate])
    act = b.node("Mul", f"{base}/act_fn/Mul", [gate, sig])
    prod = b.node("Mul", f"{base}/Mul", [act, up])
    return b.linear(f"{base}/down_proj", prod, cfg.intermediate, cfg.hidden)


def _skip_norm(b: _Builder, name: str, root: str, skip: str, weight: str, last: bool = False):
    """SkipSimplifiedLayerNormalization: returns (normalized, residual sum) or, for the final
    norm, the normalized output alone (genai leaves output 3 off the last one)."""
    if last:
        return b.node("SkipSimplifiedLayerNormalization", name, [root, skip, weight], domain=MS,
                      outputs=[f"{name}/output_0"], epsilon=b.cfg.rms_norm_eps)
    outs = b.node("SkipSimplifiedLayerNormalization", name, [root, skip, weight], domain=MS,
                  outputs=[f"{name}/output_0", "", "", f"{name}/output_3"], epsilon=b.cfg.rms_norm_eps)
    return outs[0], outs[3]


def build_llm(cfg: LLMConfig = TINY, weights: str = "int4", io_dtype: str = "float32", block_size: int = 32,
              accuracy_level: int = 0, seed: int = 0, legacy_seqlens: bool = False) -> onnx.ModelProto:
    """The ModelProto. weights: "int4" (MatMulNBits + GatherBlockQuantized) or "float" (MatMul +
    Gather with io_dtype weights). io_dtype: "float32" or "float16" (activations, caches, norms).
    accuracy_level: MatMulNBits' attribute (0 = unset; genai writes 4 for CPU, which lets ORT's
    CPU EP quantize A to int8). legacy_seqlens: seqlens_k [batch, 1] as older builders emit it."""
    if weights not in ("int4", "float"):
        raise ValueError(f"weights must be 'int4' or 'float', not {weights!r}")
    io = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}[io_dtype]
    if cfg.hidden % cfg.heads or cfg.heads % cfg.kv_heads:
        raise ValueError("hidden must be a multiple of heads, heads a multiple of kv_heads")
    b = _Builder(cfg, io, weights, block_size, accuracy_level, seed, legacy_seqlens)
    seqlens_k, total_seq_len = _mask_subgraph(b)
    cos, sin = _rotary_caches(b)
    emb = _embedding(b)

    root = emb
    x = b.node("SimplifiedLayerNormalization", "/model/layers.0/input_layernorm/LayerNorm",
               [emb, b.norm_weight("model.layers.0.input_layernorm.weight")], axis=-1, epsilon=cfg.rms_norm_eps,
               stash_type=1)
    for layer in range(cfg.layers):
        if layer > 0:
            x, root = _skip_norm(b, f"/model/layers.{layer}/input_layernorm/SkipLayerNorm", root, skip,
                                 b.norm_weight(f"model.layers.{layer}.input_layernorm.weight"))
        attn = _attention(b, layer, x, seqlens_k, total_seq_len, cos, sin)
        x, root = _skip_norm(b, f"/model/layers.{layer}/post_attention_layernorm/SkipLayerNorm", root, attn,
                             b.norm_weight(f"model.layers.{layer}.post_attention_layernorm.weight"))
        skip = _mlp(b, layer, x)
    x = _skip_norm(b, f"/model/layers.{cfg.layers}/final_norm_layernorm/SkipLayerNorm", root, skip,
                   b.norm_weight("model.norm.weight"), last=True)
    logits = b.linear("/lm_head", x, cfg.hidden, cfg.vocab)
    b.nodes[-1].output[0] = "logits"

    kv_shape = ["batch_size", cfg.kv_heads, "past_sequence_length", cfg.head_dim]
    present_shape = ["batch_size", cfg.kv_heads, "total_sequence_length", cfg.head_dim]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch_size", "total_sequence_length"])]
    outputs = [helper.make_tensor_value_info("logits", io, ["batch_size", "sequence_length", cfg.vocab])]
    for i in range(cfg.layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", io, kv_shape))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", io, present_shape))
    graph = helper.make_graph(b.nodes, "llm", inputs, outputs, initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS, 1)],
                              producer_name="onnxruntime-ep-mlx examples/llm.py")
    model.ir_version = 10
    return model


def make_llm(cfg: LLMConfig = TINY, weights: str = "int4", io_dtype: str = "float32", block_size: int = 32,
             accuracy_level: int = 0, seed: int = 0, legacy_seqlens: bool = False) -> bytes:
    """Serialized ModelProto (under protobuf's 2 GiB limit: use save_llm for big configs)."""
    # No onnx.checker: SimplifiedLayerNormalization is an ORT op in the default domain that ONNX's
    # checker does not know; ORT validates the graph when a session loads it.
    return build_llm(cfg, weights, io_dtype, block_size, accuracy_level, seed, legacy_seqlens).SerializeToString()


def save_llm(path: str, cfg: LLMConfig = QWEN25_05B, weights: str = "int4", io_dtype: str = "float32",
             block_size: int = 32, accuracy_level: int = 0, seed: int = 0) -> str:
    """Writes the model to `path` with its weights in `path`.data (any size); returns path."""
    model = build_llm(cfg, weights, io_dtype, block_size, accuracy_level, seed)
    data = os.path.basename(path) + ".data"
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location=data,
                    size_threshold=1024)
    return path


# ---- feeding the model ---------------------------------------------------------------------

def empty_past(cfg: LLMConfig, batch: int = 1, io_dtype: str = "float32") -> dict:
    """past_key_values.* with past length 0 (the prefill step)."""
    z = np.zeros((batch, cfg.kv_heads, 0, cfg.head_dim), np.dtype(io_dtype))
    return {f"past_key_values.{i}.{kind}": z for i in range(cfg.layers) for kind in ("key", "value")}


def step_feeds(cfg: LLMConfig, tokens: np.ndarray, past: dict, attention_mask: np.ndarray | None = None) -> dict:
    """Feeds for one step: tokens int64 [batch, seq]; the mask defaults to all ones over
    past + seq positions."""
    tokens = np.asarray(tokens, np.int64)
    if attention_mask is None:
        past_len = next(iter(past.values())).shape[2]
        attention_mask = np.ones((tokens.shape[0], past_len + tokens.shape[1]), np.int64)
    return {"input_ids": tokens, "attention_mask": np.asarray(attention_mask, np.int64), **past}


def next_past(cfg: LLMConfig, outputs: list) -> dict:
    """present.* outputs of a run (in graph order, after logits) as the next step's past."""
    names = [f"past_key_values.{i}.{kind}" for i in range(cfg.layers) for kind in ("key", "value")]
    return dict(zip(names, outputs[1:]))


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default="llm.onnx")
    ap.add_argument("--config", choices=["tiny", "qwen2.5-0.5b"], default="tiny")
    ap.add_argument("--weights", choices=["int4", "float"], default="int4")
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--accuracy-level", type=int, default=0)
    args = ap.parse_args()
    cfg = TINY if args.config == "tiny" else QWEN25_05B
    save_llm(args.out, cfg, args.weights, args.dtype, args.block_size, args.accuracy_level)
    print(f"wrote {args.out}")
