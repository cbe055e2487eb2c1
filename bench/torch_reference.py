"""The genai-layout decoder of examples/llm.py written in PyTorch eager (the bench's `torch` engine).

`TorchDecoder(model_bytes, device)` reads the ONNX file's weights once: MatMulNBits and
GatherBlockQuantized weights are dequantized ((q - zero point) * scale, in float32) and kept in the
model's io dtype (float16 on the GPU) on the device. A call runs the graph's computation with torch
ops, as a person porting the model to PyTorch would write it:

    embedding rows -> RMSNorm (SimplifiedLayerNormalization: float32 statistics, then * weight)
    per layer: q/k/v linear + bias -> rotary (rotate-half, cos/sin rows of the model's caches at
    positions past..past+S-1, computed in float32) -> KV cache torch.cat -> GQA attention with
    scaled_dot_product_attention (enable_gqa, or repeat_interleave on older torch) -> o_proj ->
    residual add + RMSNorm (SkipSimplifiedLayerNormalization) -> gate/up linear, SiLU(gate) * up ->
    down; final residual add + RMSNorm -> lm_head.

Feeds are the ONNX model's (input_ids, attention_mask, past_key_values.*); past_key_values.* may
be NumPy arrays or the torch tensors a previous call returned (a decode loop keeps its KV cache on
the device). Outputs in graph order: logits, present.* (the present keys after rotary, like
GroupQueryAttention's). Only unpadded batches (every sequence as long as the attention mask).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def _attrs(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


class TorchDecoder:
    def __init__(self, model: bytes, device: str = "cuda"):
        import torch
        self.torch = torch
        self.F = torch.nn.functional
        self.device = torch.device(device)
        m = onnx.load_from_string(model)
        self.arrays = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        self.nodes = {n.name: n for n in m.graph.node}
        self.outputs = [o.name for o in m.graph.output]
        gqa = [n for n in m.graph.node if n.op_type == "GroupQueryAttention"]
        if not gqa:
            raise NotImplementedError("torch engine: a decoder of examples/llm.py (GroupQueryAttention) only")
        a = _attrs(gqa[0])
        if a.get("rotary_interleaved", 0) or not a.get("do_rotary", 0):
            raise NotImplementedError("torch engine: non-interleaved rotary inside GroupQueryAttention only")
        self.layers = len(gqa)
        self.heads, self.kv_heads = a["num_heads"], a["kv_num_heads"]
        cos, sin = self.arrays[gqa[0].input[7]], self.arrays[gqa[0].input[8]]
        self.dtype = torch.float16 if cos.dtype == np.float16 else torch.float32
        self.cos = self._t(cos).float()
        self.sin = self._t(sin).float()
        self.head_dim = 2 * cos.shape[1]
        self.scale = a.get("scale", 0.0) or 1.0 / self.head_dim ** 0.5
        self.gqa_kw = self._gqa_kwarg()

        emb = self.nodes["/model/embed_tokens/GatherBlockQuantized"] if "/model/embed_tokens/GatherBlockQuantized" \
            in self.nodes else None
        if emb is not None:
            ea = _attrs(emb)
            data = self.arrays[emb.input[0]]
            self.embed = self._dequant(data, self.arrays[emb.input[2]], self.arrays.get(emb.input[3]),
                                       data.shape[0], data.shape[1] * 8 // ea.get("bits", 4), ea.get("bits", 4),
                                       ea.get("block_size", 128))
        else:
            self.embed = self._t(self.arrays[self.nodes["/model/embed_tokens/Gather"].input[0]])
        first = self.nodes["/model/layers.0/input_layernorm/LayerNorm"]
        self.eps = _attrs(first).get("epsilon", 1e-5)
        self.ln_in = [self._t(self.arrays[first.input[1]])]
        self.ln_post, self.lin = [], []
        for i in range(self.layers):
            if i:
                self.ln_in.append(self._norm_weight(f"/model/layers.{i}/input_layernorm/SkipLayerNorm"))
            self.ln_post.append(self._norm_weight(f"/model/layers.{i}/post_attention_layernorm/SkipLayerNorm"))
            base = f"/model/layers.{i}"
            self.lin.append({p: self._linear(f"{base}/attn/{p}_proj") for p in ("q", "k", "v", "o")} |
                            {p: self._linear(f"{base}/mlp/{p}_proj") for p in ("gate", "up", "down")})
        self.final_norm = self._norm_weight(f"/model/layers.{self.layers}/final_norm_layernorm/SkipLayerNorm")
        self.lm_head = self._linear("/lm_head")
        self.arrays = self.nodes = None  # the host copies of the weights are no longer needed

    # ---- loading -------------------------------------------------------------------------
    def _t(self, a: np.ndarray):
        return self.torch.from_numpy(np.array(a)).to(self.device)  # a writable copy of the initializer

    def _norm_weight(self, name: str):
        return self._t(self.arrays[self.nodes[name].input[2]])

    def _dequant(self, packed, scales, zp, rows: int, k: int, bits: int, block: int):
        """[rows, K] weight in the io dtype from MatMulNBits' packing (element 0 in the low bits)."""
        torch = self.torch
        if bits != 4:
            raise NotImplementedError("torch engine: 4-bit weights only")
        kb = (k + block - 1) // block
        p = self._t(packed.reshape(rows, -1))
        q = torch.stack([p & 0xF, p >> 4], dim=-1).reshape(rows, -1)[:, :kb * block].float().reshape(rows, kb, block)
        if zp is None:
            z = torch.full((rows, kb), 8.0, device=self.device)
        elif zp.dtype == np.uint8:
            zt = self._t(zp.reshape(rows, -1))
            z = torch.stack([zt & 0xF, zt >> 4], dim=-1).reshape(rows, -1)[:, :kb].float()
        else:
            z = self._t(zp.reshape(rows, kb)).float()
        s = self._t(scales.reshape(rows, kb)).float()
        w = ((q - z[..., None]) * s[..., None]).reshape(rows, -1)[:, :k]
        return w.to(self.dtype).contiguous()

    def _linear(self, name: str):
        """(weight [out, in], bias or None) of a projection named as examples/llm.py names it."""
        if f"{name}/MatMulNBits" in self.nodes:
            n = self.nodes[f"{name}/MatMulNBits"]
            a = _attrs(n)
            zp = self.arrays[n.input[3]] if len(n.input) > 3 and n.input[3] else None
            w = self._dequant(self.arrays[n.input[1]], self.arrays[n.input[2]], zp, a["N"], a["K"],
                              a.get("bits", 4), a.get("block_size", 128))
        else:
            w = self._t(self.arrays[self.nodes[f"{name}/MatMul"].input[1]].T.copy())
        add = self.nodes.get(f"{name}/Add")
        return w, (self._t(self.arrays[add.input[1]]) if add is not None else None)

    def _gqa_kwarg(self) -> bool:
        """Whether scaled_dot_product_attention takes enable_gqa (torch >= 2.5)."""
        torch = self.torch
        try:
            q = torch.zeros(1, 2, 1, 4, device=self.device, dtype=self.dtype)
            k = torch.zeros(1, 1, 1, 4, device=self.device, dtype=self.dtype)
            self.F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
            return True
        except (TypeError, RuntimeError):
            return False

    # ---- running -------------------------------------------------------------------------
    def _rms(self, x, w):
        xf = x.float()
        y = xf * self.torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * w.float()).to(self.dtype)

    def _rope(self, x, pos0: int):
        """Rotate-half rotary on [B, heads, S, D] at positions pos0..pos0+S-1."""
        S, half = x.shape[2], self.head_dim // 2
        c, s = self.cos[pos0:pos0 + S], self.sin[pos0:pos0 + S]
        xf = x.float()
        x1, x2 = xf[..., :half], xf[..., half:]
        return self.torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(self.dtype)

    def _lin(self, x, wb):
        return self.F.linear(x, wb[0], wb[1])

    def _input(self, v):
        if isinstance(v, self.torch.Tensor):
            return v
        return self.torch.from_numpy(np.ascontiguousarray(v)).to(self.device)

    def __call__(self, feeds: dict) -> list:
        with self.torch.inference_mode():
            return self._forward(feeds)

    def _forward(self, feeds: dict) -> list:
        torch, F = self.torch, self.F
        ids = np.asarray(feeds["input_ids"])
        mask = np.asarray(feeds["attention_mask"])
        B, S = ids.shape
        total = mask.shape[1]
        if not np.all(mask.sum(axis=1) == total):
            raise NotImplementedError("torch engine: padded batches")
        past_len = total - S
        H, KV, D = self.heads, self.kv_heads, self.head_dim
        x = self.embed[self._input(ids)]
        residual, skip = x, None
        h = self._rms(x, self.ln_in[0])
        present = {}
        causal = None
        if S > 1 and past_len:
            qpos = torch.arange(S, device=self.device)[:, None] + past_len
            causal = torch.arange(total, device=self.device)[None, :] <= qpos
        for i in range(self.layers):
            lin = self.lin[i]
            if i:
                residual = residual + skip
                h = self._rms(residual, self.ln_in[i])
            q = self._lin(h, lin["q"]).view(B, S, H, D).transpose(1, 2)
            k = self._lin(h, lin["k"]).view(B, S, KV, D).transpose(1, 2)
            v = self._lin(h, lin["v"]).view(B, S, KV, D).transpose(1, 2)
            q, k = self._rope(q, past_len), self._rope(k, past_len)
            if past_len:
                k = torch.cat([self._input(feeds[f"past_key_values.{i}.key"]), k], dim=2)
                v = torch.cat([self._input(feeds[f"past_key_values.{i}.value"]), v], dim=2)
            else:
                k, v = k.contiguous(), v.contiguous()
            present[f"present.{i}.key"], present[f"present.{i}.value"] = k, v
            if self.gqa_kw:
                kk, vv, kw = k, v, {"enable_gqa": True}
            else:
                kk, vv, kw = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1), {}
            o = F.scaled_dot_product_attention(q, kk, vv, attn_mask=causal, is_causal=S > 1 and not past_len,
                                               scale=self.scale, **kw)
            attn = self._lin(o.transpose(1, 2).reshape(B, S, H * D), lin["o"])
            residual = residual + attn
            h = self._rms(residual, self.ln_post[i])
            skip = self._lin(F.silu(self._lin(h, lin["gate"])) * self._lin(h, lin["up"]), lin["down"])
        h = self._rms(residual + skip, self.final_norm)
        present["logits"] = self._lin(h, self.lm_head)
        return [present[name] for name in self.outputs]

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()
