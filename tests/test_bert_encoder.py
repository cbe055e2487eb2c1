"""The BERT-like encoder of examples/bert.py, as ORT's transformers optimizer emits it
(EmbedLayerNormalization, Attention or MultiHeadAttention with a key padding mask,
SkipLayerNormalization, BiasGelu or FastGelu, MatMul), runs entirely on MLX in strict mode and
matches ORT's CPU EP within 1e-4 in float32, with padding in the attention mask."""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import onnxruntime as ort
import pytest

import onnxruntime_ep_mlx as mlx_ep

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from bert import make_bert, make_inputs  # noqa: E402

HIDDEN, HEADS, FFN, VOCAB = 64, 4, 256, 512

# (attention op, mask form, gelu op, input dtype)
FORMS = [
    ("Attention", "index", "BiasGelu", "int32"),
    ("Attention", "raw", "FastGelu", "int64"),
    ("MultiHeadAttention", "raw", "BiasGelu", "int64"),
    ("MultiHeadAttention", "index", "FastGelu", "int32"),
]


@pytest.fixture(scope="module", params=FORMS, ids=["-".join(f) for f in FORMS])
def encoder(request):
    attention, mask, gelu, input_dtype = request.param
    model = make_bert(hidden=HIDDEN, heads=HEADS, ffn=FFN, layers=2, vocab=VOCAB, attention=attention, mask=mask,
                      gelu=gelu, input_dtype=input_dtype, seed=0)
    return request.param, model


def test_encoder_claims_every_node(encoder, tmp_path):
    form, model = encoder
    report = tmp_path / "report.txt"
    mlx_ep.session(model, options={"report": str(report)}, strict=True)
    text = report.read_text()
    assert re.search(r"declined:\s*0\b", text), f"{form}: nodes declined\n{text}"


def test_encoder_strict_parity_with_padding(encoder):
    form, model = encoder
    input_dtype = form[3]
    mlx = mlx_ep.session(model, strict=True)
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for batch, seq, lengths in [(2, 16, [16, 9]), (3, 12, [1, 12, 5]), (1, 7, None)]:
        feeds = make_inputs(batch=batch, seq=seq, lengths=lengths, vocab=VOCAB, input_dtype=input_dtype, seed=seq)
        got = mlx.run(None, feeds)
        want = cpu.run(None, feeds)
        for name, g, w in zip(("last_hidden_state", "pooler_output"), got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, \
                f"{form} {name}: {g.shape}/{g.dtype} vs {w.shape}/{w.dtype}"
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{form} {name}: batch {batch}, seq {seq}, lengths {lengths}")
