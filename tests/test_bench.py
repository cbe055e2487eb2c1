"""bench/run.py's engine lists and its GPU engines on a CPU machine (ORT_EP_MLX_BENCH_CPU_STANDIN:
ORT's CPU EP stands in for the CUDA EP, IOBinding binds to "cpu", torch runs on the CPU). The torch
engine's check is skipped where torch is not installed (CI)."""
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
RUN = os.path.join(ROOT, "bench", "run.py")

# bench/run.py by path: tools/fuzz/run.py is another module named `run` in this test session
_spec = importlib.util.spec_from_file_location("bench_run", RUN)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_engine_lists():
    assert bench.engines_for("cpu") == ["mlx_ep", "ort_cpu", "mlx_direct"]
    gpu = bench.engines_for("gpu")
    assert gpu[:6] == ["mlx_ep", "mlx_ep_io", "mlx_ep_shared", "ort_cuda", "ort_cuda_io", "ort_cuda_shared"]
    assert {"mlx_direct", "torch"} <= set(gpu)
    assert bench.engines_for("gpu", "torch,mlx_ep") == ["mlx_ep", "torch"]  # the device's order
    with pytest.raises(ValueError):
        bench.engines_for("cpu", "torch")


def _verify(engines: str, io_dtype: str = "float32"):
    env = dict(os.environ, ORT_EP_MLX_BENCH_CPU_STANDIN="1")
    p = subprocess.run([sys.executable, RUN, "--verify", "--device", "gpu", "--engines", engines, "--workloads",
                        "decoder_prefill128,decoder_decode_loop64", "--decoder-config", "tiny", "--io-dtype", io_dtype],
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_verify_iobinding_flows_on_cpu():
    out = _verify("mlx_ep_io,ort_cuda_io", "float16")
    assert out.count("mlx_ep_io") == 2 and "FAIL" not in out and "64/64 steps" in out


def test_verify_shared_kv_flows_on_cpu():
    """onnxruntime-genai's shared KV buffer (host buffers stand in for device memory): the loop's
    logits, tokens and the last present rows of the buffers agree with the reference; the prefill
    (no loop) is n/a for these flows."""
    out = _verify("mlx_ep_shared,ort_cuda_shared", "float16")
    assert out.count("mlx_ep_shared") == 2 and "FAIL" not in out and "64/64 steps" in out, out
    assert "decode loop only" in out, out


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_verify_torch_engine_on_cpu():
    out = _verify("torch")
    assert out.count("torch") == 2 and "n/a" not in out and "FAIL" not in out


def test_decode_probe_phases_from_trace(tmp_path):
    """bench/decode_probe.py --phases: the EP's trace events of each Run (bind, graph, eval, copy
    out, nested in time inside their Run) become per-phase medians over the Runs it keeps."""
    spec = importlib.util.spec_from_file_location("decode_probe", os.path.join(ROOT, "bench", "decode_probe.py"))
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    events = []
    for i, (eval_us, copy_us) in enumerate([(9000, 900), (4000, 100), (5000, 300), (6000, 200)]):
        t = i * 100000
        events += [{"name": "bind", "ts": t + 1, "dur": 10}, {"name": "graph", "ts": t + 20, "dur": 1000},
                   {"name": "eval", "ts": t + 1100, "dur": eval_us},
                   {"name": "copy out", "ts": t + 1200 + eval_us, "dur": copy_us},
                   {"name": "Run", "ts": t, "dur": 1300 + eval_us + copy_us}]
    path = tmp_path / "trace.json"
    path.write_text(__import__("json").dumps({"traceEvents": events}))
    text = probe.phase_medians(str(path), skip=1)
    assert text == "Run 6.60, bind 0.01, graph 1.00, eval 5.00, copy out 0.20 (medians in ms over 3 Runs)", text


def test_step_split_on_the_host_stand_in():
    """bench/step_split.py on the host stand-in of device memory: every column of a step's split
    is printed, and the EP's own Run (from its trace) lies within ORT's run_with_iobinding."""
    env = dict(os.environ, ORT_EP_MLX_DEVICE_MEMORY="host")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "step_split.py"), "--engine", "mlx",
                        "--config", "tiny", "--steps", "8", "--loops", "1", "--io-device", "cpu"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    import re
    split = dict(re.findall(r"(\w+) (\d+\.\d+)", p.stdout.splitlines()[0].split("(ms):")[1]))
    assert set(split) >= {"bind", "run", "outputs", "numpy", "argmax", "step"}, p.stdout
    ep_run = float(re.search(r"EP Run (\d+\.\d+) ms", p.stdout).group(1))
    assert 0 < ep_run <= float(split["run"]), p.stdout
