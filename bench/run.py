#!/usr/bin/env python3
"""Benchmark harness (a program, not a test): for each workload, the time per Run after warm-up
for (1) ORT with MLXExecutionProvider, (2) ORT's CPU EP and (3) the same computation written
directly against MLX (bench/mlx_reference.py), their ratios, session creation time, first-Run
latency and peak memory. Writes docs/PERFORMANCE.md, keeping its "## Session creation" section
(written by bench/session_creation.py).

    bench/run.py [--workloads a,b] [--runs N] [--warmup N] [--device cpu|gpu] [--out FILE]
                 [--decoder-config tiny|mid|qwen2.5-0.5b] [--io-dtype float32|float16]
                 [--engines a,b] [--verify]

Each (workload, engine) pair lives in its own worker process, so peak memory, session creation
and the first Run are its own; the three workers of a workload start one after the other and then
take turns: the runs are split into rounds, each round runs a batch on every engine (the order
rotating from round to round), and an engine's time is the median of its per-round medians. Where
any engine's warmed-up Run is shorter than PRIME_BELOW_S, every engine's batch starts with an
untimed Run (a batch follows the other engines' turns; the same rule for all, so that no engine's
time includes a cold start its peers were spared). Load
from elsewhere on the machine and slow drift then weigh on all engines alike, which keeps the
sub-millisecond overhead probes (tiny_add, mlp10) steady. The spread in brackets is the 10th-90th
percentile of all of an engine's runs.

--runs/--warmup default to the workload's own counts (workloads.default_runs): 2000/100 for the
overhead probes, 50/5 for the others, fewer for the slow decoder workloads. The decoder workloads
build examples/llm.py's int4 decoder in the config named by --decoder-config (default `mid`;
qwen2.5-0.5b is the real shape but takes MLX's CPU backend over a minute per prefill). --verify
runs each workload once per engine instead and checks every output of the MLX EP and of MLX
direct against ORT's CPU EP (max |difference| within 1e-3 of the reference's max |value|), one
line per workload; the exit status says whether all passed.

decoder_decode_loop64 is a whole greedy decode loop per Run: 64 steps after the 128-token
prompt's KV (workloads.decode_loop), each feeding the previous step's present.* back as the next
past with a growing attention mask, so the MLX EP sees KV inputs that grow every step (its decode
buckets pad them, src/runtime/buckets.c). Its rows also give tokens/s (64 / median seconds), and
the MLX EP's worker runs with option report=<file> and reports the run report's traces and
padded_runs over all of its Runs ("decode loop: ..." under the table). --verify compares the
logits of every step and the last present.*, every engine fed ORT CPU EP's greedy tokens.

The issue's acceptance, stated in the report: every workload's EP throughput at least 0.95x MLX
direct's (MLX direct median / EP median), and the per-Run EP overhead on the 10-node graph
(mlp10: EP median minus MLX direct median) at most 30 us.

--device gpu (issue 9) runs more engines (GPU_ENGINES; --engines picks some): mlx_ep, mlx_ep_io
(the MLX EP through IOBinding: NumPy inputs bound as CPU inputs, outputs bound to device
MLX_EP_IO_DEVICE, "cuda" = OrtDevice(GPU, vendor 0x10DE, id 0), which env
ORT_EP_MLX_BENCH_IO_DEVICE overrides), ort_cuda and ort_cuda_io (ORT's CUDA EP from
onnxruntime-gpu on the same file, plain and through the same binding; preload_dlls() first),
mlx_direct, torch (bench/torch_reference.py: the decoder in PyTorch eager, decoder workloads only)
and ort_cpu. In the decode loop the IOBinding engines bind each step's present.* OrtValues as the
next past (no host copy) and only the logits to the CPU; torch keeps its cache as device tensors;
mlx_ep_shared and ort_cuda_shared run onnxruntime-genai's shared KV buffer (one device buffer of
SHARED_KV_ROWS rows per past/present pair bound as both, written in place; decode loop only).
An engine this machine cannot run (no onnxruntime-gpu CUDA EP, no torch, no CUDA) is "n/a
(reason)" in the table, and on the GPU an engine that fails is an error cell while the others go
on. --io-dtype float16 builds the decoder workloads with float16 activations and KV cache (what GPU
deployments run; default float32). The GPU report (default docs/PERFORMANCE_GPU.md, --out to
change) has three tables (times; the MLX EP's faster flow over its peers as throughput ratios;
session creation / first Run of every engine) and issue 9's acceptance lines: decode loop with
IOBinding >= 1.0x ORT CUDA EP with IOBinding (goal), >= 0.95x MLX direct, >= 2.5x PyTorch eager;
prefill at most 1.5x ORT CUDA EP's time; first Run at most 5 s; every workload >= 0.95x MLX
direct. bench/gpu_session.sh runs the whole GPU session. --verify runs every engine in a process
of its own; its tolerance is 1e-3 for float32 activations and 2e-2 for float16
(verify_tolerance). ORT_EP_MLX_BENCH_CPU_STANDIN=1 tests the GPU engines on a machine without a
GPU: MLX on its CPU, ORT's CPU EP standing in for the CUDA EP, IOBinding bound to "cpu", torch on
the CPU (tests/test_bench.py).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
CPU_ENGINES = ["mlx_ep", "ort_cpu", "mlx_direct"]
# --device gpu: the MLX EP plain and with IOBinding, its peers on the same file and machine.
GPU_ENGINES = ["mlx_ep", "mlx_ep_io", "mlx_ep_shared", "ort_cuda", "ort_cuda_io", "ort_cuda_shared", "mlx_direct",
               "torch", "ort_cpu"]
ENGINE_LABELS = {"mlx_ep": "MLX EP", "mlx_ep_io": "MLX EP + IOBinding", "mlx_ep_shared": "MLX EP + shared KV",
                 "ort_cuda": "ORT CUDA EP", "ort_cuda_io": "ORT CUDA EP + IOBinding",
                 "ort_cuda_shared": "ORT CUDA EP + shared KV", "mlx_direct": "MLX direct", "torch": "PyTorch eager",
                 "ort_cpu": "ORT CPU EP"}
MLX_EPS = ("mlx_ep", "mlx_ep_io", "mlx_ep_shared")
# onnxruntime-genai's past_present_share_buffer: the rows of each past/present buffer
SHARED_KV_ROWS = 1024
# The device name IOBinding binds the MLX EP's outputs to: Python's bind_output maps "cuda" to
# OrtDevice(GPU, vendor 0x10DE NVIDIA, id 0), the memory the EP registers on MLX's CUDA backend
# (src/ep/device_memory.c). ORT's CUDA EP binds to "cuda" too.
MLX_EP_IO_DEVICE = os.environ.get("ORT_EP_MLX_BENCH_IO_DEVICE", "cuda")
ORT_CUDA_IO_DEVICE = "cuda"
# Testing the GPU engines on a machine without one: ORT_EP_MLX_BENCH_CPU_STANDIN=1 runs MLX on its
# CPU, "ort_cuda*" on ORT's CPU EP, torch on the CPU and binds IOBinding outputs to "cpu".
CPU_STANDIN = os.environ.get("ORT_EP_MLX_BENCH_CPU_STANDIN") == "1"
THROUGHPUT_MIN = 0.95   # acceptance: EP throughput / MLX direct throughput, every workload
OVERHEAD_MAX_US = 30.0  # acceptance: per-Run EP overhead over MLX direct on mlp10
# GPU acceptance (issue 9), decoder at Qwen2.5-0.5B shapes, float16:
GPU_LOOP_VS_CUDA_IO = 1.0    # decode loop with IOBinding >= 1.0x ORT CUDA EP with IOBinding (goal)
GPU_LOOP_VS_DIRECT = 0.95    # ... never below 0.95x MLX direct
GPU_LOOP_VS_TORCH = 2.5      # ... nor below 2.5x PyTorch eager
GPU_PREFILL_MAX = 1.5        # prefill at most 1.5x ORT CUDA EP's time
GPU_FIRST_RUN_MAX_S = 5.0    # first Run at most 5 s cold
# Between two engines' batches: ORT's intra-op threads spin for a while after a Run, and must not
# steal a core from the next engine (2-core machines).
PAUSE_S = 0.01
PRIME_BELOW_S = 0.01  # a workload where some engine's Run is shorter than this primes every batch


def engines_for(device: str, only: str | None = None) -> list[str]:
    """The engines of a bench on `device` (--engines narrows them, in the device's order)."""
    engines = GPU_ENGINES if device == "gpu" else CPU_ENGINES
    if not only:
        return list(engines)
    chosen = only.split(",")
    unknown = [e for e in chosen if e not in engines]
    if unknown:
        raise ValueError(f"unknown engine(s) for --device {device}: {', '.join(unknown)} (have {', '.join(engines)})")
    return [e for e in engines if e in chosen]


class Unavailable(Exception):
    """An engine this machine cannot run (package or device missing): reported as n/a."""


def _ort_cuda_session(model: bytes):
    """ORT's CUDA EP session (onnxruntime-gpu), or Unavailable. ORT silently falls back to its CPU
    EP when the CUDA EP does not load: checked."""
    import onnxruntime as ort
    if CPU_STANDIN:
        return ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    if hasattr(ort, "preload_dlls"):
        try:
            ort.preload_dlls()  # CUDA and cuDNN from the nvidia-* wheels
        except Exception:  # noqa: BLE001 - the provider check below says what is missing
            pass
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise Unavailable(f"no CUDA EP in onnxruntime {ort.__version__}: onnxruntime-gpu not installed")
    sess = ort.InferenceSession(model, providers=["CUDAExecutionProvider"])
    if sess.get_providers()[:1] != ["CUDAExecutionProvider"]:
        raise Unavailable("CUDA EP did not load (CUDA/cuDNN libraries?)")
    return sess


def _torch_decoder(model: bytes, workload: str):
    from workloads import DECODER_WORKLOADS
    if workload not in DECODER_WORKLOADS:
        raise Unavailable("decoder workloads only")
    try:
        import torch
    except ImportError:
        raise Unavailable("torch not installed") from None
    if not CPU_STANDIN and not torch.cuda.is_available():
        raise Unavailable("torch sees no CUDA device")
    from torch_reference import TorchDecoder
    return TorchDecoder(model, "cpu" if CPU_STANDIN else "cuda")


class IoBound:
    """A session run through IOBinding: NumPy feeds bound as CPU inputs, OrtValues (a previous
    Run's outputs) bound as they are, outputs bound to `device` (ORT allocates them there). In a
    decode loop (`loop`) the logits are bound to the CPU, the only output the host reads; the
    present.* stay on the device and come back as the next step's past."""

    def __init__(self, sess, device: str, loop: bool):
        import onnxruntime as ort
        self.ort, self.sess, self.device, self.loop = ort, sess, device, loop
        self.outputs = [o.name for o in sess.get_outputs()]
        self.io = sess.io_binding()
        self.last = []

    def __call__(self, feeds: dict) -> list:
        io = self.io
        io.clear_binding_inputs()
        io.clear_binding_outputs()
        for name, v in feeds.items():
            if isinstance(v, self.ort.OrtValue):
                io.bind_ortvalue_input(name, v)
            else:
                io.bind_cpu_input(name, v)
        for i, name in enumerate(self.outputs):
            io.bind_output(name, "cpu" if self.loop and i == 0 else self.device)
        self.sess.run_with_iobinding(io)
        self.last = io.get_outputs()
        if self.loop:
            return [self.last[0].numpy()] + self.last[1:]
        return list(self.last)

    def host(self, v):
        """An output of the last Run as a NumPy array (copied through ORT's data transfer)."""
        if not isinstance(v, self.ort.OrtValue):
            return np_asarray(v)
        for i, o in enumerate(self.last):
            if o is v:
                if not hasattr(self, "_host_copy") or self._host_copy[0] is not self.last:
                    self._host_copy = (self.last, self.io.copy_outputs_to_cpu())
                return self._host_copy[1][i]
        return v.numpy()


class SharedKV:
    """onnxruntime-genai's shared KV buffer in a decode loop (past_present_share_buffer, what genai
    runs on GPU EPs): one buffer of SHARED_KV_ROWS rows per past/present pair in the engine's
    device memory (the MLX EP's own, ORT's CUDA EP's "cuda"; host memory where there is none),
    bound as both the step's past and its present, so a step writes its new rows in place and only
    the logits come back to the host. A loop starts by copying the prompt's KV (the first step's
    past feeds, NumPy) into the buffers' first rows; later steps' past feeds are the buffers."""

    def __init__(self, sess, engine: str):
        import onnxruntime as ort
        self.ort, self.sess, self.engine = ort, sess, engine
        self.outputs = [o.name for o in sess.get_outputs()]
        self.pasts = [n.replace("present", "past_key_values") for n in self.outputs[1:]]
        self.io = sess.io_binding()
        self.bufs, self.rows = None, 0

    def _device_buffer(self, shape, dtype):
        ort = self.ort
        if self.engine == "mlx_ep_shared" and not CPU_STANDIN:
            import onnxruntime_ep_mlx as mlx_ep
            devices = [d for d in ort.get_ep_devices() if d.ep_name == mlx_ep.ep_name()]
            mi = devices[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT) if devices else None
            if mi is not None:
                return ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, memory_info=mi)
        if self.engine == "ort_cuda_shared" and not CPU_STANDIN:
            return ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, "cuda", 0)
        import numpy as np
        return ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, dtype))

    def _start(self, feeds: dict) -> None:
        import numpy as np
        first = feeds[self.pasts[0]]
        shape = (first.shape[0], first.shape[1], SHARED_KV_ROWS, first.shape[3])
        if self.bufs is None:
            self.bufs = [self._device_buffer(shape, first.dtype) for _ in self.pasts]
        for name, buf in zip(self.pasts, self.bufs):
            host = np.zeros(shape, first.dtype)
            host[:, :, :feeds[name].shape[2]] = feeds[name]
            if buf.device_name() == "cpu":
                buf.update_inplace(host)
            else:
                self.ort.copy_tensors([self.ort.OrtValue.ortvalue_from_numpy(host)], [buf])

    def __call__(self, feeds: dict) -> list:
        if not isinstance(feeds[self.pasts[0]], self.ort.OrtValue):
            self._start(feeds)
        io = self.io
        io.clear_binding_inputs()
        io.clear_binding_outputs()
        io.bind_cpu_input("input_ids", feeds["input_ids"])
        io.bind_cpu_input("attention_mask", feeds["attention_mask"])
        io.bind_output(self.outputs[0], "cpu")
        for name, present, buf in zip(self.pasts, self.outputs[1:], self.bufs):
            io.bind_ortvalue_input(name, buf)
            io.bind_ortvalue_output(present, buf)
        self.sess.run_with_iobinding(io)
        self.rows = feeds["attention_mask"].shape[1]
        return [io.get_outputs()[0].numpy()] + list(self.bufs)

    def host(self, v):
        """A buffer's rows written so far (the last step's present) as a NumPy array."""
        for i, buf in enumerate(self.bufs or []):
            if buf is v:
                return self.io.copy_outputs_to_cpu()[1 + i][:, :, :self.rows]
        return np_asarray(v)


def np_asarray(v):
    import numpy as np
    if type(v).__module__.startswith("torch"):
        return v.detach().cpu().numpy()
    return np.asarray(v)


class Session:
    """A model on one engine: calling it with feeds runs the model once and returns its outputs.
    loop: the session runs a decode loop: MLX direct returns evaluated mx arrays (its KV cache
    stays in MLX), the IOBinding engines and torch return the logits on the host and the
    present.* on the device. Otherwise the IOBinding engines and torch leave all outputs on the
    device (torch synchronized). host(v) reads an output back. report: the MLX EP's report file
    (option report=), written by close(). Unavailable: the engine cannot run here."""

    def __init__(self, model: bytes, engine: str, device: str, loop: bool = False, report: str | None = None,
                 workload: str = ""):
        self.ref = self.sess = None
        self.host = np_asarray
        mlx_device = "cpu" if CPU_STANDIN else device
        if engine == "mlx_direct":
            import mlx.core as mx
            from mlx_reference import MlxReference
            mx.set_default_device(mx.gpu if mlx_device == "gpu" else mx.cpu)
            self.ref = MlxReference(model)
            self.run = self.ref.run_mx if loop else self.ref
            return
        if engine == "torch":
            self.ref = _torch_decoder(model, workload)
            if loop:
                self.run = lambda feeds: (lambda o: [o[0].cpu().numpy()] + o[1:])(self.ref(feeds))
            else:
                self.run = lambda feeds: (lambda o: (self.ref.synchronize(), o)[1])(self.ref(feeds))
            return
        import onnxruntime as ort
        if engine.endswith("_shared") and not loop:
            raise Unavailable("decode loop only (onnxruntime-genai's shared KV buffer)")
        if engine in MLX_EPS:
            import onnxruntime_ep_mlx as mlx_ep
            options = {"device": mlx_device, **({"report": report} if report else {})}
            self.sess = mlx_ep.session(model, options=options, strict=False)
        elif engine in ("ort_cuda", "ort_cuda_io", "ort_cuda_shared"):
            self.sess = _ort_cuda_session(model)
        else:
            self.sess = ort.InferenceSession(model, ort.SessionOptions(), providers=["CPUExecutionProvider"])
        if engine.endswith("_shared"):
            self.run = SharedKV(self.sess, engine)
            self.host = self.run.host
        elif engine.endswith("_io"):
            io_device = "cpu" if CPU_STANDIN else (MLX_EP_IO_DEVICE if engine == "mlx_ep_io" else ORT_CUDA_IO_DEVICE)
            self.run = IoBound(self.sess, io_device, loop)
            self.host = self.run.host
        else:
            self.run = lambda feeds: self.sess.run(None, feeds)

    def __call__(self, feeds: dict) -> list:
        return self.run(feeds)

    def close(self) -> None:
        """Releases the session now: the MLX EP writes its run report when ORT destroys it."""
        self.ref = self.sess = self.run = self.host = None  # host may be an IoBound's: it holds the session
        gc.collect()


def make_runner(workload: str, model: bytes, feeds: dict, engine: str, device: str, decoder_config: str,
                report: str | None = None, tokens=None):
    """(session, run): run() is one timed Run of the workload on `engine` and returns (outputs,
    greedy tokens or None): one model run, or for a loop workload (workloads.LOOPS) the whole
    decode loop, its outputs the logits of every step and the last present.* (tokens: forced
    tokens, see workloads.decode_loop). Outputs may live on the device: session.host reads one."""
    from workloads import LOOPS, decode_loop
    steps = LOOPS.get(workload, 0)
    sess = Session(model, engine, device, loop=bool(steps), report=report, workload=workload)
    if not steps:
        return sess, lambda: (sess(feeds), None)
    return sess, lambda: decode_loop(sess, feeds, decoder_config, steps, tokens)


def checksum(workload: str, outs: list, host=None) -> float:
    """The sum of the first output (of every step's logits for a loop workload)."""
    import numpy as np
    from workloads import LOOPS
    host = host or np_asarray
    first = outs[:LOOPS[workload]] if workload in LOOPS else outs[:1]
    return float(sum(np.asarray(host(o), dtype=np.float64).sum() for o in first))


def read_run_report(path: str) -> dict:
    """The MLX EP's run report lines summed over clusters: traces and padded_runs added up,
    runs the most of any cluster (every cluster runs once per ORT Run)."""
    import re
    stats = {"runs": 0, "traces": 0, "padded_runs": 0, "clusters": 0}
    try:
        with open(path) as f:
            lines = [line.split("run report:", 1)[1] for line in f if "run report:" in line]
    except OSError:
        return stats
    for line in lines:
        c = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}
        stats["runs"] = max(stats["runs"], c.get("runs", 0))
        stats["traces"] += c.get("traces", 0)
        stats["padded_runs"] += c.get("padded_runs", 0)
        stats["clusters"] += 1
    return stats


def timed_runs(run, n: int, prime: bool) -> list[float]:
    """n back-to-back Runs, seconds each, after an untimed one if `prime`; the collector is held
    off so that it lands between batches instead of inside one."""
    gc.collect()
    gc.disable()
    try:
        if prime:
            run()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        return times
    finally:
        gc.enable()


def reset_peak_rss() -> None:
    """Starts the process's peak resident memory afresh (Linux), so that what the workload's
    model generation used before the session is not counted."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_mb() -> float:
    """Peak resident memory since reset_peak_rss (Linux: VmHWM), else over the process's life."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024 if sys.platform == "darwin" else 1024)  # bytes on macOS, KiB elsewhere


def worker(workload: str, engine: str, warmup: int, device: str, decoder_config: str, io_dtype: str = "float32") -> int:
    """--worker: one engine of one workload, driven over stdin/stdout by the parent. Sends one JSON
    line once the session is created, run once and warmed up; then answers {"runs": n} with the
    times of n Runs and {"done": true} with the process's peak memory (and for the MLX EP on a
    loop workload, its run report's counters over all of its Runs). An engine this machine cannot
    run answers {"na": reason} instead and exits."""
    from workloads import LOOPS, load
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything a library prints goes to stderr, not into the protocol

    def send(msg: dict) -> None:
        proto.write(json.dumps(msg) + "\n")
        proto.flush()

    model, feeds = load(workload, decoder_config, io_dtype)
    report = None
    if engine in MLX_EPS and workload in LOOPS:
        fd, report = tempfile.mkstemp(prefix="bench-report-", suffix=".txt")
        os.close(fd)
    gc.collect()
    reset_peak_rss()
    t0 = time.perf_counter()
    try:
        sess, run_once = make_runner(workload, model, feeds, engine, device, decoder_config, report)
    except Unavailable as e:
        send({"na": str(e)})
        return 0
    run = lambda: run_once()[0]  # noqa: E731
    create = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = run()
    first = time.perf_counter() - t0
    last = first
    for _ in range(warmup):
        t0 = time.perf_counter()
        run()
        last = time.perf_counter() - t0
    # A batch starts after the process slept through the other engines' turns: where the parent
    # says so (short Runs on some engine of the workload), one untimed Run first, so that the batch
    # does not time a cold start.
    send({"create_ms": create * 1e3, "first_run_ms": first * 1e3, "warm_run_ms": last * 1e3,
          "checksum": checksum(workload, out, sess.host)})
    del out
    for line in sys.stdin:
        cmd = json.loads(line)
        if "runs" in cmd:
            send({"times": timed_runs(run, int(cmd["runs"]), bool(cmd.get("prime")))})
        else:
            msg = {"peak_rss_mb": peak_rss_mb()}
            sess.close()
            if report:
                msg["run_report"] = read_run_report(report)
                os.unlink(report)
            send(msg)
            return 0
    return 0


def short_error(line: str, limit: int = 200) -> str:
    """An error line for the table: ORT's source-location prefix dropped, at most `limit` characters."""
    for marker in (": FAIL : ", "] : "):
        if marker in line:
            line = line.rsplit(marker, 1)[1]
            break
    return line if len(line) <= limit else line[:limit - 3] + "..."


class WorkerError(RuntimeError):
    pass


class Worker:
    """A --worker child process and its JSON-lines protocol."""

    def __init__(self, workload: str, engine: str, warmup: int, args):
        self.engine = engine
        self.err = tempfile.TemporaryFile(mode="w+")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", workload, engine, "--warmup", str(warmup),
               "--device", args.device, "--decoder-config", args.decoder_config, "--io-dtype", args.io_dtype]
        env = os.environ.copy()
        # --cold-ep: the MLX EP's workers start from an empty kernel cache (MLX's PTX cache directory,
        # where the EP keeps its cubins too), so their first Run is a fresh machine's
        self.cold_dir = tempfile.mkdtemp(prefix="mlx-ptx-cold-") if cold_worker(engine, args) else None
        if self.cold_dir:
            env["MLX_PTX_CACHE_DIR"] = self.cold_dir
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True,
                                     env=env)

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            self.err.seek(0)
            lines = self.err.read().strip().splitlines()
            raise WorkerError(f"{self.engine}: {short_error(lines[-1]) if lines else f'exit status {self.proc.returncode}'}")
        return json.loads(line)

    def call(self, msg: dict) -> dict:
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.err.close()
        if self.cold_dir:
            import shutil
            shutil.rmtree(self.cold_dir, ignore_errors=True)


def cold_worker(engine: str, args) -> bool:
    """Whether a worker of `engine` starts from an empty kernel cache (--cold-ep, the MLX EP's flows)."""
    return bool(getattr(args, "cold_ep", False)) and engine.startswith("mlx_ep")


def round_sizes(runs: int) -> list[int]:
    """The runs split into rounds of (nearly) equal batches: 10 rounds, more for long series
    (batches of ~20), fewer when there are fewer runs."""
    rounds = min(runs, max(10, runs // 20))
    return [runs // rounds + (i < runs % rounds) for i in range(rounds)] if runs > 0 else []


def quantile(sorted_times: list[float], f: float) -> float:
    return sorted_times[min(len(sorted_times) - 1, int(f * len(sorted_times)))]


def measure(workload: str, runs: int, warmup: int, args) -> dict:
    """All engines of a workload, interleaved in rounds (see the module doc). Per engine: median
    of the per-round medians, p10/p90 of all runs, the per-round medians themselves, session
    creation, first Run, peak RSS, checksum. On --device gpu an engine that cannot run here
    ({"na": reason}) or fails ({"error": message}) is left out and the others go on; on the CPU
    any failure fails the workload (WorkerError)."""
    engines = args.engines
    workers, info = {}, {}
    try:
        for e in engines:  # one at a time: each session is created and warmed up alone
            try:
                workers[e] = Worker(workload, e, warmup, args)
                info[e] = workers[e].read()
            except WorkerError as err:
                if args.device != "gpu":
                    raise
                info[e] = {"error": str(err)}
            if "na" in info[e] or "error" in info[e]:
                workers.pop(e).close()
                print(f"{workload:18s} {e:11s} {'n/a (' + info[e]['na'] + ')' if 'na' in info[e] else info[e]['error']}",
                      flush=True)
        active = [e for e in engines if e in workers]
        prime = any(info[e].get("warm_run_ms", float("inf")) < PRIME_BELOW_S * 1e3 for e in active)
        for e in active:
            info[e]["primed"] = prime
        times = {e: [] for e in active}
        medians = {e: [] for e in active}
        for r, n in enumerate(round_sizes(runs)):
            for e in active[r % len(active):] + active[:r % len(active)] if active else []:
                if e not in workers:
                    continue
                time.sleep(PAUSE_S)
                try:
                    t = workers[e].call({"runs": n, "prime": prime})["times"]
                except WorkerError as err:
                    if args.device != "gpu":
                        raise
                    info[e] = {"error": str(err)}
                    workers.pop(e).close()
                    continue
                times[e] += t
                medians[e].append(statistics.median(t))
        for e in list(workers):
            info[e].update(workers[e].call({"done": True}))
    finally:
        for w in workers.values():
            w.close()
    for e in workers:
        ts = sorted(times[e]) or [float("nan")]
        info[e].update({"median_ms": statistics.median(medians[e]) * 1e3 if medians[e] else float("nan"),
                        "p10_ms": quantile(ts, 0.1) * 1e3, "p90_ms": quantile(ts, 0.9) * 1e3,
                        "round_medians_ms": [m * 1e3 for m in medians[e]]})
    return info


def verify_tolerance(io_dtype: str) -> float:
    """--verify's tolerance on max |a - ref| / max |ref|: 1e-3 for float32 activations; 2e-2 for
    float16 (its rounding, ~5e-4 a value, accumulates over layers: engines that compute the same
    float16 graph in a different order differ by ~1e-3-1e-2 of the logits' range)."""
    return 1e-3 if io_dtype == "float32" else 2e-2


def verify_worker(workload: str, engine: str, device: str, decoder_config: str, io_dtype: str, out: str,
                  tokens_from: str | None) -> int:
    """--verify-worker: runs the workload once on one engine (in its own process: the GPU engines'
    CUDA libraries stay apart) and saves its outputs (and greedy tokens) to `out` (.npz), or
    {"na": reason} / {"error": message} as JSON in out + ".json"."""
    import numpy as np
    from workloads import load
    os.dup2(2, 1)
    model, feeds = load(workload, decoder_config, io_dtype)
    tokens = None
    if tokens_from:
        with np.load(tokens_from) as z:
            tokens = [z[k] for k in sorted((k for k in z.files if k.startswith("token_")), key=lambda k: int(k[6:]))]
            tokens = tokens or None
    try:
        sess, run_once = make_runner(workload, model, feeds, engine, device, decoder_config, tokens=tokens)
        outs, chosen = run_once()
        arrays = {f"out_{i}": np.asarray(sess.host(o)) for i, o in enumerate(outs)}
        arrays.update({f"token_{i}": np.asarray(t) for i, t in enumerate(chosen or [])})
        np.savez(out, **arrays)
        return 0
    except Unavailable as e:
        msg = {"na": str(e)}
    except Exception as e:  # noqa: BLE001 - reported by the parent, next to the other engines
        msg = {"error": short_error(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")}
    with open(out + ".json", "w") as f:
        json.dump(msg, f)
    return 0


def verify(workload: str, device: str, decoder_config: str, io_dtype: str = "float32",
           engines: list[str] | None = None) -> bool:
    """Runs the workload once per engine, each in its own process; prints one line comparing
    every engine with ORT's CPU EP (per output: max |a - ref| / max |ref|, the worst over the
    outputs). A decode loop's outputs are the logits of every step and the last present.*; every
    engine is fed ORT CPU EP's greedy tokens (a near tie decided the other way would otherwise
    send the loops down different sequences), carries its own KV cache, and the line says at how
    many steps its own argmax agreed with ORT's. An engine that cannot run here is n/a, not a
    failure."""
    import numpy as np
    from workloads import LOOPS
    tol = verify_tolerance(io_dtype)
    engines = [e for e in (engines or engines_for(device)) if e != "ort_cpu"]
    tmp = tempfile.mkdtemp(prefix="bench-verify-")

    def run_engine(engine, tokens_from=None):
        out = os.path.join(tmp, f"{engine}.npz")
        cmd = [sys.executable, os.path.abspath(__file__), "--verify-worker", workload, engine, out,
               "--device", device, "--decoder-config", decoder_config, "--io-dtype", io_dtype]
        if tokens_from:
            cmd += ["--tokens-from", tokens_from]
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if os.path.exists(out + ".json"):
            with open(out + ".json") as f:
                return json.load(f), out
        if p.returncode or not os.path.exists(out):
            lines = p.stderr.strip().splitlines()
            return {"error": short_error(lines[-1]) if lines else f"exit status {p.returncode}"}, out
        with np.load(out) as z:
            outs = [z[f"out_{i}"] for i in range(sum(k.startswith("out_") for k in z.files))]
            toks = [z[k] for k in sorted((k for k in z.files if k.startswith("token_")), key=lambda k: int(k[6:]))]
        return {"outs": outs, "tokens": toks}, out

    ref, ref_path = run_engine("ort_cpu")
    if "outs" not in ref:
        print(f"verify {workload_label(workload, decoder_config, io_dtype)}: ORT CPU EP failed: "
              f"{ref.get('error') or ref.get('na')}", flush=True)
        return False
    ok, parts = True, []
    for engine in engines:
        res, _ = run_engine(engine, ref_path if workload in LOOPS else None)
        if "na" in res:
            parts.append(f"{engine} n/a ({res['na']})")
            continue
        if "error" in res:
            ok = False
            parts.append(f"{engine} failed: {res['error']}")
            continue
        outs, chosen = res["outs"], res["tokens"]
        worst = 0.0
        for o, r in zip(outs, ref["outs"]):
            if o.shape != r.shape:
                worst = float("inf")
                break
            if r.size:
                r64 = r.astype(np.float64)
                worst = max(worst, float(np.abs(o.astype(np.float64) - r64).max() / max(np.abs(r64).max(), 1e-30)))
        good = len(outs) == len(ref["outs"]) and worst <= tol
        ok &= good
        agree = ""
        if workload in LOOPS:
            same = sum(bool(np.array_equal(a, b)) for a, b in zip(chosen, ref["tokens"]))
            agree = f" (greedy token equal at {same}/{len(ref['tokens'])} steps)"
        parts.append(f"{engine} {worst:.1e} {'ok' if good else 'FAIL'}{agree}")
    n = len(ref["outs"])
    what = f", {n} outputs: {LOOPS[workload]} steps' logits + last present.*" if workload in LOOPS else ""
    print(f"verify {workload_label(workload, decoder_config, io_dtype)} vs ORT CPU EP (max rel error, tolerance "
          f"{tol:g}{what}): {', '.join(parts)}", flush=True)
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    return ok


def workload_label(workload: str, decoder_config: str, io_dtype: str = "float32") -> str:
    from workloads import DECODER_WORKLOADS
    if workload not in DECODER_WORKLOADS:
        return workload
    return f"{workload}[{decoder_config}]" if io_dtype == "float32" else f"{workload}[{decoder_config}, {io_dtype}]"


def run_counts(workload: str, args) -> tuple[int, int]:
    from workloads import default_runs
    runs, warmup = default_runs(workload, args.decoder_config, args.device)
    return (args.runs if args.runs is not None else runs, args.warmup if args.warmup is not None else warmup)


def machine() -> str:
    """The CPU, its cores and its widest vector extension the EP's CPU kernels use (AVX-512F, else
    AVX2 and FMA: the packed products and the one-row GEMV take AVX-512 only), and the kernel: two
    machines both named "AMD EPYC" differ by that alone (2026-12-06: squeezenet 3.3 against 14 ms)."""
    cpu, flags = platform.processor() or "unknown CPU", []
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
            if cpu and flags:
                break
    except OSError:
        pass
    vector = "AVX-512F" if "avx512f" in flags else "AVX2+FMA" if {"avx2", "fma"} <= set(flags) else ""
    return f"{cpu}{f' ({vector})' if vector else ''}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def versions() -> str:
    import mlx.core as mx
    import onnxruntime as ort
    import onnxruntime_ep_mlx as mlx_ep
    return f"onnxruntime {ort.__version__}, mlx {mx.__version__}, onnxruntime-ep-mlx {mlx_ep.version()}"


def cpu_blas() -> str:
    """The BLAS under MLX's CPU products, as the EP reports it (registering the EP: libmlx loads with it)."""
    import onnxruntime_ep_mlx as mlx_ep
    return mlx_ep.cpu_blas()


def throughput(r: dict) -> float:
    """EP throughput relative to MLX direct's: MLX direct median / EP median (>= 1: as fast)."""
    return r["mlx_direct"]["median_ms"] / r["mlx_ep"]["median_ms"]


def overhead_us(r: dict) -> tuple[float, float, float]:
    """Per-Run EP overhead over MLX direct, µs: the difference of the medians, and the 10th/90th
    percentile of the per-round differences (both engines measured in the same round)."""
    diffs = sorted(e - m for e, m in zip(r["mlx_ep"]["round_medians_ms"], r["mlx_direct"]["round_medians_ms"]))
    over = (r["mlx_ep"]["median_ms"] - r["mlx_direct"]["median_ms"]) * 1e3
    return over, quantile(diffs, 0.1) * 1e3, quantile(diffs, 0.9) * 1e3


def render(results: dict, args) -> str:
    lines = ["# Performance", "",
             "Generated by `bench/run.py` (`make bench`). Times are per Run after warm-up: the median of",
             "per-round medians (the engines take turns in rounds, see bench/run.py), with the 10th-90th",
             "percentile of all runs in brackets. `MLX direct` is the same computation written against",
             "Python `mlx.core` (bench/mlx_reference.py): the ceiling for any MLX EP. `EP throughput vs",
             "MLX direct` is MLX direct's median over the EP's: below 1 the EP is slower than hand-written MLX.",
             "`EP peak RSS` is the EP process's peak resident memory from session creation on (the model",
             "and its inputs are in memory already; generating them is not counted).",
             "", f"- machine: {machine()}", f"- versions: {versions()}",
             f"- BLAS under MLX's CPU products (EP and MLX direct alike): {cpu_blas()}", f"- device: MLX {args.device}",
             f"- runs: {runs_line(results, args)}",
             f"- load average (1 min) at start / end: {args.load[0]:.2f} / {args.load[1]:.2f} "
             f"(the machine may be shared: numbers are noisy)",
             f"- bench wall time: {args.wall_s:.0f} s"]
    from workloads import DECODER_WORKLOADS, describe_decoder
    if any(w in DECODER_WORKLOADS for w in results):
        lines.append(f"- decoder `[{args.decoder_config}]`: {describe_decoder(args.decoder_config)}; "
                     "prefill = 128-token prompt, empty past; decode = 1 token after the prefill's KV (128 "
                     "positions, computed once by ORT's CPU EP); decode_loop64 = a greedy loop of 64 decode "
                     "steps from that KV, each feeding the previous step's present.* back as past_key_values.* "
                     "with the attention mask one longer (MLX direct keeps its cache as mx arrays): its time is "
                     "the whole loop, tok/s = 64 / median")
    lines += ["",
              "| workload | MLX EP ms | ORT CPU EP ms | MLX direct ms | EP throughput vs MLX direct | EP/CPU EP | "
              "EP session ms | EP first run ms | EP peak RSS MB |",
              "|---|---|---|---|---|---|---|---|---|"]
    for w, r in results.items():
        label = workload_label(w, args.decoder_config, args.io_dtype)
        if "error" in r:
            lines.append(f"| {label} | error: {r['error']} |  |  |  |  |  |  |  |")
            continue
        e, c, m = r.get("mlx_ep"), r.get("ort_cpu"), r.get("mlx_direct")  # --engines may leave some out
        fmt = lambda x: "n/a" if x is None else f"{x['median_ms']:.3f} [{x['p10_ms']:.3f}-{x['p90_ms']:.3f}]" + tok_s(w, x)  # noqa: E731
        ratio = f"{throughput(r):.2f}x" if e and m else "n/a"
        vs_cpu = f"{e['median_ms'] / c['median_ms']:.2f}" if e and c else "n/a"
        ep_cols = f"{e['create_ms']:.1f} | {e['first_run_ms']:.1f} | {e['peak_rss_mb']:.0f}" if e else "n/a | n/a | n/a"
        lines.append(f"| {label} | {fmt(e)} | {fmt(c)} | {fmt(m)} | {ratio} | {vs_cpu} | {ep_cols} |")
    lines += [""] + [f"- {line}" for line in loop_report_lines(results, args)] + acceptance_lines(results, args)
    return "\n".join(lines) + "\n"


def tok_s(workload: str, r: dict) -> str:
    """' (N tok/s)' for a loop workload: its steps over the median time of one loop."""
    from workloads import LOOPS
    if workload not in LOOPS or not r["median_ms"] > 0:
        return ""
    return f" ({LOOPS[workload] / (r['median_ms'] / 1e3):.1f} tok/s)"


def loop_report_lines(results: dict, args) -> list[str]:
    """The MLX EP's run-report counters of each loop workload, over all of its Runs (first,
    warm-up, primes and timed loops)."""
    out = []
    for w, r in results.items():
        for engine in MLX_EPS:
            rep = r.get(engine, {}).get("run_report")
            if rep is None:
                continue
            loops = rep["runs"] / float(__import__("workloads").LOOPS[w])
            out.append(f"decode loop: {rep['traces']} traces, {rep['padded_runs']} padded runs over {rep['runs']} Runs "
                       f"({ENGINE_LABELS[engine]} run report, {workload_label(w, args.decoder_config, args.io_dtype)}: "
                       f"{loops:g} loops, {rep['clusters']} cluster(s), device {args.device})")
    return out


def acceptance_lines(results: dict, args) -> list[str]:
    """The issue's two criteria, stated against the numbers above, and the one-node overhead probe."""
    ok = {w: r for w, r in results.items() if "error" not in r}
    # tiny_add is the one-node overhead probe, not one of the workloads: ORT's own per-Run
    # cost (about 9 µs) is a large share of its Run, whatever the EP does.
    judged = {w: r for w, r in ok.items() if w != "tiny_add" and "mlx_ep" in r and "mlx_direct" in r}
    out = []
    if judged:
        worst = min(judged, key=lambda w: throughput(judged[w]))
        below = [workload_label(w, args.decoder_config, args.io_dtype) for w in judged if throughput(judged[w]) < THROUGHPUT_MIN]
        failed = [workload_label(w, args.decoder_config, args.io_dtype) for w in results if w not in ok]
        verdict = "met" if not below and not failed else "NOT met (" + ", ".join(
            [f"below: {', '.join(below)}"] * bool(below) + [f"failed: {', '.join(failed)}"] * bool(failed)) + ")"
        out.append(f"- EP throughput >= {THROUGHPUT_MIN:.2f}x MLX direct on every workload (the one-node tiny_add "
                   f"probe measures overhead, below): {verdict}; lowest "
                   f"{throughput(judged[worst]):.2f}x ({workload_label(worst, args.decoder_config, args.io_dtype)}).")
    probes = (("mlp10", "10-node MLP (mlp10)"), ("tiny_add", "one-node graph (tiny_add)"))
    for w, what in probes:
        if w not in ok or "mlx_ep" not in ok[w] or "mlx_direct" not in ok[w]:
            continue
        over, lo, hi = overhead_us(ok[w])
        line = (f"- per-Run EP overhead on the {what}, MLX EP minus MLX direct: {over:.1f} µs "
                f"(per-round differences {lo:.1f} to {hi:.1f} µs, 10th-90th percentile)")
        if w == "mlp10":
            line += f"; <= {OVERHEAD_MAX_US:.0f} µs: {'met' if over <= OVERHEAD_MAX_US else 'NOT met'}"
        else:
            line += (f"; ORT's own per-Run cost is inside the MLX EP figure (ORT CPU EP alone: "
                     f"{ok[w]['ort_cpu']['median_ms'] * 1e3:.1f} µs)")
        out.append(line + ".")
    return out


def measured(r: dict | None) -> bool:
    return bool(r) and "median_ms" in r and r["median_ms"] == r["median_ms"]  # not n/a, error or NaN


def best_ep(r: dict) -> str | None:
    """The faster of the MLX EP plain and with IOBinding (by median), of those measured."""
    have = [e for e in ("mlx_ep", "mlx_ep_io") if measured(r.get(e))]
    return min(have, key=lambda e: r[e]["median_ms"]) if have else None


def ratio(r: dict, ep: str | None, other: str) -> float | None:
    """`other`'s median over the EP engine's (throughput ratio: >= 1 the EP is as fast)."""
    if ep is None or not measured(r.get(other)):
        return None
    return r[other]["median_ms"] / r[ep]["median_ms"]


def cell(workload: str, x: dict | None) -> str:
    if x is None:
        return "not run"
    if "na" in x:
        return f"n/a ({x['na']})"
    if "error" in x and not measured(x):
        return f"error: {x['error']}"
    return f"{x['median_ms']:.3f} [{x['p10_ms']:.3f}-{x['p90_ms']:.3f}]" + tok_s(workload, x)


def render_gpu(results: dict, args) -> str:
    """--device gpu: the times of every engine, the MLX EP's ratios to its peers, session creation
    and first Run of every engine, and issue 9's GPU acceptance lines."""
    from workloads import DECODER_WORKLOADS, describe_decoder
    engines = args.engines
    lines = ["# Performance on the GPU", "",
             "Generated by `bench/run.py --device gpu` (bench/gpu_session.sh). Times are per Run after warm-up: the",
             "median of per-round medians (the engines take turns in rounds, see bench/run.py), with the",
             "10th-90th percentile of all runs in brackets. Engines: MLX EP (plain `run()` with NumPy feeds);",
             f"MLX EP + IOBinding (inputs bound from NumPy, outputs bound to device `{MLX_EP_IO_DEVICE}`); ORT CUDA EP",
             "(onnxruntime-gpu, the same file, plain `run()`); ORT CUDA EP + IOBinding (same binding); MLX direct",
             "(bench/mlx_reference.py on MLX's GPU); PyTorch eager (bench/torch_reference.py: the same decoder in",
             "torch ops, int4 weights dequantized to the io dtype at load, SDPA, torch.cat KV cache); ORT CPU EP.",
             "In the decode loop the IOBinding engines feed each step's present.* OrtValues back as the next",
             "past without a host copy and bind only the logits to the CPU; torch and MLX direct keep their",
             "KV cache on the device and copy the logits to the host. Ratios are throughput ratios (the peer's",
             "median over the MLX EP's, >= 1: the EP is as fast), for the faster of the MLX EP's two flows.",
             "", f"- machine: {machine()}", f"- versions: {versions_gpu()}", f"- device: MLX {args.device}"
             + (" (CPU stand-in: ORT_EP_MLX_BENCH_CPU_STANDIN=1)" if CPU_STANDIN else ""),
             f"- runs: {runs_line(results, args)}",
             f"- load average (1 min) at start / end: {args.load[0]:.2f} / {args.load[1]:.2f}",
             f"- bench wall time: {args.wall_s:.0f} s"]
    if any(w in DECODER_WORKLOADS for w in results):
        lines.append(f"- decoder `[{args.decoder_config}]`, {args.io_dtype} activations/KV cache: "
                     f"{describe_decoder(args.decoder_config)}; prefill = 128-token prompt, empty past; decode = 1 "
                     "token after the prefill's KV (128 positions, computed once by ORT's CPU EP); decode_loop64 = a "
                     "greedy loop of 64 decode steps from that KV: its time is the whole loop, tok/s = 64 / median")
    lines += ["", "## Times (ms)", "",
              "| workload | " + " | ".join(ENGINE_LABELS[e] for e in engines) + " |",
              "|---|" + "---|" * len(engines)]
    for w, r in results.items():
        label = workload_label(w, args.decoder_config, args.io_dtype)
        if "error" in r and not isinstance(r["error"], dict) and not any(e in r for e in engines):
            lines.append(f"| {label} | error: {r['error']} |" + " |" * (len(engines) - 1))
            continue
        lines.append(f"| {label} | " + " | ".join(cell(w, r.get(e)) for e in engines) + " |")
    lines += ["", "## MLX EP against its peers (throughput ratios)", "",
              "| workload | MLX EP (faster flow) ms | vs ORT CUDA EP + IOBinding | vs ORT CUDA EP | vs MLX direct | "
              "vs PyTorch eager |", "|---|---|---|---|---|---|"]
    fr = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
    for w, r in results.items():
        ep = best_ep(r)
        if ep is None:
            continue
        flow = "IOBinding" if ep == "mlx_ep_io" else "plain"
        lines.append(f"| {workload_label(w, args.decoder_config, args.io_dtype)} | {r[ep]['median_ms']:.3f} ({flow}) | "
                     f"{fr(ratio(r, ep, 'ort_cuda_io'))} | {fr(ratio(r, ep, 'ort_cuda'))} | "
                     f"{fr(ratio(r, ep, 'mlx_direct'))} | {fr(ratio(r, ep, 'torch'))} |")
    lines += ["", "## Session creation / first Run (ms; the loop's first Run is its whole first loop)", "",
              "| workload | " + " | ".join(ENGINE_LABELS[e] for e in engines) + " | MLX EP peak RSS MB |",
              "|---|" + "---|" * (len(engines) + 1)]
    for w, r in results.items():
        cells = []
        for e in engines:
            x = r.get(e)
            cells.append(f"{x['create_ms']:.0f} / {x['first_run_ms']:.0f}" if x and "create_ms" in x else "-")
        rss = r.get("mlx_ep", {}).get("peak_rss_mb")
        lines.append(f"| {workload_label(w, args.decoder_config, args.io_dtype)} | " + " | ".join(cells)
                     + f" | {'-' if rss is None else f'{rss:.0f}'} |")
    lines += [""] + [f"- {line}" for line in loop_report_lines(results, args)] + gpu_acceptance_lines(results, args)
    return "\n".join(lines) + "\n"


def gpu_acceptance_lines(results: dict, args) -> list[str]:
    """Issue 9's "Done when" on the GPU, stated against the numbers above (decoder lines: at
    Qwen2.5-0.5B shapes, float16, to count)."""
    out = []
    verdict = lambda good: "met" if good else "NOT met"  # noqa: E731
    shape = "" if (args.decoder_config, args.io_dtype) == ("qwen2.5-0.5b", "float16") else \
        f" [measured at {args.decoder_config}, {args.io_dtype}: the criteria are for qwen2.5-0.5b, float16]"
    loop = results.get("decoder_decode_loop64", {})
    io = loop.get("mlx_ep_io")
    if measured(io):
        steps = __import__("workloads").LOOPS["decoder_decode_loop64"]
        tps = steps / (io["median_ms"] / 1e3)
        for other, need, what in (("ort_cuda_io", GPU_LOOP_VS_CUDA_IO, "ORT CUDA EP + IOBinding (goal)"),
                                  ("mlx_direct", GPU_LOOP_VS_DIRECT, "MLX direct"),
                                  ("torch", GPU_LOOP_VS_TORCH, "PyTorch eager")):
            x = ratio(loop, "mlx_ep_io", other)
            if x is None:
                out.append(f"- decode loop with IOBinding >= {need:g}x {what}: not measured ({cell('', loop.get(other))})"
                           f"{shape}.")
                continue
            out.append(f"- decode loop with IOBinding >= {need:g}x {what}: {verdict(x >= need)}; {x:.2f}x "
                       f"({tps:.1f} vs {steps / (loop[other]['median_ms'] / 1e3):.1f} tok/s){shape}.")
    else:
        out.append(f"- decode loop with IOBinding: not measured ({cell('', io)}).")
    shared, peer = loop.get("mlx_ep_shared"), loop.get("ort_cuda_shared")
    if measured(shared) and measured(peer):
        steps = __import__("workloads").LOOPS["decoder_decode_loop64"]
        x = ratio(loop, "mlx_ep_shared", "ort_cuda_shared")
        out.append(f"- decode loop with onnxruntime-genai's shared KV buffer (not a criterion; what genai runs): "
                   f"{x:.2f}x ORT CUDA EP with the same buffers ({steps / (shared['median_ms'] / 1e3):.1f} vs "
                   f"{steps / (peer['median_ms'] / 1e3):.1f} tok/s){shape}.")
    pre = results.get("decoder_prefill128", {})
    ep = best_ep(pre)
    cudas = [e for e in ("ort_cuda", "ort_cuda_io") if measured(pre.get(e))]
    if ep and cudas:
        c = min(cudas, key=lambda e: pre[e]["median_ms"])
        x = pre[ep]["median_ms"] / pre[c]["median_ms"]
        out.append(f"- prefill at most {GPU_PREFILL_MAX:g}x ORT CUDA EP's time (MLX EP's faster flow, {ep}, against "
                   f"ORT CUDA EP's faster, {c}): {verdict(x <= GPU_PREFILL_MAX)}; {x:.2f}x "
                   f"({pre[ep]['median_ms']:.1f} vs {pre[c]['median_ms']:.1f} ms){shape}.")
    elif "decoder_prefill128" in results:
        out.append("- prefill at most 1.5x ORT CUDA EP's time: not measured (MLX EP or ORT CUDA EP missing).")
    firsts = [(results[w][e]["first_run_ms"], w, e) for w in ("decoder_prefill128", "decoder_decode_after128")
              for e in ("mlx_ep", "mlx_ep_io") if w in results and "first_run_ms" in results[w].get(e, {})]
    if firsts:
        worst = max(firsts)
        cache = ("an empty kernel cache each (--cold-ep)" if getattr(args, "cold_ep", False)
                 else "kernel caches as the machine has them")
        out.append(f"- first Run at most {GPU_FIRST_RUN_MAX_S:g} s (MLX EP, a fresh process per workload and flow, "
                   f"{cache}; prefill and single decode step): {verdict(worst[0] <= GPU_FIRST_RUN_MAX_S * 1e3)}; longest "
                   f"{worst[0] / 1e3:.1f} s ({workload_label(worst[1], args.decoder_config, args.io_dtype)}, "
                   f"{worst[2]}){shape}.")
    judged = {w: r for w, r in results.items() if w != "tiny_add" and best_ep(r) and measured(r.get("mlx_direct"))}
    if judged:
        x = {w: ratio(r, best_ep(r), "mlx_direct") for w, r in judged.items()}
        below = [workload_label(w, args.decoder_config, args.io_dtype) for w in judged if x[w] < THROUGHPUT_MIN]
        worst = min(x, key=x.get)
        out.append(f"- every workload at least {THROUGHPUT_MIN:.2f}x MLX direct (MLX EP's faster flow): "
                   f"{'met' if not below else 'NOT met (below: ' + ', '.join(below) + ')'}; lowest {x[worst]:.2f}x "
                   f"({workload_label(worst, args.decoder_config, args.io_dtype)}).")
    return out


def versions_gpu() -> str:
    parts = [versions()]
    try:
        import torch
        parts.append(f"torch {torch.__version__}" + (f" (CUDA {torch.version.cuda})" if torch.version.cuda else ""))
    except ImportError:
        parts.append("torch not installed")
    return ", ".join(parts)


def runs_line(results: dict, args) -> str:
    counts = {}
    for w in results:
        counts.setdefault(run_counts(w, args), []).append(workload_label(w, args.decoder_config, args.io_dtype))
    items = sorted(counts.items(), key=lambda kv: -len(kv[1]))
    what = lambda r, wu: f"{r} in {len(round_sizes(r))} rounds after {wu} warm-up runs"  # noqa: E731
    primed = [workload_label(w, args.decoder_config, args.io_dtype) for w in results
              if any(isinstance(r, dict) and r.get("primed") for r in results[w].values())]
    tail = f"; every engine's batches primed by an untimed Run: {', '.join(primed)}" if primed else ""
    if len(items) == 1:
        return what(*items[0][0]) + tail
    return "; ".join(f"{what(r, wu)} ({', '.join(ws)})" for (r, wu), ws in items) + tail


# A section of the output file that another program writes and this one keeps as it is
# (bench/session_creation.py --write).
KEPT_SECTION = "## Session creation"


# The GPU report keeps its hand-written notes (what the run saw beyond the tables) from here on.
GPU_KEPT_SECTION = "## Notes"


def kept_section(path: str, heading: str | None = None) -> str:
    """The file's section `heading` (default KEPT_SECTION), from its heading to the end, after a
    blank line; "" when absent."""
    heading = heading or KEPT_SECTION
    try:
        with open(path) as f:
            doc = f.read()
    except OSError:
        return ""
    at = doc.find("\n" + heading)
    return "\n" + doc[at + 1:] if at >= 0 else ""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default=",".join(__import__("workloads").DEFAULT_WORKLOADS))
    ap.add_argument("--runs", type=int, default=None, help="runs per measurement (default: per workload)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up runs (default: per workload)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--engines", default=None,
                    help=f"comma-separated subset of the device's engines (cpu: {','.join(CPU_ENGINES)}; "
                         f"gpu: {','.join(GPU_ENGINES)})")
    ap.add_argument("--io-dtype", default="float32", choices=__import__("workloads").IO_DTYPES,
                    help="decoder workloads' activations and KV cache (default: float32)")
    ap.add_argument("--decoder-config", default="mid", choices=__import__("workloads").DECODER_CONFIGS,
                    help="decoder workloads' config (default: mid)")
    ap.add_argument("--cold-ep", action="store_true",
                    help="the MLX EP's workers start from an empty kernel cache (a fresh MLX_PTX_CACHE_DIR each): "
                         "their first Run is a fresh machine's")
    ap.add_argument("--verify", action="store_true",
                    help="check each engine's outputs against ORT's CPU EP instead of timing")
    ap.add_argument("--out", default=None,
                    help="report file (default: docs/PERFORMANCE.md, docs/PERFORMANCE_GPU.md for --device gpu)")
    ap.add_argument("--worker", nargs=2, metavar=("WORKLOAD", "ENGINE"), help=argparse.SUPPRESS)
    ap.add_argument("--verify-worker", nargs=3, metavar=("WORKLOAD", "ENGINE", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--tokens-from", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    # The EP's library loads libmlx before anything imports mlx.core, so MLX's CPU products (the
    # EP's and MLX direct's, one libmlx) run on the BLAS the EP picks (src/mlx/cpu_blas.c).
    cpu_blas()
    if args.out is None:
        args.out = os.path.join(ROOT, "docs", "PERFORMANCE_GPU.md" if args.device == "gpu" else "PERFORMANCE.md")
    try:
        args.engines = engines_for(args.device, args.engines)
    except ValueError as e:
        ap.error(str(e))
    workloads = args.workloads.split(",")
    unknown = [w for w in workloads if w not in __import__("workloads").WORKLOADS]
    if unknown:
        ap.error(f"unknown workload(s): {', '.join(unknown)}")
    if args.worker:
        return worker(args.worker[0], args.worker[1], run_counts(args.worker[0], args)[1], args.device,
                      args.decoder_config, args.io_dtype)
    if args.verify_worker:
        w, e, out = args.verify_worker
        return verify_worker(w, e, args.device, args.decoder_config, args.io_dtype, out, args.tokens_from)
    if args.verify:
        return 0 if all([verify(w, args.device, args.decoder_config, args.io_dtype, args.engines)
                         for w in workloads]) else 1
    start, load0 = time.perf_counter(), os.getloadavg()[0]
    results = {}
    for w in workloads:
        runs, warmup = run_counts(w, args)
        try:
            results[w] = measure(w, runs, warmup, args)
        except WorkerError as e:
            results[w] = {"error": str(e)}
            print(f"{w:18s} error: {e}", flush=True)
            continue
        for engine, r in results[w].items():
            if not measured(r):
                continue
            print(f"{w:18s} {engine:10s} median {r['median_ms']:9.3f} ms  first {r['first_run_ms']:9.1f} ms  "
                  f"create {r['create_ms']:8.1f} ms  rss {r['peak_rss_mb']:6.0f} MB  checksum {r['checksum']:.6g}"
                  f"{tok_s(w, r)}", flush=True)
        for line in loop_report_lines({w: results[w]}, args):
            print(line, flush=True)
    args.wall_s, args.load = time.perf_counter() - start, (load0, os.getloadavg()[0])
    print(f"bench took {args.wall_s:.0f} s; load average {args.load[0]:.2f} at start, {args.load[1]:.2f} at end")
    gpu = args.device == "gpu"
    for line in (gpu_acceptance_lines if gpu else acceptance_lines)(results, args):
        print(line)
    text = (render_gpu(results, args) + kept_section(args.out, GPU_KEPT_SECTION) if gpu
            else render(results, args) + kept_section(args.out))
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
