"""An onnxruntime-genai model folder around the decoder of examples/llm.py (random weights).

    from genai_model import save_genai_folder
    save_genai_folder("tiny-genai", share_buffer=True, ep_options={"report": "stderr"})

writes what `onnxruntime_genai.Model(folder)` loads:

    model.onnx             the genai-layout decoder (input_ids, attention_mask, past_key_values.%d.key/value
                           -> logits, present.%d.key/value), from examples/llm.py
    genai_config.json      model type "qwen2", the decoder's input/output names, greedy search, and
                           decoder session_options whose provider_options name the EP:
                           "provider_options": [{"MLXExecutionProvider": {<EP options>}}]
    tokenizer.json         a small byte-level BPE tokenizer written here (no download), vocab = the
    tokenizer_config.json  model's vocab: printable ASCII, newline, 31 merges, <|endoftext|>

The EP library must be registered with genai before the Model is created (genai then selects it
by name through ORT's plugin-EP API):

    import onnxruntime_genai as og, onnxruntime_ep_mlx as mlx_ep
    og.register_execution_provider_library(mlx_ep.EP_NAME, mlx_ep.library_path())

(`register_with_genai()` below does that once per process: genai refuses a second registration.)

provider=None writes a config without provider_options: genai then runs on ORT's CPU EP.
"""
from __future__ import annotations

import json
import os

from llm import TINY, LLMConfig, make_llm

EP_NAME = "MLXExecutionProvider"
_registered = False


def register_with_genai(og=None) -> str:
    """Registers the EP library with onnxruntime-genai under EP_NAME, once per process (genai
    raises "EP library is already registered" on a second call); returns the library's path."""
    global _registered
    import onnxruntime_ep_mlx as mlx_ep
    if og is None:
        import onnxruntime_genai as og
    path = mlx_ep.library_path()
    if not _registered:
        try:
            og.register_execution_provider_library(mlx_ep.EP_NAME, path)
        except Exception as e:  # registered by other code in this process
            if "already registered" not in str(e):
                raise
        _registered = True
    return path

# GPT-2's byte-to-unicode map for the bytes this tokenizer uses: printable ASCII is itself, space is
# "Ġ" (U+0120), newline "Ċ" (U+010A).
_SPACE, _NEWLINE = "\u0120", "\u010a"
_MERGES = [("Ġ", "t"), ("t", "h"), ("h", "e"), ("i", "n"), ("e", "r"), ("a", "n"), ("r", "e"), ("o", "n"),
           ("a", "t"), ("e", "n"), ("n", "d"), ("t", "i"), ("e", "s"), ("o", "r"), ("t", "e"), ("o", "f"),
           ("e", "d"), ("i", "s"), ("i", "t"), ("a", "l"), ("a", "r"), ("s", "t"), ("t", "o"), ("n", "t"),
           ("n", "g"), ("s", "e"), ("h", "a"), ("a", "s"), ("o", "u"), ("l", "e"), ("Ġ", "a")]
EOS_TOKEN = "<|endoftext|>"


def tokenizer_vocab(vocab_size: int) -> dict[str, int]:
    """Byte-level BPE vocabulary: the 95 printable ASCII bytes (space as "Ġ"), newline, merged
    pairs up to vocab_size - 1, and <|endoftext|> as the last id. A larger vocabulary (a real
    model's shapes, e.g. Qwen2.5's 151936) is filled with tokens no merge produces ("<extra_N>"):
    encoding never yields them, decoding spells them out."""
    base = [_SPACE if c == " " else c for c in map(chr, range(0x20, 0x7F))] + [_NEWLINE]
    merged = ["".join(m) for m in _MERGES]
    tokens = (base + merged)[:max(vocab_size - 1, 0)]
    tokens += [f"<extra_{i}>" for i in range(vocab_size - 1 - len(tokens))]
    return {t: i for i, t in enumerate(tokens + [EOS_TOKEN])}


def tokenizer_json(vocab_size: int) -> dict:
    """A Hugging Face tokenizer.json (GPT-2 style byte-level BPE) that ORT Extensions can load."""
    vocab = tokenizer_vocab(vocab_size)
    merges = [f"{a} {b}" for a, b in _MERGES if a + b in vocab]
    eos = vocab[EOS_TOKEN]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": eos, "content": EOS_TOKEN, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": merges},
    }


def genai_config(cfg: LLMConfig, share_buffer: bool, max_length: int, provider: str | None = EP_NAME,
                 ep_options: dict | None = None, strict: bool = True, min_length: int = 0,
                 filename: str = "model.onnx") -> dict:
    """genai_config.json's content for the decoder of examples/llm.py.

    provider: the EP genai appends for the decoder session (None: ORT's CPU EP alone).
    ep_options: the EP's options (strings), e.g. {"report": "/tmp/report.txt", "device": "cpu"}.
    strict: session.disable_cpu_ep_fallback=1 (any node the EP declines fails the session).
    min_length: genai masks the EOS token until the sequence is this long."""
    session_options = {"log_id": "onnxruntime-genai"}
    if provider:
        session_options["provider_options"] = [{provider: {k: str(v) for k, v in (ep_options or {}).items()}}]
        if strict:
            # session_options keys genai does not know become session config entries
            session_options["session.disable_cpu_ep_fallback"] = "1"
    eos = cfg.vocab - 1
    return {
        "model": {
            "bos_token_id": eos,
            "context_length": cfg.context,
            "decoder": {
                "session_options": session_options,
                "filename": filename,
                "head_size": cfg.head_dim,
                "hidden_size": cfg.hidden,
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "past_key_names": "past_key_values.%d.key",
                           "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
                "num_attention_heads": cfg.heads,
                "num_hidden_layers": cfg.layers,
                "num_key_value_heads": cfg.kv_heads,
            },
            "eos_token_id": eos,
            "pad_token_id": eos,
            "type": "qwen2",
            "vocab_size": cfg.vocab,
        },
        "search": {
            "diversity_penalty": 0.0, "do_sample": False, "early_stopping": True, "length_penalty": 1.0,
            "max_length": max_length, "min_length": min_length, "no_repeat_ngram_size": 0, "num_beams": 1,
            "num_return_sequences": 1, "past_present_share_buffer": bool(share_buffer),
            "repetition_penalty": 1.0, "temperature": 1.0, "top_k": 1, "top_p": 1.0,
        },
    }


def save_genai_folder(path: str, cfg: LLMConfig = TINY, share_buffer: bool = False, max_length: int = 64,
                      provider: str | None = EP_NAME, ep_options: dict | None = None, strict: bool = True,
                      min_length: int = 0, weights: str = "int4", io_dtype: str = "float32",
                      block_size: int = 32, model: bytes | None = None) -> str:
    """Writes model.onnx, genai_config.json, tokenizer.json and tokenizer_config.json into `path`
    (created if needed); returns `path`. `model` reuses serialized decoder bytes (else make_llm)."""
    os.makedirs(path, exist_ok=True)
    if model is None:
        model = make_llm(cfg, weights=weights, io_dtype=io_dtype, block_size=block_size)
    with open(os.path.join(path, "model.onnx"), "wb") as f:
        f.write(model)
    config = genai_config(cfg, share_buffer, max_length, provider, ep_options, strict, min_length)
    files = {
        "genai_config.json": config,
        "tokenizer.json": tokenizer_json(cfg.vocab),
        "tokenizer_config.json": {"add_bos_token": False, "add_prefix_space": False, "bos_token": EOS_TOKEN,
                                  "clean_up_tokenization_spaces": False, "eos_token": EOS_TOKEN,
                                  "model_max_length": cfg.context, "pad_token": EOS_TOKEN,
                                  "tokenizer_class": "GPT2Tokenizer", "unk_token": EOS_TOKEN},
    }
    for name, content in files.items():
        with open(os.path.join(path, name), "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2, ensure_ascii=False)
    return path
