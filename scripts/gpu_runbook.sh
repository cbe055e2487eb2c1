#!/usr/bin/env bash
# One device call's worth of GPU checks, by named steps, everything logged under $OUT (the device
# tool hands back at most 8 files: log.txt, faillog.txt, and what the steps name). Run on the GPU
# machine after scripts/gpu_check.sh WHEEL_DIR has unpacked MLX there (any earlier call of the same
# lease; GPU_BUILD_ONLY=1 is enough), with the same WHEEL_DIR:
#   STEPS="bridge focus profile" scripts/gpu_runbook.sh WHEEL_DIR
# Steps (in this order when named):
#   bridge   build/test_bridge's checks on a GPU scope (float64 and scatter rules, eye)
#   focus    the tests that pin GPU-only paths: device memory (shared KV buffer in place), every
#            GroupQueryAttention test, MatMulNBits, the fused norms, Cast, the float64/scatter families
#   profile  bench/decode_kernels.py for the IOBinding and the shared-buffer loops, and MLX direct
#   kcache   the EP's kernel cache (ORT_EP_MLX_KERNEL_CACHE): two fresh processes' first decode steps
#            (the second should find every kernel compiled), the cubins kept, the tests of the
#            kernels' ops (norms, MatMulNBits, GroupQueryAttention, device memory) with it on
#   graphs   bench/decode_probe.py's IOBinding and shared loops with MLX's CUDA graphs on and off
#            (MLX_USE_CUDA_GRAPHS): whether graph capture helps a step of ~750 small kernels
#   chains   our kernels' chains (docs/ARCHITECTURE.md, "Chains"): what each decode trace became
#            (ORT_EP_MLX_LOG_CHAINS), then the decode loops' phases with chains as CUDA graphs, chains
#            launched kernel by kernel, and no chains (ORT_EP_MLX_KERNEL_CHAINS, ORT_EP_MLX_CHAIN_GRAPHS),
#            two alternating rounds
#   hostprof where a shared-buffer step's host time goes: the compiled program's MLX operations by
#            ONNX op type (tools/op_histogram.py), the EP's phases per decode Run (shared and
#            IOBinding loops, bench/decode_probe.py --phases) with the run report, and a
#            perf profile by library and symbol where the machine has perf, else the wall-clock
#            sampler of tools/sampler (shared and IOBinding loops, reports in $OUT)
#   buffers  the decode loops (shared and IOBinding) at several MLX_MAX_OPS_PER_BUFFER values (how
#            many operations MLX's CUDA backend puts in one CUDA graph before launching it; its
#            default is 20): what a step's graph commits cost
#   fuse     the first Run on a fresh machine with MLX's fusion of GPU programs on and off
#            (ORT_EP_MLX_GPU_FUSE): two processes each, from an MLX kernel cache holding only our
#            own cubins (the first process JIT-compiles MLX's fused kernels, the second finds them),
#            then the steady prompt's phases each way
#   genai    onnxruntime-genai (its wheel handed over in WHEEL_DIR) generating 64 tokens after a
#            128-token prompt at Qwen2.5-0.5B's shapes (float16, int4), shared KV buffer and not:
#            prompt time, decode median, and the run report's traces (examples/genai_llm.py)
#   prefill  where a 128-token prompt's time goes: bench/prefill_matmul.py (the ways to run one
#            MatMulNBits on 128 rows, timed and checked, and MLX's dequantization apart), the
#            prompt's phases with our float32 dequantization kernel on and off
#            (ORT_EP_MLX_DEQUANT_KERNEL, alternating, two processes each) and its kernel profile
#            each way (bench/decode_kernels.py --mode prefill: device time per prompt)
#   qgemm    MatMulNBits' many rows on the tensor cores (mlxb_qgemm_split, ORT_EP_MLX_QGEMM): its
#            bridge checks and the MatMulNBits tests, then the prompt's phases with it on and off
#            (alternating, two processes each) and the prompt's kernel profile each way; then the
#            decode program's operations left on the CPU stream (the integer ReduceSum of the mask
#            now a GPU kernel: none expected) and the decode loops' phases (IOBinding, shared buffer)
#   prefetch the device-memory prefetch floor (ORT_EP_MLX_PREFETCH_MIN) at 4096 and 65536 bytes,
#            alternating: the prompt's and a decode step's phases with IOBinding
#   ncu      Nsight Compute on the decode step's kernels (IOBinding and shared-buffer loops): ten
#            launches of the one-launch decode step, the GEMVs, the norms and the copy-out, each
#            with its duration, active cycles and where its loads were served from (device memory or
#            system memory), by application replay (ncu_io.txt, ncu_shared.txt in $OUT); chains
#            launched kernel by kernel so each is its own launch
#   attn     the decode step kernel in both decode flows (IOBinding, shared buffer): every kernel's
#            launches with their spread (bench/kernel_spread.py), then the decode step in Nsight
#            Compute by application replay (instructions, loads, stall reasons; ncu_attn_*.txt);
#            then ORT_EP_MLX_DECODE_EARLY_VALUES (opt-in): the attention tests with it and an A/B
#   split    a decode step's wall time split (bench/step_split.py: binding, run_with_iobinding,
#            outputs, argmax, and the EP's own Run) for the MLX EP and ORT's CUDA EP (when carried),
#            alternating, two processes each, then each engine's steps under tools/sampler
#            (sampler_mlx.txt, sampler_ort_cuda.txt in $OUT); with ORT_EP_MLX_LOG_CHAINS=1 first, so
#            a chain whose CUDA graph the driver refuses is named
#   longctx  the GQA tests with decode attention split over blocks (ORT_EP_MLX_DECODE_PARTS=8), the
#            decoder engines one step after 2048 tokens (bench/gpu_session.sh's longctx), then
#            decode steps after 128, 1024 and 3072 prompt tokens (IOBinding and a 4096-row shared
#            buffer) with the EP's phases, single pass and split: what the context costs a step
#            (about 8 minutes: a call of its own)
#   families the test files of the families the 2026-12-04 suite run failed on the GPU
#   changed  the test files of what changed since the last GPU run and never ran there: the chunked
#            LinearAttention, the fuzzer's data pool (every Run replayed on hostile values, so the
#            GPU's paths meet them too) and the ops its findings changed; the CPU BLAS forwarding
#   bench    bench/gpu_session.sh's decoder step (engines as ENGINES; by default ORT's CUDA EP plain
#            and with IOBinding when onnxruntime-gpu was carried, scripts/gpu_pack.sh's g* folders)
#   models   bench/gpu_session.sh's models step: the BERT layer and the CNN (squeezenet, from the
#            light models scripts/gpu_pack.sh puts beside the node tests), every engine
#   conformance  the ONNX node tests (tests/conformance/run.py, its three modes) on the GPU with 14
#            workers, in CONF_SHARDS shards (default 40, about 7 s each on an H100) one after the
#            other until CONF_TIMEOUT seconds (default 300) have passed: a shard's summary is written
#            when it ends, so a cut run keeps the shards done. They come back in $OUT/conformance.tgz
#            (gpu_summary_I.json each; here: tar xzf, then run.py --merge-summaries and --write)
#   rows     GroupQueryAttention prompts as the decode kernels' many-row form and the prompt GEMM's
#            folded bias Add (2026-12-05, seventh session): the bridge's checks, the GQA, MatMulNBits,
#            LLM, device-memory and bucket tests
#   rowsperf then (a call of its own) a 128- and a 1024-token prompt's phases with
#            the form on and off (ORT_EP_MLX_ROWS_ATTENTION, alternating), the IOBinding decode loop
#            with the batched copy-out on and off (ORT_EP_MLX_COPY_BATCH) and the prompt's kernel
#            profile each way
#   pads     a decode bucket's padded device inputs filled by one copy-kernel launch per Run
#            (ORT_EP_MLX_PAD_BATCH, written after the lease that profiled it), the warp-per-row
#            prompt attention and RMS norm, the prompt GEMM's weight sets: the bridge's checks, the
#            device-memory, bucket, genai, LLM, attention, norm and MatMulNBits tests
#   padsperf then (a call of its own) the IOBinding decode loop's phases with the padding batch and
#            the fused decode step each on and off (alternating), the prompt's phases, the kernel
#            profiles and a cold first prompt with the side-by-side compiles on and off
#   diag     the computed-ahead test's count, the prompt's wall time and phases with the logits on the
#            host and on the device, that prompt's kernel profile and host samples, and host inputs
#            prefetched after their copy (ORT_EP_MLX_PREFETCH_COPIES) A/B with a decode kernel profile
#   normcheck  the RMS norm inside its readers' GEMV launch (eighth session; opt-in): the bridge's checks
#            and the tests of the quantized, norm, LLM, device-memory, bucket and genai paths, then the
#            quantized, norm and LLM tests with it on
#   normperf then the IOBinding decode loop with it on and off, and a decode step's kernel profile
#   attn4    decode attention four keys at a time (eighth session): the bridge's checks, the attention
#            and device-memory tests and a decode step's kernel profile
#   warps    the one-token attention's warps a block (ORT_EP_MLX_DECODE_WARPS): kernel profiles and A/B
#   idle     a prompt after idling against back to back (the bench's prompt was slower than the probe's),
#            and MLX's CUDA graph cache size A/B
#   gemmprof a prompt's and a decode step's device time by kernel and launch grid
#   tilem    the prompt's quantized GEMM at a row tile of 128 (ORT_EP_MLX_QGEMM_TILE_M): tests, prompt A/B,
#            kernel profile
#   coldlist which kernels a fresh machine compiles for the first prompt and then for the first decode
#            steps (a fresh MLX_PTX_CACHE_DIR; each new file with its seconds since the process began),
#            then the attention, device-memory, LLM, hostile-input, indexing and cast tests, and the
#            decode loop with index arithmetic fused by MLX and not (ORT_EP_MLX_FUSE_INDEX_MATH)
#   copyprog a Run's device outputs copied by the program's own eval (ORT_EP_MLX_COPY_IN_PROGRAM=1,
#            written without a GPU, opt-in on CUDA): the device-memory, bucket and genai tests with
#            it on, then the IOBinding decode loop's phases and the prompt's with it on and off
#            (alternating), with the run report's program_copies
#   affine   the prompt GEMM's affine form (ORT_EP_MLX_QGEMM_AFFINE=1, written without a GPU, opt-in):
#            the bridge's checks and the MatMulNBits and LLM tests with it on, then the prompt's
#            phases with it on and off (alternating) and the prompt's kernel profile each way
#   slowprobe  why single tests take a minute on the GPU (2026-12-03 durations: an 8x3 SVMClassifier
#            148 s, tree ensembles 69 s): two of the slowest in fresh processes, programs fused only
#            when hot (the default, ORT_EP_MLX_GPU_FUSE_AFTER=8), then fused from their first trace
#            (=1, as before) twice, with the new files in MLX's PTX cache (NVRTC compiles) each time;
#            then test_runtime.py (the fusion trace's own test)
#   both     affine and copyprog in one call's time (tenth session): the bridge's checks and one test
#            run with both switches on (plus test_runtime.py: GPU programs fused only when hot)
#   bothperf then each switch's A/B (prompt for affine, decode loop for copyprog)
#   refixed  the failures of the 2026-12-06 suite run (fixed on the CPU since): their families, then
#            the one-process sequence that aborted (linear attention, RNN, concurrency) three times
#            with the shared GPU stream and once with each thread's own
#   constants a GPU plan's constants prefetched to the GPU at Compile or not: decode loop A/B and
#            kernel profiles (the embedding gather's 159 us a step; the mask reduction's 147 us,
#            whose 8-byte output sat in MLX's read-mostly scalar pool, should be gone either way)
#   modelprof where a plain Run of the BERT layer and of squeezenet goes (the EP at about 2x ORT's CUDA
#            EP there, 2026-12-06): wall time and the EP's phases a Run (bench/model_phases.py), the
#            compiled programs' MLX operations by ONNX op type, and the bench's MLX EP against MLX direct
#   suite    the whole pytest suite with pytest-xdist (handed over as wheels), failures logged as
#            they happen; SUITE_TIMEOUT seconds a run (default 420; a whole run took 155-166 s on an
#            H100 on 2026-12-06), SUITE_REPEAT runs in a row (default 1); SUITE_FILES: a part of
#            the suite, or SUITE_CHUNK=I/N: the files gpu_check.sh's GPU_CHUNK=I/N runs; when no
#            test has ended for SUITE_QUIET seconds (default 100), the run's processes and their
#            Python and native stacks in $OUT/stacks.txt; the log says when the last test ended and
#            when pytest did
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
wheels=$1
OUT=${OUT:-/tmp/gpu-runbook}
mkdir -p "$OUT"
log=$OUT/log.txt
export PYTHONUNBUFFERED=1 ORT_EP_MLX_FAILLOG=$OUT/faillog.txt
GPU_BUILD_ONLY=1 "$root/scripts/gpu_check.sh" "$wheels" > /tmp/gpu_runbook_build.txt 2>&1 || {
  tail -30 /tmp/gpu_runbook_build.txt
  exit 1
}
eval "$(tail -1 /tmp/gpu_runbook_build.txt)"
export PYTHONPATH ORT_EP_MLX_LIBRARY ORT_EP_MLX_KERNEL_CACHE ORT_EP_MLX_DEVICE_MEMORY=${ORT_EP_MLX_DEVICE_MEMORY:-1}
export MLX_PTX_CACHE_DIR=${MLX_PTX_CACHE_DIR:-/tmp/mlx-ptx-cache}
cd "$root"
. "$root/scripts/gpu_common.sh"
step() { case " ${STEPS:-bridge focus} " in *" $1 "*) echo "== $1 $(date +%T)" >> "$log"; return 0 ;; esac; return 1; }
pytest_q() { timeout "$1" python3 -m pytest -q -p no:cacheprovider "${@:2}" 2>&1 | tail -4 >> "$log"; }
# prefill_kernels_ab VAR "VALUES" TOP: the prompt's kernel profile (bench/decode_kernels.py) once per
# value of VAR
prefill_kernels_ab() {
  local var=$1 values=$2 top=$3 v
  for v in $values; do
    echo "$var=$v kernels:" >> "$log"
    env "$var=$v" timeout 200 python3 bench/decode_kernels.py --mode prefill --short 4 --long 16 --top "$top" \
      >> "$log" 2>&1
  done
}
# probe_ab VAR "VALUES" LABEL PATTERN ARGS...: bench/decode_probe.py ARGS in a process of its own per
# value of VAR, in the order given (alternate them), each run's lines matching PATTERN on one log line
probe_ab() {
  local var=$1 values=$2 label=$3 pattern=$4 v
  shift 4
  for v in $values; do
    echo "$var=$v $label: $(env "$var=$v" timeout 150 python3 bench/decode_probe.py "$@" 2>&1 | grep -E "$pattern" \
      | tr '\n' ' ')" >> "$log"
  done
}
{ head -3 /tmp/gpu_runbook_build.txt; echo "sources $(sources_digest) (the tree's .git there says: $(git log --oneline -1 2>/dev/null))"
  nvidia-smi -L; } >> "$log"

if step bridge; then
  cmake --build build-gpu -j "$(nproc)" --target test_bridge > /dev/null 2>&1
  # the float32 dequantization kernel too
  ORT_EP_MLX_DEQUANT_KERNEL=1 timeout 120 build-gpu/test_bridge 2>&1 | tail -5 >> "$log"
fi
if step focus; then
  pytest_q 200 tests/test_device_memory.py tests/test_ops_attention.py -k "gqa or device or shared or copy or iobinding or plain"
  pytest_q 200 -n 8 tests/test_ops_contrib_quant.py tests/test_ops_contrib_norm.py tests/test_ops_cast.py
  pytest_q 200 -n 8 tests/test_ops_pool.py tests/test_ops_shape.py tests/test_ops_matmul.py -k "unpool or eye or float64 or gemm or einsum or dropout or other_dtypes"
fi
if step profile; then
  for mode in io shared direct; do timeout 200 python3 bench/decode_kernels.py --mode "$mode" --top 15 >> "$log" 2>&1; done
fi
if step kcache; then
  kcache_before=$ORT_EP_MLX_KERNEL_CACHE
  export ORT_EP_MLX_KERNEL_CACHE=1
  for i in 1 2; do
    timeout 60 python3 bench/decode_probe.py --mode shared --steps 16 --loops 1 2>&1 | grep -E "loop" >> "$log"
  done
  echo "cubins kept: $(ls "$MLX_PTX_CACHE_DIR" | grep -c 'ort_ep_mlx.*cubin$')" >> "$log"
  pytest_q 200 -n 8 tests/test_ops_contrib_norm.py tests/test_ops_contrib_quant.py tests/test_device_memory.py \
    tests/test_ops_attention.py -k "simplified or skip or nbits or gqa or device or shared or computed"
  export ORT_EP_MLX_KERNEL_CACHE=${kcache_before:-1}
fi
if step graphs; then
  for g in 1 0 1 0; do
    for mode in io shared; do
      echo "MLX_USE_CUDA_GRAPHS=$g $mode" >> "$log"
      MLX_USE_CUDA_GRAPHS=$g timeout 120 python3 bench/decode_probe.py --mode "$mode" --steps 64 2>&1 | grep "loop 1" >> "$log"
    done
  done
fi
if step chains; then
  for mode in io shared; do
    ORT_EP_MLX_LOG_CHAINS=1 timeout 100 python3 bench/decode_probe.py --mode "$mode" --steps 16 --loops 2 2>&1 \
      | grep -E "kernel chains" | sort | uniq -c >> "$log"
  done
  for round in 1 2; do
    for cfg in "1 1" "1 0" "0 0"; do
      set -- $cfg
      for mode in io shared; do
        echo "ORT_EP_MLX_KERNEL_CHAINS=$1 ORT_EP_MLX_CHAIN_GRAPHS=$2 $mode: $(ORT_EP_MLX_KERNEL_CHAINS=$1 \
          ORT_EP_MLX_CHAIN_GRAPHS=$2 timeout 100 python3 bench/decode_probe.py --mode "$mode" --steps 64 --loops 2 \
          --phases 2>&1 | grep -E 'loop 1|phases' | tr '\n' ' ')" >> "$log"
      done
    done
  done
  set --
fi
if step hostprof; then
  ORT_EP_MLX_OP_HISTOGRAM=1 timeout 120 python3 bench/decode_probe.py --mode shared --steps 4 --loops 1 \
    > "$OUT/histogram.txt" 2>&1
  python3 tools/op_histogram.py "$OUT/histogram.txt" --top 10 >> "$log" 2>&1
  for mode in shared io; do  # the EP's phases per decode Run (bind, graph, eval, copy out) beside the step's wall time
    timeout 120 python3 bench/decode_probe.py --mode "$mode" --steps 64 --loops 1 --phases 2>&1 \
      | grep -E "loop|run report|phases" >> "$log"
  done
  if command -v perf > /dev/null; then
    timeout 150 perf record -F 4000 -g -o /tmp/perf.data python3 bench/decode_probe.py --mode shared --steps 128 \
      --loops 1 > /dev/null 2>&1
    perf report -i /tmp/perf.data --no-children --sort dso --stdio 2>/dev/null | grep -v "^#" | head -25 >> "$log"
    perf report -i /tmp/perf.data --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep -v "^#" \
      | head -80 > "$OUT/perf_symbols.txt"
  elif cc -O2 -shared -fPIC -o /tmp/libsampler.so tools/sampler/sampler.c -ldl -lrt -pthread; then
    for mode in shared io; do  # no perf there: the wall-clock sampler of the main thread, decode steps only
      timeout 150 env SAMPLER_OUT="$OUT/sampler_$mode.txt" SAMPLER_TOP=90 SAMPLER_WAIT=1 LD_PRELOAD=/tmp/libsampler.so \
        python3 bench/decode_probe.py --mode "$mode" --steps 48 --loops 2 > /dev/null 2>&1
      sed -n '/innermost function outside libc/,/^$/p' "$OUT/sampler_$mode.txt" | head -16 >> "$log"
    done
  fi
fi
if step buffers; then
  for ops in 20 60 120 250 ${BUFFER_OPS:-}; do
    for mode in shared io; do
      echo "MLX_MAX_OPS_PER_BUFFER=$ops $mode: $(MLX_MAX_OPS_PER_BUFFER=$ops timeout 100 python3 bench/decode_probe.py \
        --mode "$mode" --steps 64 --loops 2 2>&1 | grep "loop 1" | sed 's/.*decode median/decode median/')" >> "$log"
    done
  done
fi
if step fuse; then
  timeout 200 python3 bench/decode_probe.py --mode io --steps 4 --loops 1 > /dev/null 2>&1  # our cubins, once
  for f in 1 0; do
    d=/tmp/ptx-fuse-$f
    rm -rf "$d" && mkdir -p "$d" && cp "$MLX_PTX_CACHE_DIR"/ort_ep_mlx_*.cubin "$d"/ 2>/dev/null
    for i in 1 2; do
      echo "ORT_EP_MLX_GPU_FUSE=$f process $i: $(MLX_PTX_CACHE_DIR=$d ORT_EP_MLX_GPU_FUSE=$f timeout 200 python3 \
        bench/decode_probe.py --mode io --steps 32 --loops 2 2>&1 | grep ' loop ' | sed 's/ (.*first/, first/' | tr '\n' ' ')" >> "$log"
    done
    # the steady prompt each way (its compiled program now cached in $d): what fusion buys a prompt
    echo "ORT_EP_MLX_GPU_FUSE=$f prompt: $(MLX_PTX_CACHE_DIR=$d ORT_EP_MLX_GPU_FUSE=$f timeout 100 python3 \
      bench/decode_probe.py --mode io --steps 0 --loops 10 --phases 2>&1 | grep phases)" >> "$log"
  done
fi
if step genai; then
  for share in --share-buffer ""; do
    echo "genai ${share:-(no shared buffer)}" >> "$log"
    timeout 200 python3 examples/genai_llm.py --out /tmp/genai-qwen --config qwen2.5-0.5b --io-dtype float16 $share \
      --prompt-tokens 128 --new-tokens 64 --option report=stderr 2>&1 | grep -E "tokens in|run report|rror" \
      | cut -c1-400 >> "$log"
  done
fi
if step prefill; then
  timeout 120 python3 bench/prefill_matmul.py --iters 20 >> "$log" 2>&1
  # our float32 dequantization kernel (ORT_EP_MLX_DEQUANT_KERNEL) against MLX's, alternating
  for dq in 1 0 1 0; do
    echo "ORT_EP_MLX_DEQUANT_KERNEL=$dq: $(ORT_EP_MLX_DEQUANT_KERNEL=$dq timeout 100 python3 bench/decode_probe.py \
      --mode io --steps 0 --loops 10 --phases 2>&1 | grep phases)" >> "$log"
  done
  prefill_kernels_ab ORT_EP_MLX_DEQUANT_KERNEL "1 0" 12
fi
if step qgemm; then
  cmake --build build-gpu -j "$(nproc)" --target test_bridge > /dev/null 2>&1
  timeout 120 build-gpu/test_bridge 2>&1 | grep -E "qgemm|checks" | head -12 >> "$log"
  pytest_q 200 -n 8 tests/test_ops_contrib_quant.py tests/test_llm_generation.py -k "nbits or llm or decoder or generation"
  for q in 1 0 1 0; do
    echo "ORT_EP_MLX_QGEMM=$q prompt: $(ORT_EP_MLX_QGEMM=$q timeout 100 python3 bench/decode_probe.py \
      --mode io --steps 0 --loops 10 --phases 2>&1 | grep phases)" >> "$log"
  done
  prefill_kernels_ab ORT_EP_MLX_QGEMM "1 0" 12
  ORT_EP_MLX_OP_HISTOGRAM=1 timeout 120 python3 bench/decode_probe.py --mode shared --steps 4 --loops 1 \
    > "$OUT/histogram.txt" 2>&1
  echo "operations on the CPU stream: $(grep -c '@cpu' "$OUT/histogram.txt") lines; $(grep -m1 ' ops: ' "$OUT/histogram.txt" | cut -c1-300)" >> "$log"
  for mode in io shared; do
    timeout 120 python3 bench/decode_probe.py --mode "$mode" --steps 64 --loops 2 --phases 2>&1 \
      | grep -E "loop 1|phases" >> "$log"
  done
fi
if step rows; then
  cmake --build build-gpu -j "$(nproc)" --target test_bridge > /dev/null 2>&1
  timeout 120 build-gpu/test_bridge 2>&1 | tail -6 >> "$log"
  pytest_q 300 -n 8 tests/test_ops_attention.py tests/test_ops_contrib_quant.py tests/test_llm_generation.py \
    tests/test_device_memory.py tests/test_buckets.py tests/test_cpu_decode.py
fi
if step rowsperf; then
  # the first Run on a cold kernel cache (every MLX kernel and ours compiled by NVRTC), then warm
  cold=$(mktemp -d)
  for i in cold warm; do
    echo "first prompt, $i kernel cache: $(MLX_PTX_CACHE_DIR=$cold timeout 150 python3 bench/decode_probe.py --mode io \
      --steps 2 --loops 1 2>&1 | grep -E 'loop 0|run report|in this process' | cut -c1-300 | tr '\n' ' ')" >> "$log"
  done
  rm -rf "$cold"
  probe_ab ORT_EP_MLX_ROWS_ATTENTION "gpu 0 gpu 0" "prompt 128" 'loop 0|phases' --mode io --steps 0 --loops 10 --phases
  probe_ab ORT_EP_MLX_ROWS_ATTENTION "gpu 0" "prompt 1024" 'phases' --mode io --prompt-tokens 1024 --max-len 2048 \
    --steps 0 --loops 6 --phases
  # the batched copy-out of a decode step's ~50 outputs, and one driver copy each
  probe_ab ORT_EP_MLX_COPY_BATCH "1 0 1 0" decode 'loop 1|phases' --mode io --steps 64 --loops 2 --phases
  prefill_kernels_ab ORT_EP_MLX_ROWS_ATTENTION "gpu 0" 14
fi
if step pads; then
  cmake --build build-gpu -j "$(nproc)" --target test_bridge > /dev/null 2>&1
  timeout 120 build-gpu/test_bridge 2>&1 | tail -4 >> "$log"
  pytest_q 300 -n 8 tests/test_device_memory.py tests/test_buckets.py tests/test_genai.py \
    tests/test_llm_generation.py tests/test_ops_attention.py tests/test_ops_contrib_norm.py tests/test_ops_contrib_quant.py
fi
if step padsperf; then
  probe_ab ORT_EP_MLX_PAD_BATCH "1 0 1 0" decode 'loop 1|phases' --mode io --steps 64 --loops 2 --phases
  probe_ab ORT_EP_MLX_DECODE_FUSED "1 0 1 0" decode 'loop 1|phases' --mode io --steps 64 --loops 2 --phases
  echo "prompt 128: $(timeout 100 python3 bench/decode_probe.py --mode io --steps 0 --loops 10 --phases 2>&1 \
    | grep -E 'phases')" >> "$log"
  for mode in io prefill; do timeout 150 python3 bench/decode_kernels.py --mode $mode --top 16 >> "$log" 2>&1; done
  # the first prompt on a cold kernel cache, our variants compiled side by side and in turn
  for a in 1 0; do
    cold=$(mktemp -d)
    echo "ORT_EP_MLX_ASYNC_COMPILE=$a cold first prompt: $(MLX_PTX_CACHE_DIR=$cold ORT_EP_MLX_ASYNC_COMPILE=$a \
      timeout 150 python3 bench/decode_probe.py --mode io --steps 0 --loops 1 2>&1 \
      | grep -E 'loop 0|in this process' | tr '\n' ' ')" >> "$log"
    rm -rf "$cold"
  done
fi
if step diag; then
  # 2026-12-05 (eighth session): the test the pads step failed (its count now in the message); the
  # prompt's wall time against the EP's phases with the logits on the host and on the device (the
  # bench's prefill leaves them there: 17.5 ms a prompt in the bench against a 9.7 ms Run here);
  # that prompt's kernel profile; small host inputs prefetched after their copy (A/B, kernel profile)
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_ops_contrib_quant.py -k computed_ahead 2>&1 \
    | grep -E "computed_ahead=|passed|failed" | head -6 >> "$log"
  for where in "" --logits-device; do
    echo "prompt ${where:-(logits on the host)}: $(timeout 100 python3 bench/decode_probe.py --mode io --steps 0 --loops 8 \
      --phases $where 2>&1 | grep -E 'loop [4-7]|phases' | sed 's/, loop .*//' | tr '\n' ' ')" >> "$log"
  done
  timeout 150 python3 bench/decode_kernels.py --mode prefill_device --short 4 --long 12 --top 14 >> "$log" 2>&1
  probe_ab ORT_EP_MLX_PREFETCH_COPIES "1 0" decode 'loop 1|phases' --mode io --steps 64 --loops 2 --phases
  echo "ORT_EP_MLX_PREFETCH_COPIES=1:" >> "$log"
  ORT_EP_MLX_PREFETCH_COPIES=1 timeout 150 python3 bench/decode_kernels.py --mode io --short 8 --long 24 --top 14 \
    >> "$log" 2>&1
  if cc -O2 -shared -fPIC -o /tmp/libsampler.so tools/sampler/sampler.c -ldl -lrt -pthread; then
    timeout 120 env SAMPLER_OUT="$OUT/sampler_prompt.txt" SAMPLER_TOP=60 SAMPLER_WAIT=1 LD_PRELOAD=/tmp/libsampler.so \
      python3 bench/decode_probe.py --mode io --steps 0 --loops 12 --logits-device > /dev/null 2>&1
    sed -n '/innermost function outside libc/,/^$/p' "$OUT/sampler_prompt.txt" | head -24 >> "$log"
  fi
fi
if step normcheck; then
  # 2026-12-05 (eighth session): the RMS norm inside its readers' GEMV launch (ORT_EP_MLX_NORM_IN_GEMV),
  # the host inputs' prefetch after their copy, the prompt's RMS norm two rows a block: the bridge's
  # checks (the normed GEMV's NVRTC compile among them) and the tests of the ops they change
  cmake --build build-gpu -j "$(nproc)" --target test_bridge > /dev/null 2>&1
  timeout 120 build-gpu/test_bridge 2>&1 | tail -3 >> "$log"
  timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_ops_contrib_quant.py tests/test_ops_contrib_norm.py \
    tests/test_llm_generation.py tests/test_device_memory.py tests/test_buckets.py tests/test_genai.py 2>&1 \
    | grep -E "computed_ahead=|^FAILED|passed|failed" | head -12 >> "$log"
  ORT_EP_MLX_NORM_IN_GEMV=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_ops_contrib_quant.py \
    tests/test_ops_contrib_norm.py tests/test_llm_generation.py 2>&1 | grep -E "^FAILED|passed|failed" | head -8 >> "$log"
fi
if step normperf; then
  probe_ab ORT_EP_MLX_NORM_IN_GEMV "1 0" decode 'loop 1|phases' --mode io --steps 64 --loops 2 --phases
  timeout 150 python3 bench/decode_kernels.py --mode io --short 8 --long 24 --top 12 >> "$log" 2>&1
fi
if step attn4; then
  # 2026-12-05 (eighth session): decode attention four keys at a time: the bridge's checks, the
  # attention and device-memory tests, a decode step's kernel profile
  cmake --build build-gpu -j "$(nproc)" --target test_bridge > /dev/null 2>&1
  timeout 60 build-gpu/test_bridge 2>&1 | tail -1 >> "$log"
  timeout 120 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_ops_attention.py tests/test_device_memory.py \
    tests/test_ops_paged_attention.py 2>&1 | grep -E "^FAILED|passed|failed" | head -6 >> "$log"
  timeout 100 python3 bench/decode_kernels.py --mode io --short 4 --long 12 --top 6 >> "$log" 2>&1
fi
if step idle; then
  # 2026-12-05 (eighth session): the bench's prompt (one Run after the other engines' turns) took 14.0 ms
  # where back-to-back prompts took 8.2-9.0: a prompt after 300 ms of idling, against none; then
  # MLX's CUDA graph cache (MLX_CUDA_GRAPH_CACHE_SIZE, 100 graphs by default, all dropped when it
  # overflows) at 100 and 2000 for the decode loop and for prompts
  for gap in 0 300 0 300; do
    echo "prompt, ${gap} ms idle before each: $(timeout 100 python3 bench/decode_probe.py --mode io --steps 0 --loops 8 \
      --logits-device --gap-ms $gap --phases 2>&1 | grep -E 'loop [4-7]|phases' | sed 's/, loop .*//' | tr '\n' ' ')" >> "$log"
  done
  probe_ab MLX_CUDA_GRAPH_CACHE_SIZE "100 2000 100 2000" decode 'loop 1|phases' --mode io --steps 64 --loops 2 --phases
  # the copies our bridge issues over a prompt and 8 decode steps (a step's unexplained Memcpy DtoD
  # Device -> Managed of 100-690 us: ours or MLX's)
  echo "copies over a prompt and 8 steps (IOBinding):" >> "$log"
  ORT_EP_MLX_LOG_COPIES=1 timeout 100 python3 bench/decode_probe.py --mode io --steps 8 --loops 1 2>&1 \
    | grep '\[mlx ep\] copy' | sort | uniq -c | sort -rn | head -12 >> "$log"
fi
if step coldlist; then
  # 2026-12-05 (night session): the cold first Run (7.5 s for a prompt) against the issue's 5 s: what
  # NVRTC compiles for a fresh machine's first prompt, then for its first decode steps; MLX's JIT
  # kernels (fused elementwise, gathers) compile one after another, ours side by side
  cold=$(mktemp -d)
  for what in "prompt:--steps 0" "decode steps:--steps 4"; do
    begin=$(date +%s.%N)
    echo "cold ${what%%:*}: $(MLX_PTX_CACHE_DIR=$cold timeout 150 python3 bench/decode_probe.py --mode io \
      ${what#*:} --loops 1 2>&1 | grep -E 'loop 0|run report' | tr '\n' ' ')" >> "$log"
    find "$cold" -type f \( -name '*.ptx' -o -name '*.cubin' \) -newermt "@$begin" -printf '%T@ %s %f\n' | sort -n \
      | awk -v b="$begin" '{printf "  +%.2f s %8d %s\n", $1 - b, $2, substr($3, 1, 110)}' >> "$log"
  done
  rm -rf "$cold"
  timeout 150 python3 -m pytest -q -p no:cacheprovider -n 12 tests/test_ops_attention.py tests/test_device_memory.py \
    tests/test_ops_paged_attention.py tests/test_llm_generation.py tests/hostile tests/test_ops_indexing.py \
    tests/test_ops_cast.py 2>&1 | grep -E "^FAILED|passed|failed" | head -8 >> "$log"
  # what a step pays for keeping index arithmetic out of MLX's fusion (a launch per operation)
  probe_ab ORT_EP_MLX_FUSE_INDEX_MATH "0 1 0 1" decode 'loop 1|phases' --mode io --steps 64 --loops 2 --phases
fi
if step tilem; then
  # 2026-12-05 (night session): the prompt's quantized GEMM at a row tile of 128 (one tile for a
  # 128-token prompt: each weight tile dequantized once; ORT_EP_MLX_QGEMM_TILE_M): the MatMulNBits and
  # LLM tests with it, then the prompt's phases each way (alternating) and its kernel profile at 128
  ORT_EP_MLX_QGEMM_TILE_M=128 timeout 100 python3 -m pytest -q -p no:cacheprovider -n 12 tests/test_ops_contrib_quant.py \
    tests/test_llm_generation.py 2>&1 | grep -E "^FAILED|passed|failed" | head -6 >> "$log"
  probe_ab ORT_EP_MLX_QGEMM_TILE_M "64 128 64 128" prompt 'loop [4-7]|phases' --mode io --steps 0 --loops 8 \
    --logits-device --phases
  ORT_EP_MLX_QGEMM_TILE_M=128 timeout 80 python3 bench/decode_kernels.py --mode prefill_device --short 4 --long 8 \
    --top 6 >> "$log" 2>&1
fi
if step gemmprof; then
  # 2026-12-05 (night session): the prompt's device time by kernel and launch grid (the GEMM's single-
  # set variant serves o_proj, down_proj and lm_head alike), then a decode step's the same way
  timeout 120 python3 bench/decode_kernels.py --mode prefill_device --short 4 --long 12 --top 24 --by-grid \
    >> "$log" 2>&1
  timeout 120 python3 bench/decode_kernels.py --mode io --short 8 --long 24 --top 16 --by-grid >> "$log" 2>&1
fi
if step both; then
  # 2026-12-05 (tenth session): the ninth session's two opt-in switches checked together, then timed apart
  cmake --build build-gpu -j "$(nproc)" --target test_bridge > /dev/null 2>&1
  ORT_EP_MLX_QGEMM_AFFINE=1 ORT_EP_MLX_COPY_IN_PROGRAM=1 timeout 120 build-gpu/test_bridge 2>&1 \
    | grep -E "program copies|FAIL|checks" | tail -6 >> "$log"
  ORT_EP_MLX_QGEMM_AFFINE=1 ORT_EP_MLX_COPY_IN_PROGRAM=1 pytest_q 240 -n 14 tests/test_runtime.py \
    tests/test_ops_contrib_quant.py tests/test_llm_generation.py tests/test_ops_moe.py tests/test_device_memory.py \
    tests/test_buckets.py tests/test_genai.py
fi
if step bothperf; then
  probe_ab ORT_EP_MLX_QGEMM_AFFINE "1 0 1 0" prompt 'loop 0|phases' --mode io --steps 0 --loops 10 --phases
  probe_ab ORT_EP_MLX_COPY_IN_PROGRAM "1 0 1 0" decode 'loop 1|phases|program_copies' --mode io --steps 64 --loops 2 \
    --phases
fi
if step copyprog; then
  # 2026-12-05 (ninth session, no GPU lent): outputs into ORT's device buffers by a copy-kernel node of
  # the program's own eval (one wait a Run instead of three); tests first, then the A/B
  cmake --build build-gpu -j "$(nproc)" --target test_bridge > /dev/null 2>&1
  ORT_EP_MLX_COPY_IN_PROGRAM=1 timeout 120 build-gpu/test_bridge 2>&1 | grep -E "program copies|FAIL|checks" \
    | tail -6 >> "$log"
  ORT_EP_MLX_COPY_IN_PROGRAM=1 pytest_q 240 -n 8 tests/test_device_memory.py tests/test_buckets.py tests/test_genai.py \
    tests/test_llm_generation.py
  probe_ab ORT_EP_MLX_COPY_IN_PROGRAM "1 0 1 0" decode 'loop 1|phases|program_copies' --mode io --steps 64 --loops 2 \
    --phases
  probe_ab ORT_EP_MLX_COPY_IN_PROGRAM "1 0 1 0" prompt 'phases' --mode io --steps 0 --loops 10 --phases
fi
if step affine; then
  # 2026-12-05 (ninth session, no GPU lent): the GEMM's steps as scale * (x . q) + bias * sum(x), half
  # the tensor-core work of the two float16 halves; tests first, then the A/B
  cmake --build build-gpu -j "$(nproc)" --target test_bridge > /dev/null 2>&1
  ORT_EP_MLX_QGEMM_AFFINE=1 timeout 120 build-gpu/test_bridge 2>&1 | tail -4 >> "$log"
  ORT_EP_MLX_QGEMM_AFFINE=1 pytest_q 240 -n 8 tests/test_ops_contrib_quant.py tests/test_llm_generation.py \
    tests/test_ops_moe.py
  probe_ab ORT_EP_MLX_QGEMM_AFFINE "1 0 1 0" prompt 'loop 0|phases' --mode io --steps 0 --loops 10 --phases
  prefill_kernels_ab ORT_EP_MLX_QGEMM_AFFINE "1 0" 12
fi
if step warps; then
  # 2026-12-05 (eighth session): the one-token attention's warps a block (ORT_EP_MLX_DECODE_WARPS 8, 16,
  # 32): the fused step's device time a layer (23 us at 8 on the H100) and the decode loop's phases
  for w in 8 16 32; do
    echo "ORT_EP_MLX_DECODE_WARPS=$w:" >> "$log"
    ORT_EP_MLX_DECODE_WARPS=$w timeout 100 python3 bench/decode_kernels.py --mode io --short 8 --long 32 --top 4 \
      >> "$log" 2>&1
  done
  probe_ab ORT_EP_MLX_DECODE_WARPS "8 32 8 32" decode 'loop 1|phases' --mode io --steps 64 --loops 2 --phases
fi
if step prefetch; then
  # the floor of the device-memory prefetch (ORT_EP_MLX_PREFETCH_MIN, 65536 by default) at 4096 and
  # 65536, alternating: the prompt's and a decode step's phases with IOBinding
  for floor in 4096 65536 4096 65536; do
    echo "ORT_EP_MLX_PREFETCH_MIN=$floor prompt: $(ORT_EP_MLX_PREFETCH_MIN=$floor timeout 100 python3 \
      bench/decode_probe.py --mode io --steps 0 --loops 10 --phases 2>&1 | grep phases)" >> "$log"
    echo "ORT_EP_MLX_PREFETCH_MIN=$floor decode: $(ORT_EP_MLX_PREFETCH_MIN=$floor timeout 100 python3 \
      bench/decode_probe.py --mode io --steps 64 --loops 2 --phases 2>&1 | grep -E 'loop 1|phases' | tr '\n' ' ')" >> "$log"
  done
fi
if step ncu; then
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$ncu_bin" ]; then
    # application replay, caches and clocks as they are: kernel replay saves and restores unified
    # memory around each pass, which moves its pages (2026-12-06: 30 us for a 17 us kernel); the
    # memory apertures say where each kernel's loads were served from (sysmem: over PCIe)
    metrics=gpu__time_duration.sum,sm__cycles_active.avg,dram__bytes_read.sum,lts__t_sectors_srcunit_tex.sum
    metrics=$metrics,lts__t_sectors_srcunit_tex_aperture_sysmem.sum,lts__t_sectors_srcunit_tex_aperture_device.sum
    for mode in io shared; do
      ORT_EP_MLX_CHAIN_GRAPHS=0 timeout 200 "$ncu_bin" --replay-mode application --cache-control none \
        --clock-control none --target-processes all --kernel-name regex:'decode_step|qgemv|rms_norm|copy_batch' \
        --launch-skip 600 --launch-count 10 --metrics "$metrics" \
        python3 bench/decode_probe.py --mode $mode --steps 24 --loops 1 > "$OUT/ncu_$mode.txt" 2>&1
      echo "ncu $mode:" >> "$log"
      grep -E "ort_ep_mlx_[a-z_]+_[0-9a-f]+_sm|aperture|duration|dram__bytes|cycles_active" "$OUT/ncu_$mode.txt" |
        grep -v PROF | head -70 >> "$log"
    done
  else
    echo "no ncu on this machine" >> "$log"
  fi
fi
if step split; then
  engines=mlx
  python3 -c 'import onnxruntime as o; exit("CUDAExecutionProvider" not in o.get_available_providers())' &&
    engines="mlx ort_cuda"
  ORT_EP_MLX_LOG_CHAINS=1 timeout 90 python3 bench/decode_probe.py --mode io --steps 16 --loops 1 2>&1 |
    grep -E "onnxruntime-ep-mlx:|mlx ep\]" | sort | uniq -c | head -10 >> "$log"
  for round in 1 2; do
    for e in $engines; do
      timeout 120 python3 bench/step_split.py --engine "$e" 2>&1 | grep -E "medians of|EP Run" >> "$log"
    done
  done
  if cc -O2 -shared -fPIC -o /tmp/libsampler.so tools/sampler/sampler.c -ldl -lrt -pthread; then
    for e in $engines; do
      timeout 150 env SAMPLER_OUT="$OUT/sampler_$e.txt" SAMPLER_TOP=120 SAMPLER_WAIT=1 LD_PRELOAD=/tmp/libsampler.so \
        python3 bench/step_split.py --engine "$e" --steps 96 > /dev/null 2>&1
    done
  fi
fi
if step attn; then
  # why the decode step kernel of the shared-buffer loop (onnxruntime-genai's) took 22.6 us a launch
  # where the IOBinding loop's took 14.6 (H100, 2026-12-06, fourteenth session, every read in device
  # memory): each loop's kernels with their spread, then the decode step alone in Nsight Compute by
  # application replay: instructions, loads, active cycles and the warps' stall reasons, each flow
  for mode in io shared; do
    echo "spread $mode:" >> "$log"
    timeout 120 python3 bench/kernel_spread.py --mode $mode --steps 48 --rows 16 2>&1 |
      grep -A17 '^kernels of' >> "$log"
  done
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  metrics=gpu__time_duration.sum,sm__cycles_active.avg,smsp__inst_executed.sum,smsp__warps_launched.sum
  metrics=$metrics,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
  metrics=$metrics,lts__t_sectors_srcunit_tex_aperture_sysmem.sum,dram__bytes_read.sum,launch__registers_per_thread
  metrics=$metrics,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
  metrics=$metrics,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
  metrics=$metrics,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio
  for mode in io shared; do
    [ -n "$ncu_bin" ] || break
    ORT_EP_MLX_CHAIN_GRAPHS=0 timeout 200 "$ncu_bin" --replay-mode application --cache-control none \
      --clock-control none --target-processes all --kernel-name regex:'decode_step' --launch-skip 300 \
      --launch-count 3 --metrics "$metrics" \
      python3 bench/decode_probe.py --mode $mode --steps 24 --loops 1 > "$OUT/ncu_attn_$mode.txt" 2>&1
    echo "ncu decode step, $mode:" >> "$log"
    grep -E "ort_ep_mlx_decode_step|\.sum|\.avg|\.ratio|registers" "$OUT/ncu_attn_$mode.txt" | grep -v PROF |
      head -48 >> "$log"
  done
  # the value rows loaded with the key rows (ORT_EP_MLX_DECODE_EARLY_VALUES, opt-in): the attention
  # tests with it, then the decode step kernel's launches and the decode loops' phases each way
  ORT_EP_MLX_DECODE_EARLY_VALUES=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 \
    tests/test_ops_attention.py tests/test_device_memory.py tests/test_llm_generation.py 2>&1 | tail -2 >> "$log"
  for early in 1 0 1 0; do
    for mode in io shared; do
      echo "EARLY_VALUES=$early $mode: $(ORT_EP_MLX_DECODE_EARLY_VALUES=$early timeout 100 python3 \
        bench/decode_probe.py --mode $mode --steps 64 --loops 2 --phases 2>&1 | grep -E 'loop 1|phases' | tr '\n' ' ')" >> "$log"
    done
  done
  for early in 1 0; do
    echo "EARLY_VALUES=$early kernels:" >> "$log"
    ORT_EP_MLX_DECODE_EARLY_VALUES=$early timeout 120 python3 bench/kernel_spread.py --mode io --steps 48 --rows 12 \
      2>&1 | grep -E 'decode_step|qgemv' >> "$log"
  done
fi
if step longctx; then
  # a decode step's time against its context (the decode-attention kernel is one block per head and
  # query; the projections do not grow with the context): 128, 1024 and 3072 prompt tokens, the
  # IOBinding loop and the shared buffer of 4096 rows, each with the EP's phases
  # with the single pass (ORT_EP_MLX_DECODE_PARTS=1, the default) and the context split over up to 8
  # blocks per head, after the GQA tests (long caches included) pass that way
  ORT_EP_MLX_DECODE_PARTS=8 pytest_q 200 tests/test_ops_attention.py -k gqa
  # every decoder engine one step after 2048 tokens (ORT's CUDA EP when carried), single pass
  ort_cuda=$(python3 -c 'import onnxruntime as o; print(",ort_cuda_io" if "CUDAExecutionProvider" in o.get_available_providers() else "")')
  ENGINES=mlx_ep_io,mlx_direct,torch$ort_cuda STEPS=longctx OUT=$OUT/bench timeout 300 bench/gpu_session.sh \
    > /tmp/gpu_runbook_longctx.txt 2>&1
  grep -E "median" /tmp/gpu_runbook_longctx.txt >> "$log"
  for n in 128 1024 3072; do
    for parts in 1 8; do
      for mode in io shared; do
        echo "context $n, parts $parts, $mode: $(ORT_EP_MLX_DECODE_PARTS=$parts timeout 150 python3 bench/decode_probe.py \
          --mode $mode --prompt-tokens $n --max-len 4096 --steps 32 --loops 2 --phases 2>&1 | grep -E 'loop 1|phases' \
          | sed 's/.*decode median/decode median/' | tr '\n' ' ')" >> "$log"
      done
    done
  done
fi
if step families; then
  # the families the 2026-12-04 suite run failed on the GPU (docs/ARCHITECTURE.md, "Where it has been run")
  pytest_q 300 -n 8 tests/test_ops_moe.py tests/test_ops_contrib_quant.py tests/test_llm_generation.py \
    tests/test_ops_elementwise.py tests/test_ops_emulated.py tests/test_ops_random.py \
    tests/hostile/test_hostile_sizes_values.py
fi
if step changed; then
  # 2026-12-04 (second session, no GPU lent): CPU-tested only
  pytest_q 400 -n 8 tests/test_ops_linear_attention.py tests/fuzz tests/hostile tests/test_ops_indexing.py \
    tests/test_ops_shape.py tests/test_ops_matmul.py tests/test_ops_detection.py tests/test_ops_vision.py \
    tests/test_ops_pool.py tests/test_ops_sequence.py tests/test_ops_paged_attention.py tests/test_ops_attention.py \
    tests/test_ops_reduction.py tests/test_ops_host_read.py tests/test_ops_conv.py
  # 2026-12-05 (no GPU lent): the EP's CBLAS definitions and CPU kernels under mlx-cuda-13's libmlx (CPU sessions)
  pytest_q 120 tests/test_cpu_blas.py tests/test_cpu_qgemv.py tests/test_ep.py
  # 2026-12-05 (later): the CPU recurrence and unary primitives (CPU sessions there; the GPU keeps
  # the unrolled RNN form: both forms against ORT)
  pytest_q 200 -n 8 tests/test_cpu_unary.py tests/test_ops_rnn.py
  # 2026-12-05 (third session, no GPU lent): the CPU decode primitives and GEMV sets (skipped where
  # the default device is the GPU; the bridge step's test_decode_step checks the CUDA kernels against
  # its references), the transpose sinking (CPU scopes only: the GPU runs the same graphs unsunk)
  pytest_q 200 -n 8 tests/test_cpu_decode.py tests/test_layout_sinking.py tests/test_ops_contrib_quant.py \
    tests/test_ops_contrib_norm.py
  # 2026-12-05 (fourth session, no GPU lent): the CPU's packed GEMM (MatMul, Gemm, Conv with constant
  # weights: CPU sessions; on a GPU scope prepare packs nothing and the lowerings are MLX's as before,
  # which the matmul, conv and pool files check) and the pooling geometry's 32-bit refusal
  pytest_q 200 -n 8 tests/test_cpu_gemm.py tests/test_ops_matmul.py tests/test_ops_conv.py tests/test_ops_pool.py \
    tests/test_llm_generation.py
  # 2026-12-05 (fifth session, after its H100 lease): the harness fixes that lease called for (child
  # processes keep PYTHONPATH, histogram probes without MLX's @cpu tag, hostile size refusals with
  # ORT's reference in a child), Gelu as MLXB_GELU_ERF (MLX's operations on the GPU), Pad's crossed
  # crops (every device), and the CPU-only kernels' tests (LayerNorm, recurrence, linear epilogue)
  pytest_q 300 -n 8 tests/hostile tests/test_cpu_blas.py tests/test_cpu_qgemv.py tests/test_cpu_gemm.py \
    tests/test_layout_sinking.py tests/test_cpu_unary.py tests/test_ops_rnn.py tests/test_ops_activation.py \
    tests/test_ops_contrib_act.py tests/test_ops_normalization.py tests/test_ops_shape.py
  # 2026-12-05 (sixth session, after its H100 lease): CPU scopes only (the GPU keeps MLX's forms): the
  # concatenation task, reductions of transposed views, MaxPool's channel loop, the GEMV's four columns,
  # the pool's placement of woken helpers; and the device-memory helper the tests now share
  pytest_q 300 -n 8 tests/test_ops_shape.py tests/test_layout_sinking.py tests/test_ops_pool.py \
    tests/test_cpu_qgemv.py tests/test_ops_rnn.py tests/test_diagnostics.py tests/test_device_memory.py
fi
if step bench; then
  # ORT's CUDA EP joins when it was carried (ortgpu parts, scripts/gpu_pack.sh)
  ort_cuda=$(python3 -c 'import onnxruntime as o; print(",ort_cuda,ort_cuda_io" if "CUDAExecutionProvider" in o.get_available_providers() else "")')
  ENGINES=${ENGINES:-mlx_ep_io,mlx_ep_shared,mlx_direct,torch$ort_cuda} STEPS=decoder OUT=$OUT/bench timeout 330 bench/gpu_session.sh \
    > /tmp/gpu_runbook_bench.txt 2>&1
  grep -E "median|tok/s|NOT met|met;" /tmp/gpu_runbook_bench.txt >> "$log"
fi
if step models; then
  STEPS=models OUT=$OUT/bench timeout 150 bench/gpu_session.sh > /tmp/gpu_runbook_models.txt 2>&1
  grep -E "median|met;|NOT met" /tmp/gpu_runbook_models.txt >> "$log"
  # transposes sunk through elementwise work on the GPU too (CPU scopes only by default): the CNN
  # again, the EP alone, against the row above
  ORT_EP_MLX_SINK_TRANSPOSES=gpu timeout 60 python3 bench/run.py --device gpu --workloads squeezenet \
    --engines mlx_ep --out "$OUT/sink_gpu.md" > /tmp/gpu_runbook_sink.txt 2>&1
  grep -E "^\| squeezenet" "$OUT/sink_gpu.md" | sed 's/^/transposes sunk on the GPU: /' >> "$log"
fi
if step conformance; then
  export GPU_NAME EP_COMMIT
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  # the device's copy of .git can lag the tree (sources_digest): the call's command names the commit
  # it was written at (EP_COMMIT=$(git rev-parse --short HEAD) run here) when it can
  EP_COMMIT=${EP_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || true)}
  shards=${CONF_SHARDS:-40} conf_end=$((SECONDS + ${CONF_TIMEOUT:-300})) conf_dir=/tmp/gpu-conformance
  rm -rf "$conf_dir" && mkdir -p "$conf_dir"
  for i in $(seq 0 $((shards - 1))); do
    left=$((conf_end - SECONDS))
    [ "$left" -gt 5 ] || break
    timeout "$left" python3 tests/conformance/run.py -j 14 --timeout 60 --shard "$i/$shards" \
      --device-summary "$conf_dir/gpu_summary_$i.json" > "$conf_dir/shard_$i.txt" 2>&1
  done
  echo "conformance: $(ls "$conf_dir"/gpu_summary_*.json 2>/dev/null | wc -l) of $shards shards done" >> "$log"
  tar czf "$OUT/conformance.tgz" -C "$conf_dir" .
fi
if step slowprobe; then
  for k in "test_svm_classifier_post and 3-True-SOFTMAX]" "test_tree_classifier_multiclass and True-SOFTMAX-5"; do
    f=tests/test_ops_ml_svm.py
    case "$k" in *tree*) f=tests/test_ops_ml_trees.py ;; esac
    for after in 8 1 1; do
      n0=$(ls "$MLX_PTX_CACHE_DIR" | wc -l) t0=$SECONDS
      r=$(ORT_EP_MLX_GPU_FUSE_AFTER=$after timeout 150 python3 -m pytest -q -p no:cacheprovider "$f" -k "$k" 2>&1 \
        | tail -1)
      echo "slowprobe $k fuse_after=$after: $((SECONDS - t0)) s, $(($(ls "$MLX_PTX_CACHE_DIR" | wc -l) - n0)) new PTX" \
        "files; $r" >> "$log"
    done
  done
  pytest_q 120 tests/test_runtime.py
fi
if step refixed; then
  # 2026-12-06 (eleventh session): the suite's failures of that day's lease, fixed on the CPU since:
  # the families, then the sequence that aborted in one process (linear attention and RNN tests, then
  # the 8-thread concurrency tests, CUDA graphs on) three times, each with its abort message if any
  pytest_q 200 -n 14 tests/test_ops_linear_attention.py tests/test_ops_rnn.py tests/test_ops_pool.py \
    tests/test_device_memory.py tests/test_ops_control.py
  for v in 1 1 1 0; do # the shared GPU stream (ORT_EP_MLX_SHARED_GPU_STREAM) three times, then each thread's own
    ORT_EP_MLX_SHARED_GPU_STREAM=$v timeout 120 python3 -m pytest -q -s -p no:cacheprovider \
      tests/test_ops_linear_attention.py tests/test_ops_rnn.py tests/test_concurrency.py > /tmp/refixed.txt 2>&1
    echo "sequence (shared stream $v): rc=$? $(grep -a -o 'what():.*' /tmp/refixed.txt | head -1)" \
      "$(tail -1 /tmp/refixed.txt)" >> "$log"
  done
fi
if step constants; then
  # 2026-12-06 (eleventh session, after its lease): a GPU plan's constants prefetched to the GPU at
  # Compile (ORT_EP_MLX_PREFETCH_CONSTANTS): the decode loop's phases and kernel profile each way
  probe_ab ORT_EP_MLX_PREFETCH_CONSTANTS "1 0 1 0" decode 'loop 1|phases' --mode io --steps 64 --loops 2 --phases
  for v in 1 0; do
    echo "ORT_EP_MLX_PREFETCH_CONSTANTS=$v kernels:" >> "$log"
    ORT_EP_MLX_PREFETCH_CONSTANTS=$v timeout 120 python3 bench/decode_kernels.py --mode io --short 8 --long 24 \
      --top 8 >> "$log" 2>&1
  done
fi
if step modelprof; then
  for w in bert_layer_s128 squeezenet; do
    timeout 100 python3 bench/model_phases.py --workload "$w" --device gpu >> "$log" 2>&1
    ORT_EP_MLX_OP_HISTOGRAM=1 timeout 100 python3 bench/model_phases.py --workload "$w" --device gpu --runs 2 \
      --warmup 1 > "/tmp/hist_$w.txt" 2>&1
    python3 tools/op_histogram.py "/tmp/hist_$w.txt" --top 8 >> "$log" 2>&1
  done
  timeout 150 python3 bench/run.py --device gpu --workloads bert_layer_s128,squeezenet \
    --engines mlx_ep,mlx_ep_io,mlx_direct --out "$OUT/models.md" 2>&1 | tail -12 >> "$log"
fi
# suite_run I: the suite's I-th run of this call (SUITE_FILES, else all of it), within SUITE_TIMEOUT
# and what is left before RUNBOOK_DEADLINE (a call's earlier steps took what they took; the call
# keeps its 10-minute limit: leave a minute after it for the PTX cache to be packed into $OUT)
suite_run() {
  local i=$1 limit=${SUITE_TIMEOUT:-420} left=$(( ${RUNBOOK_DEADLINE:-100000} - SECONDS )) start=$SECONDS pid rc f
  [ "$left" -lt "$limit" ] && limit=$left
  [ "$limit" -gt 0 ] || { echo "suite run $i: no time left" >> "$log"; return; }
  rm -f /tmp/gpu_tests.txt /tmp/gpu_tests.txt.stacks-*
  echo "== suite run $i" >> "$ORT_EP_MLX_FAILLOG"
  # ORT_EP_MLX_TESTLOG: every test's seconds (setup and call, the setup apart; slow teardowns on
  # lines of their own), outcome, end time and worker as it ends (a run cut by the limit keeps them:
  # what it reached and when; on 2026-12-06 the calls summed to a quarter of the workers' time
  # because one fuzz test stalled for minutes after the rest had ended: tools/fuzz/harness.py)
  ORT_EP_MLX_TESTLOG=/tmp/gpu_tests.txt timeout "$limit" python3 -m pytest -q -p no:cacheprovider -n 14 --dist worksteal \
    --durations=60 --ignore=tests/test_leaks.py --ignore=tests/test_conformance_runner.py ${SUITE_FILES:-tests} \
    > /tmp/gpu_suite.txt 2>&1 &
  pid=$!
  watch_quiet_suite "$pid" /tmp/gpu_tests.txt "${SUITE_QUIET:-100}" "$OUT/stacks.txt"
  wait "$pid"
  rc=$?
  echo "suite run $i: exit $rc after $((SECONDS - start)) s; last test line at $(tail -1 /tmp/gpu_tests.txt 2>/dev/null \
    | grep -o 'at=[0-9.]*')" >> "$log"
  tail -4 /tmp/gpu_suite.txt >> "$log"
  sed -n '/slowest .*durations/,/^=/p' /tmp/gpu_suite.txt > "$OUT/durations.txt"
  { echo "== suite run $i"; cat /tmp/gpu_tests.txt 2>/dev/null; } >> /tmp/gpu_tests_all.txt
  for f in /tmp/gpu_tests.txt.stacks-*; do
    [ -s "$f" ] && { echo "== Python stacks, run $i, ${f##*-}"; cat "$f"; } >> "$OUT/stacks.txt"
  done
}
if step suite; then
  [ -z "${SUITE_CHUNK:-}" ] || SUITE_FILES=$(suite_chunk "$SUITE_CHUNK" | tr '\n' ' ')
  # SUITE_REPEAT=N whole runs one after the other (issue 13 asks three in a row without a crash);
  # every run's tests in tests.txt.xz, each under its "== suite run I" line, the faillog likewise
  rm -f /tmp/gpu_tests_all.txt
  for i in $(seq 1 "${SUITE_REPEAT:-1}"); do suite_run "$i"; done
  xz -9 < /tmp/gpu_tests_all.txt > "$OUT/tests.txt.xz"
fi
echo "== done $(date +%T)" >> "$log"
save_ptx_cache "$MLX_PTX_CACHE_DIR" # with what the steps compiled
tail -40 "$log"
