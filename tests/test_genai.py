"""onnxruntime-genai drives the EP end to end: the tiny int4 decoder of examples/llm.py in a genai
model folder (examples/genai_model.py: genai_config.json whose decoder provider_options name
MLXExecutionProvider, a byte-level BPE tokenizer written locally), greedy generation with
og.Model/og.Generator on the MLX EP (strict: session.disable_cpu_ep_fallback=1) and on ORT's CPU EP
(a second folder without provider_options), token for token, with genai's KV cache layout both
ways: a growing cache (past_present_share_buffer false) and one fixed-size buffer that past and
present share (true). The EP's run report (its `report` option, written when genai releases the
session) says how the decode loop ran."""
from __future__ import annotations

import gc
import os
import re
import sys

import pytest

og = pytest.importorskip("onnxruntime_genai")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from genai_model import EP_NAME, register_with_genai, save_genai_folder  # noqa: E402
from llm import TINY, make_llm  # noqa: E402

PROMPT = "the cat sat on the mat"
NEW_TOKENS = 24


def report_stats(text):
    line = text.split("run report:")[1]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


def generate(folder):
    """Greedy generation of NEW_TOKENS after PROMPT; returns (prompt ids, new tokens, decoded text).
    Every genai object is released before returning, so the EP's session ends (and writes its report)."""
    model = og.Model(folder)
    tokenizer = og.Tokenizer(model)
    ids = [int(t) for t in tokenizer.encode(PROMPT)]
    params = og.GeneratorParams(model)
    generator = og.Generator(model, params)
    generator.append_tokens(ids)
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    text = tokenizer.decode(tokens)
    del generator, params, tokenizer, model
    gc.collect()
    return ids, tokens, text


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Per share_buffer: (MLX tokens, CPU tokens, prompt ids, report text), computed once."""
    register_with_genai(og)
    decoder = make_llm(TINY, weights="int4", block_size=32)
    n_prompt = 15  # len(tokenizer.encode(PROMPT)), checked below
    length = dict(max_length=n_prompt + NEW_TOKENS, min_length=n_prompt + NEW_TOKENS)  # no early EOS
    out = {}
    for share in (False, True):
        base = tmp_path_factory.mktemp(f"genai_share{int(share)}")
        report = base / "report.txt"
        mlx_dir = save_genai_folder(str(base / "mlx"), TINY, share_buffer=share, model=decoder,
                                    ep_options={"report": str(report)}, strict=True, **length)
        cpu_dir = save_genai_folder(str(base / "cpu"), TINY, share_buffer=share, model=decoder, provider=None,
                                    **length)
        ids, mlx_tokens, mlx_text = generate(mlx_dir)
        cpu_ids, cpu_tokens, cpu_text = generate(cpu_dir)
        assert ids == cpu_ids and len(ids) == n_prompt
        out[share] = dict(ids=ids, mlx=mlx_tokens, cpu=cpu_tokens, mlx_text=mlx_text, cpu_text=cpu_text,
                          report=report.read_text())
        out["cpu_dir"] = cpu_dir
    return out


@pytest.mark.parametrize("share_buffer", [False, True], ids=["growing-kv", "shared-buffer"])
def test_genai_matches_cpu_ep(runs, share_buffer):
    r = runs[share_buffer]
    assert len(r["mlx"]) == NEW_TOKENS
    assert r["mlx"] == r["cpu"], f"MLX {r['mlx']}\nCPU {r['cpu']}"
    assert r["mlx_text"] == r["cpu_text"]
    # every node on MLX, one cluster (and strict mode would have failed the session otherwise)
    assert "nodes: 41, claimed: 41, declined: 0, clusters: 1" in r["report"], r["report"]
    stats = report_stats(r["report"])
    assert stats["runs"] == NEW_TOKENS  # the prefill, then one Run per further token
    assert stats["padded_runs"] == NEW_TOKENS - 1
    print(f"share_buffer={share_buffer}:", {k: stats[k] for k in ("runs", "sig_misses", "traces", "eager_runs", "padded_runs", "host_reads")})


def test_genai_growing_kv_traces_once(runs):
    """past_present_share_buffer false: decode buckets pad the growing KV cache and attention mask,
    so the decode loop keeps one signature: one trace per generation."""
    stats = report_stats(runs[False]["report"])
    assert stats["traces"] == 1, runs[False]["report"]
    assert stats["sig_misses"] <= 2 and stats["eager_runs"] <= 2, runs[False]["report"]


def test_genai_shared_buffer_one_signature(runs):
    """past_present_share_buffer true (what genai uses with GPU EPs): past and present are one buffer
    of max_length rows and only the mask grows; decode buckets pad the mask alone, up to the
    buffer's length, so the decode loop keeps one signature and traces once."""
    stats = report_stats(runs[True]["report"])
    assert stats["traces"] == 1 and stats["sig_misses"] == 2, runs[True]["report"]
    assert "when only these grow: attention_mask[1]" in runs[True]["report"]


def test_genai_tokenizer_round_trip(runs):
    """The locally written byte-level BPE tokenizer: merges apply, decode inverts encode."""
    model = og.Model(runs["cpu_dir"])
    tokenizer = og.Tokenizer(model)
    ids = tokenizer.encode(PROMPT)
    assert len(ids) < len(PROMPT)  # merges ("th", "at", ...) were applied
    assert tokenizer.decode(ids) == PROMPT
    del tokenizer, model


def test_genai_passes_ep_options(tmp_path):
    """genai hands the provider_options to the EP: an unknown option key fails model creation with
    the EP's message."""
    register_with_genai(og)
    folder = save_genai_folder(str(tmp_path / "bad"), TINY, ep_options={"devcie": "gpu"})
    with pytest.raises(Exception, match="unknown option 'devcie'"):
        og.Model(folder)


def test_genai_strict_mode_reaches_ort(tmp_path):
    """genai_config.json's session_options entry session.disable_cpu_ep_fallback=1 reaches ORT: a
    decoder with one node the EP declines (com.microsoft::Inverse on a side output) fails to load
    in strict mode and loads (that node on ORT's CPU EP) without it."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from llm import build_llm

    register_with_genai(og)
    model = build_llm(TINY, weights="int4", block_size=32)
    model.graph.initializer.append(numpy_helper.from_array(np.eye(2, dtype=np.float32), "side_matrix"))
    model.graph.node.append(helper.make_node("Inverse", ["side_matrix"], ["side_inverse"], domain="com.microsoft"))
    model.graph.output.append(helper.make_tensor_value_info("side_inverse", TensorProto.FLOAT, [2, 2]))
    decoder = model.SerializeToString()
    strict = save_genai_folder(str(tmp_path / "strict"), TINY, model=decoder, strict=True)
    with pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        og.Model(strict)
    lenient = save_genai_folder(str(tmp_path / "lenient"), TINY, model=decoder, strict=False)
    m = og.Model(lenient)
    del m
