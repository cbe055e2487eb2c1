"""Generate text with onnxruntime-genai on the MLX execution provider.

    .venv/bin/python examples/genai_llm.py                       # writes a tiny random-weight model folder
    .venv/bin/python examples/genai_llm.py --model path/to/genai-folder --prompt "Hello"
    .venv/bin/python examples/genai_llm.py --config qwen2.5-0.5b --io-dtype float16 --share-buffer \
        --prompt-tokens 128 --new-tokens 64                     # a speed run at Qwen2.5-0.5B's shapes

Without --model, writes the tiny int4 decoder of examples/llm.py with its genai_config.json and a
byte-level BPE tokenizer (examples/genai_model.py) into --out and generates from it (random
weights: the text is gibberish; the point is the pipeline). With --model, any genai model folder
(e.g. one from onnxruntime-genai's model builder) runs on the EP: the script overrides the decoder's
providers with og.Config (the folder's genai_config.json is left as is).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))  # a clone without the wheel installed

import onnxruntime_genai as og  # noqa: E402

import onnxruntime_ep_mlx as mlx_ep  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="an existing genai model folder (default: write the tiny one)")
    ap.add_argument("--out", default="tiny-genai", help="where to write the tiny model folder")
    ap.add_argument("--prompt", default="the cat sat on the mat")
    ap.add_argument("--max-length", type=int, default=64, help="prompt + generated tokens")
    ap.add_argument("--share-buffer", action="store_true", help="past_present_share_buffer (written model)")
    ap.add_argument("--config", choices=["tiny", "qwen2.5-0.5b"], default="tiny",
                    help="the written model's shapes (examples/llm.py): tiny, or Qwen2.5-0.5B's (random weights)")
    ap.add_argument("--io-dtype", choices=["float32", "float16"], default="float32",
                    help="the written model's activations and KV cache")
    ap.add_argument("--prompt-tokens", type=int, default=0,
                    help="a prompt of this many random token ids instead of --prompt (speed runs)")
    ap.add_argument("--new-tokens", type=int, default=0,
                    help="generate exactly this many tokens (EOS masked; sets --max-length to prompt + this)")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="an MLX EP option, e.g. report=stderr or device=cpu (repeatable)")
    ap.add_argument("--cpu", action="store_true", help="run on ORT's CPU EP instead, for comparison")
    args = ap.parse_args()
    ep_options = dict(kv.split("=", 1) for kv in args.option)

    # 1. Register the EP library with genai (genai has its own ORT environment).
    og.register_execution_provider_library(mlx_ep.EP_NAME, mlx_ep.library_path())

    # 2. A model folder whose genai_config.json names the EP, or an existing one re-targeted.
    if args.model:
        config = og.Config(args.model)
        config.clear_providers()
        if not args.cpu:
            config.append_provider(mlx_ep.EP_NAME)
            for key, value in ep_options.items():
                config.set_provider_option(mlx_ep.EP_NAME, key, value)
        model = og.Model(config)
    else:
        from genai_model import save_genai_folder
        from llm import QWEN25_05B, TINY
        cfg = QWEN25_05B if args.config == "qwen2.5-0.5b" else TINY
        if args.new_tokens:
            prompt_len = args.prompt_tokens or len(args.prompt.encode())  # the byte-level tokenizer: a token per byte
            args.max_length = prompt_len + args.new_tokens
        folder = save_genai_folder(args.out, cfg, share_buffer=args.share_buffer, max_length=args.max_length,
                                   provider=None if args.cpu else mlx_ep.EP_NAME, ep_options=ep_options,
                                   min_length=args.max_length if args.new_tokens else 0, io_dtype=args.io_dtype)
        print(f"wrote {folder}/ (model.onnx, genai_config.json, tokenizer.json, tokenizer_config.json)")
        model = og.Model(folder)

    # 3. Tokenize, generate greedily, stream the text.
    tokenizer = og.Tokenizer(model)
    stream = tokenizer.create_stream()
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=args.max_length, do_sample=False)
    generator = og.Generator(model, params)
    if args.prompt_tokens:
        import numpy as np
        # ids below 256: inside any vocabulary, the byte-level one of the written folders included
        ids = np.random.default_rng(1).integers(0, 256, size=args.prompt_tokens, dtype=np.int32)
    else:
        ids = tokenizer.encode(args.prompt)
        print(args.prompt, end="", flush=True)
    start = time.perf_counter()
    generator.append_tokens(ids)  # the prompt's Run (prefill)
    prefill = time.perf_counter() - start
    times = []
    while not generator.is_done():
        t0 = time.perf_counter()
        generator.generate_next_token()
        times.append(time.perf_counter() - t0)
        if not args.prompt_tokens:
            print(stream.decode(int(generator.get_next_tokens()[0])), end="", flush=True)
    n, elapsed = len(times), time.perf_counter() - start
    decode = sorted(times[1:])[len(times[1:]) // 2] if len(times) > 1 else float("nan")
    print(f"\n[{n} tokens in {elapsed:.2f} s, {n / elapsed:.1f} tok/s overall; prompt {prefill * 1e3:.1f} ms, "
          f"decode median {decode * 1e3:.2f} ms ({1 / decode:.1f} tok/s); "
          f"{'CPU EP' if args.cpu else mlx_ep.EP_NAME}]")
    del generator, params, stream, tokenizer, model  # ends the session: the EP writes its run report


if __name__ == "__main__":
    main()
