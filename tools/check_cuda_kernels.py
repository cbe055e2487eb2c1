#!/usr/bin/env python3
"""Compiles the EP's own CUDA kernels (src/mlx/bridge_kernels*.cpp) with nvcc for the H200's sm_90,
the way MLX's CUDA backend wraps them (mlx/backend/cuda/custom_kernel.cpp: each input a `const T*`
plus `<name>_shape` when the source reads it, template arguments as constexpr/using lines before the
body), so a typo or a type error shows here and not after a device call. Needs nvcc (CUDA 12+).
The other form they reach the GPU in (the kernel cache's precompiled one) is compiled by the bridge
itself with NVRTC, in build/test_bridge (mlxb_cuda_kernels_selfcheck). Both check that the kernels
compile, not what they compute: the GPU suite does that.

    tools/check_cuda_kernels.py [--nvcc PATH] [-v] [-j JOBS]
"""
import argparse
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = sorted(glob.glob(os.path.join(ROOT, "src", "mlx", "bridge_kernels*.cpp")))


def kernel_text():
    """The kernel files' text, one after the other (each kernel source is a raw string in one of them)."""
    return "\n".join(open(path).read() for path in SOURCES)

PRELUDE = """#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda/std/array>
#include <cuda/std/limits>
#include <cooperative_groups.h>
#include <cstdint>
using Shape = cuda::std::array<int32_t, 10>;
#define inf cuda::std::numeric_limits<float>::infinity()
"""

# the template arguments of a GEMV launch without a norm in it (qgemv_source's NORM)
PLAIN = dict(NORM=False, NORM_K=1, HAS_SKIP=False, HAS_NBIAS=False, WRITE_SUM=False, SKIP_RANK=1)

# kernel source variable -> (header variable or None, inputs [(name, type)], outputs [(name, type)],
# instantiations: list of {template argument: value}). "T" in a type is the T template argument.
KERNELS = {
    "decode_attention_source": ("rope_header",
        [("q", "T"), ("k", "T"), ("v", "T"), ("lens", "int32_t"), ("params", "float"), ("rope_pos", "int32_t"),
         ("cos", "T"), ("sin", "T"), ("order", "int32_t")],
        [("out", "T"), ("part_max", "float"), ("part_sum", "float"), ("part_acc", "float")],
        [dict(T="__half", HEAD=64, HQ=14, HKV=2, WARPS=8, WINDOW=0, ROT=64, INTER=False, LEN_ADD=1, POS_ADD=0,
              PARTS=1, EARLY=True),
         dict(T="float", HEAD=128, HQ=8, HKV=8, WARPS=8, WINDOW=16, ROT=0, INTER=True, LEN_ADD=0, POS_ADD=-1,
              PARTS=8, EARLY=False),
         dict(T="float", HEAD=256, HQ=8, HKV=2, WARPS=32, WINDOW=0, ROT=64, INTER=False, LEN_ADD=1, POS_ADD=0,
              PARTS=1, EARLY=True)]),
    "rows_attention_source": ("rope_header",
        [("q", "T"), ("k", "T"), ("v", "T"), ("lens", "int32_t"), ("params", "float"), ("rope_pos", "int64_t"),
         ("cos", "T"), ("sin", "T"), ("rows", "int32_t")], [("out", "T")],
        [dict(T="__half", HEAD=64, HQ=14, HKV=2, WARPS=8, WINDOW=0, ROT=64, INTER=False, LEN_ADD=1, POS_ADD=0,
              FIRST=True, CAUSAL=True, WIN_BOUND=False, POS_ROWS=True),
         dict(T="float", HEAD=96, HQ=8, HKV=8, WARPS=8, WINDOW=16, ROT=32, INTER=True, LEN_ADD=1, POS_ADD=0,
              FIRST=False, CAUSAL=False, WIN_BOUND=True, POS_ROWS=False)]),
    "decode_step_source": ("rope_header",
        [("q", "T"), ("past_k", "T"), ("past_v", "T"), ("k", "T"), ("v", "T"), ("lens", "int32_t"), ("params", "float"),
         ("rope_pos", "int64_t"), ("cos", "T"), ("sin", "T"), ("dims", "int32_t")],
        [("out", "T"), ("out_k", "T"), ("out_v", "T")],
        [dict(T="__half", HEAD=64, HQ=14, HKV=2, WARPS=8, WINDOW=0, ROT=64, INTER=False, LEN_ADD=1, POS_ADD=0,
              IN_PLACE=False, EARLY=True),
         dict(T="float", HEAD=128, HQ=8, HKV=8, WARPS=8, WINDOW=16, ROT=0, INTER=True, LEN_ADD=1, POS_ADD=-1,
              IN_PLACE=True, EARLY=False)]),
    "decode_merge_source": ("rope_header",
        [("part_max", "float"), ("part_sum", "float"), ("part_acc", "float")], [("out", "T")],
        [dict(T="__half", HEAD=64, PARTS=8), dict(T="__nv_bfloat16", HEAD=128, PARTS=3)]),
    "kv_append_source": ("rope_header",
        [("past_k", "T"), ("past_v", "T"), ("k", "T"), ("v", "T"), ("at_pos", "int32_t"), ("plen", "int32_t"),
         ("rope_pos", "int64_t"), ("cos", "T"), ("sin", "T")], [("out_k", "T"), ("out_v", "T")],
        [dict(T="__half", HEAD=64, ROT=64, INTER=False, AT_ADD=0, POS_ADD=0, AT_ZERO=False, POS_ROWS=False),
         dict(T="__nv_bfloat16", HEAD=96, ROT=32, INTER=True, AT_ADD=-1, POS_ADD=1, AT_ZERO=True, POS_ROWS=True)]),
    "kv_write_source": ("rope_header",
        [("cache_k", "T"), ("cache_v", "T"), ("k", "T"), ("v", "T"), ("at_pos", "int64_t"), ("rope_pos", "int64_t"),
         ("cos", "T"), ("sin", "T")], [("done", "int32_t")],
        [dict(T="__half", HEAD=64, ROT=64, INTER=False, AT_ADD=0, POS_ADD=0),
         dict(T="float", HEAD=128, ROT=0, INTER=True, AT_ADD=1, POS_ADD=0)]),
    "qgemv_source": ("qgemv_header",
        [("x", "T")] + [(f"{n}{i}", t) for i in range(3)
                        for n, t in (("w", "uint32_t"), ("scales", "float"), ("biases", "float"))]
                     + [("bias0", "T"), ("bias1", "T"), ("bias2", "T"), ("skip", "T"), ("nbias", "T"), ("gamma", "T"),
                        ("eps", "E")],
        [("out0", "T"), ("out1", "T"), ("out2", "T"), ("act0", "T"), ("act1", "T"), ("nsum", "T")],
        [dict(T="__half", E="__half", BITS=4, GROUP=32, WARPS=4, LANES=8, SETS=3, BIASED=5, SWIGLU=False, **PLAIN),
         dict(T="float", E="float", BITS=2, GROUP=32, WARPS=4, LANES=16, SETS=1, BIASED=0, SWIGLU=False, **PLAIN),
         dict(T="__nv_bfloat16", E="__nv_bfloat16", BITS=8, GROUP=128, WARPS=4, LANES=32, SETS=2, BIASED=2,
              SWIGLU=False, **PLAIN),
         dict(T="__half", E="__half", BITS=4, GROUP=32, WARPS=4, LANES=16, SETS=2, BIASED=1, SWIGLU=True, **PLAIN),
         dict(T="__half", E="float", BITS=4, GROUP=32, WARPS=4, LANES=8, SETS=3, BIASED=5, SWIGLU=False, NORM=True,
              NORM_K=896, HAS_SKIP=True, HAS_NBIAS=False, WRITE_SUM=True, SKIP_RANK=3),
         dict(T="__nv_bfloat16", E="float", BITS=4, GROUP=32, WARPS=4, LANES=16, SETS=2, BIASED=0, SWIGLU=True,
              NORM=True, NORM_K=512, HAS_SKIP=False, HAS_NBIAS=True, WRITE_SUM=False, SKIP_RANK=1)]),
    "dequant_f32_source": (None,
        [("w", "uint32_t"), ("scales", "float"), ("biases", "float")], [("out", "float")],
        [dict(BITS=4, GROUP=32), dict(BITS=8, GROUP=128), dict(BITS=2, GROUP=64)]),
    "qgemm_split_source": ("qgemm_header",
        [("x", "__half")] + [(f"{n}{i}", t) for i in range(3)
                             for n, t in (("w", "uint32_t"), ("scales", "float"), ("biases", "float"))]
        + [("bias", "__half"), ("post0", "__half"), ("post1", "__half"), ("post2", "__half")],
        [("out0", "__half"), ("out1", "__half"), ("out2", "__half"), ("partial", "float")],
        [dict(BITS=4, GROUP=32, HAS_BIAS=True, POST=1, SETS=1, BM=64, AFFINE=False),
         dict(BITS=8, GROUP=128, HAS_BIAS=False, POST=0, SETS=2, BM=128, AFFINE=False),
         dict(BITS=2, GROUP=64, HAS_BIAS=False, POST=5, SETS=3, BM=64, AFFINE=True),
         dict(BITS=4, GROUP=32, HAS_BIAS=False, POST=5, SETS=3, BM=128, AFFINE=False),
         dict(BITS=4, GROUP=32, HAS_BIAS=True, POST=1, SETS=1, BM=64, AFFINE=True),
         dict(BITS=8, GROUP=32, HAS_BIAS=False, POST=0, SETS=2, BM=64, AFFINE=True)]),
    "qgemm_reduce_source": (None,
        [("partial", "float"), ("bias", "__half"), ("post0", "__half"), ("post1", "__half"), ("post2", "__half"),
         ("dims", "int32_t")], [("out0", "__half"), ("out1", "__half"), ("out2", "__half")],
        [dict(HAS_BIAS=True, POST=0), dict(HAS_BIAS=False, POST=7)]),
    "gather_bq_source": (None,
        [("data", "uint8_t"), ("indices", "int64_t"), ("scales", "S"), ("zero_points", "uint8_t"), ("dims", "int32_t")],
        [("out", "S")],
        [dict(S="__half", BITS=4, BLOCK=32, HAS_ZP=True), dict(S="float", BITS=2, BLOCK=16, HAS_ZP=False)]),
    "int_reduce_source": (None, [("x", "T")], [("out", "T")],
        [dict(T="int64_t", MEAN=False), dict(T="int32_t", MEAN=True)]),
    "range_check_source": (None, [("x", "T"), ("bounds", "int64_t")], [("out", "int64_t")],
        [dict(T="int64_t", SIGNED=True, CHECK_LO=True, CHECK_HI=True),
         dict(T="uint32_t", SIGNED=False, CHECK_LO=False, CHECK_HI=True)]),
    "rms_norm_source": (None,
        [("x", "T"), ("skip", "T"), ("bias", "T"), ("gamma", "T"), ("eps", "float")], [("y", "T"), ("sum", "T")],
        [dict(T="__half", HAS_SKIP=True, HAS_BIAS=False, WRITE_SUM=True, SKIP_RANK=2),
         dict(T="__nv_bfloat16", HAS_SKIP=False, HAS_BIAS=True, WRITE_SUM=False, SKIP_RANK=3),
         dict(T="float", HAS_SKIP=True, HAS_BIAS=True, WRITE_SUM=True, SKIP_RANK=1)]),
    "rms_rows_source": (None,
        [("x", "T"), ("skip", "T"), ("bias", "T"), ("gamma", "T"), ("eps", "float"), ("dims", "int32_t")],
        [("y", "T"), ("sum", "T")],
        [dict(T="__half", HAS_SKIP=True, HAS_BIAS=False, WRITE_SUM=True, SKIP_RANK=3, PER=28),
         dict(T="float", HAS_SKIP=False, HAS_BIAS=True, WRITE_SUM=False, SKIP_RANK=2, PER=64)]),
}


def raw_strings(text):
    return dict(re.findall(r'const char \*(\w+) = R"\((.*?)\)";', text, re.S))


def constant_line(name, value):
    if isinstance(value, bool):
        return f"  constexpr bool {name} = {'true' if value else 'false'};"
    if isinstance(value, int):
        return f"  constexpr int {name} = {value};"
    return f"  using {name} = {value};"


def param_type(typ, args):
    """A parameter's C++ type: a template type argument (T, S: a string in args) or the type itself."""
    value = args.get(typ)
    return value if isinstance(value, str) else ("float" if typ == "T" else typ)


def wrap(index, source_name, header, inputs, outputs, args, body):
    params = []
    for name, typ in inputs:
        params.append(f"const {param_type(typ, args)}* {name}")
        if f"{name}_shape" in body:
            params.append(f"const __grid_constant__ Shape {name}_shape")
    params += [f"{param_type(typ, args)}* {name}" for name, typ in outputs]
    lines = [f"__global__ void {source_name}_{index}(" + ", ".join(params) + ") {"]
    lines += [constant_line(k, v) for k, v in args.items()]
    return "namespace mlx::core::cu {\n" + "\n".join(lines) + "\n" + body + "\n}\n}\n"


def compile_unit(nvcc, tmp, label, unit, verbose):
    path = os.path.join(tmp, label + ".cu")
    open(path, "w").write(unit)
    r = subprocess.run([nvcc, "-std=c++17", "-arch=sm_90", "-c", path, "-o", path + ".o", "-Xptxas", "-v"],
                       capture_output=True, text=True)
    if r.returncode != 0 or verbose:
        print(r.stderr)
    return r.returncode == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    ap.add_argument("-v", action="store_true")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="nvcc processes at once")
    args = ap.parse_args()
    if not os.path.exists(args.nvcc):
        print("nvcc not found", file=sys.stderr)
        return 2
    strings = raw_strings(kernel_text())
    missing = [k for k in KERNELS if k not in strings]
    unknown = [k for k in strings if k.endswith("_source") and k not in KERNELS]
    if missing or unknown:
        print(f"kernel table out of date: missing {missing}, not described {unknown}", file=sys.stderr)
        return 1
    def unit_of(source_name):
        header, inputs, outputs, instances = KERNELS[source_name]
        return PRELUDE + (strings[header] if header else "") + "".join(
            wrap(i, source_name, header, inputs, outputs, inst, strings[source_name]) for i, inst in enumerate(instances))

    failed = 0
    # one nvcc per kernel file at a time on every core: serially they took two minutes on the GPU
    # machine, the GPU suite's longest test
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        done = pool.map(lambda name: compile_unit(args.nvcc, tmp, name, unit_of(name), args.v), KERNELS)
        for source_name, ok in zip(KERNELS, done):
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {source_name} ({len(KERNELS[source_name][3])} instantiations)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
