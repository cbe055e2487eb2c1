#!/usr/bin/env python3
"""Writes the C++ form of the EP's CUDA kernels that tools/cuda_emu runs on the CPU: for each
instantiation in INSTANCES, the kernel body of src/mlx/bridge_kernels*.cpp with its header, its template
arguments as constexpr/using lines and its parameters as the kernel cache passes them (inputs, outputs,
then each read shape as an int array), in a namespace of its own.

    tools/cuda_emu/gen.py OUT.inc
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import check_cuda_kernels as ck  # noqa: E402


def qgemm(sets, bm=64, affine=False, group=32, post=None):
    """The 4-bit GEMM as emu_test.cpp's checks launch it: three sets with split K and following biases
    on sets 0 and 2, or one set with a bias input (and a following bias unless post=0)."""
    three = sets == 3
    post = 5 if three else (1 if post is None else post)
    return ("qgemm_split_source", dict(BITS=4, GROUP=group, HAS_BIAS=not three, POST=post, SETS=sets, BM=bm,
                                       AFFINE=affine))


# namespace -> (kernel source variable, template arguments)
INSTANCES = {
    "rows_f32": ("rows_attention_source", dict(T="float", HEAD=8, HQ=4, HKV=2, WARPS=8, WINDOW=0, ROT=4, INTER=False,
                                               LEN_ADD=1, POS_ADD=0, FIRST=False, CAUSAL=True, WIN_BOUND=False,
                                               POS_ROWS=True)),
    "rows_f32_window": ("rows_attention_source", dict(T="float", HEAD=8, HQ=4, HKV=2, WARPS=8, WINDOW=2, ROT=0,
                                                      INTER=False, LEN_ADD=1, POS_ADD=0, FIRST=True, CAUSAL=True,
                                                      WIN_BOUND=True, POS_ROWS=False)),
    "rows_f32_bidir": ("rows_attention_source", dict(T="float", HEAD=8, HQ=4, HKV=2, WARPS=8, WINDOW=0, ROT=0,
                                                     INTER=False, LEN_ADD=1, POS_ADD=0, FIRST=False, CAUSAL=False,
                                                     WIN_BOUND=False, POS_ROWS=False)),
    "rms_rows_f32": ("rms_rows_source", dict(T="float", HAS_SKIP=True, HAS_BIAS=True, WRITE_SUM=True, SKIP_RANK=3,
                                            PER=2)),
    "rms_rows_f16": ("rms_rows_source", dict(T="__half", HAS_SKIP=True, HAS_BIAS=False, WRITE_SUM=True, SKIP_RANK=2,
                                            PER=2)),
    "rows_f16": ("rows_attention_source", dict(T="__half", HEAD=8, HQ=4, HKV=2, WARPS=8, WINDOW=0, ROT=4, INTER=False,
                                               LEN_ADD=1, POS_ADD=0, FIRST=False, CAUSAL=True, WIN_BOUND=False,
                                               POS_ROWS=True)),
    "qgemm_sets3": qgemm(3),
    "qgemm_one": qgemm(1),
    "qgemm_sets3_bm128": qgemm(3, bm=128),
    "qgemm_one_bm128": qgemm(1, bm=128),
    "qgemm_sets3_affine": qgemm(3, affine=True),
    "qgemm_one_affine": qgemm(1, affine=True),
    "qgemm_sets3_affine_bm128": qgemm(3, bm=128, affine=True),
    "qgemm_one_affine_bm128": qgemm(1, bm=128, affine=True),
    "qgemm_one_g64": qgemm(1, group=64, post=0),
    "qgemm_one_affine_g64": qgemm(1, group=64, post=0, affine=True),
    "qgemm_reduce3": ("qgemm_reduce_source", dict(HAS_BIAS=False, POST=5)),
    "append_rows": ("kv_append_source", dict(T="float", HEAD=8, ROT=4, INTER=False, AT_ADD=-2, POS_ADD=0,
                                             AT_ZERO=False, POS_ROWS=False)),
    "decode_f32": ("decode_attention_source", dict(T="float", HEAD=8, HQ=4, HKV=2, WARPS=8, WINDOW=2, ROT=4,
                                                   INTER=False, LEN_ADD=1, POS_ADD=0, PARTS=1, EARLY=True)),
    "decode_parts": ("decode_attention_source", dict(T="float", HEAD=8, HQ=4, HKV=2, WARPS=8, WINDOW=0, ROT=0,
                                                     INTER=False, LEN_ADD=1, POS_ADD=0, PARTS=2, EARLY=False)),
    "decode_long": ("decode_attention_source", dict(T="float", HEAD=8, HQ=4, HKV=2, WARPS=8, WINDOW=0, ROT=4,
                                                    INTER=False, LEN_ADD=1, POS_ADD=0, PARTS=1, EARLY=False)),
    "decode_long16": ("decode_attention_source", dict(T="float", HEAD=8, HQ=4, HKV=2, WARPS=16, WINDOW=0, ROT=4,
                                                      INTER=False, LEN_ADD=1, POS_ADD=0, PARTS=1, EARLY=True)),
    "decode_step16": ("decode_step_source", dict(T="float", HEAD=8, HQ=4, HKV=2, WARPS=16, WINDOW=3, ROT=4,
                                                 INTER=False, LEN_ADD=1, POS_ADD=0, IN_PLACE=False, EARLY=True)),
    "decode_merge": ("decode_merge_source", dict(T="float", HEAD=8, PARTS=2)),
    "decode_step": ("decode_step_source", dict(T="float", HEAD=8, HQ=4, HKV=2, WARPS=8, WINDOW=3, ROT=4, INTER=False,
                                               LEN_ADD=1, POS_ADD=0, IN_PLACE=False, EARLY=False)),
    "decode_step_in_place": ("decode_step_source", dict(T="float", HEAD=8, HQ=4, HKV=2, WARPS=8, WINDOW=0, ROT=4,
                                                        INTER=False, LEN_ADD=1, POS_ADD=0, IN_PLACE=True, EARLY=True)),
    "qgemv_sets": ("qgemv_source", dict(T="float", E="float", BITS=4, GROUP=32, WARPS=4, LANES=8, SETS=3, BIASED=5,
                                        SWIGLU=False, **ck.PLAIN)),
    "qgemv_swiglu": ("qgemv_source", dict(T="float", E="float", BITS=4, GROUP=32, WARPS=4, LANES=8, SETS=2, BIASED=0,
                                          SWIGLU=True, **ck.PLAIN)),
    "qgemv_sets_normed": ("qgemv_source", dict(T="float", E="float", BITS=4, GROUP=32, WARPS=4, LANES=8, SETS=3,
                                               BIASED=5, SWIGLU=False, NORM=True, NORM_K=128, HAS_SKIP=True,
                                               HAS_NBIAS=True, WRITE_SUM=True, SKIP_RANK=2)),
    "qgemv_swiglu_normed": ("qgemv_source", dict(T="__half", E="float", BITS=4, GROUP=32, WARPS=4, LANES=8, SETS=2,
                                                 BIASED=0, SWIGLU=True, NORM=True, NORM_K=128, HAS_SKIP=False,
                                                 HAS_NBIAS=False, WRITE_SUM=False, SKIP_RANK=1)),
    "gather_bq": ("gather_bq_source", dict(S="float", BITS=4, BLOCK=16, HAS_ZP=True)),
    "gather_bq_2bit": ("gather_bq_source", dict(S="__half", BITS=2, BLOCK=16, HAS_ZP=False)),
    "range_i64": ("range_check_source", dict(T="int64_t", SIGNED=True, CHECK_LO=True, CHECK_HI=True)),
    "range_i32_hi": ("range_check_source", dict(T="int32_t", SIGNED=True, CHECK_LO=False, CHECK_HI=True)),
    "range_u64": ("range_check_source", dict(T="uint64_t", SIGNED=False, CHECK_LO=True, CHECK_HI=True)),
    "range_u64_hi": ("range_check_source", dict(T="uint64_t", SIGNED=False, CHECK_LO=False, CHECK_HI=True)),
    "rms_block_f32": ("rms_norm_source", dict(T="float", HAS_SKIP=True, HAS_BIAS=True, WRITE_SUM=True, SKIP_RANK=2)),
}


def cpp_type(typ, args):
    return ck.param_type(typ, args)


def function(ns, source_name, args, strings):
    header_name, inputs, outputs, _ = ck.KERNELS[source_name]
    body = strings[source_name]
    params = []
    for name, typ in inputs:
        params.append(f"const {cpp_type(typ, args)}* {name}")
    params += [f"{cpp_type(typ, args)}* {name}" for name, typ in outputs]
    for name, _ in inputs:
        if f"{name}_shape" in body:
            params.append(f"const int* {name}_shape")
    # the emulator defines the tensor-core instruction itself (cuda_emu.h): the header's inline PTX goes
    header = strings[header_name] if header_name else ""
    header = re.sub(r"__device__ __forceinline__ void ort_ep_mlx_mma16816\(.*?\n}\n", "", header, flags=re.S)
    lines = [f"namespace {ns} {{", header,
             "void kernel(" + ", ".join(params) + ") {"]
    lines += [ck.constant_line(k, v) for k, v in args.items()]
    lines += [body, "}", "}  // namespace " + ns, ""]
    return "\n".join(lines)


def main():
    text = ck.kernel_text()
    strings = ck.raw_strings(text)
    out = ["// generated by tools/cuda_emu/gen.py from src/mlx/bridge_kernels*.cpp", ""]
    for ns, (source_name, args) in INSTANCES.items():
        out.append(function(ns, source_name, args, strings))
    copy = re.search(r'const char \*const copy_batch_source = R"\((.*?)\)";', text, re.S)
    out += ["namespace copy_batch {", copy.group(1), "}  // namespace copy_batch", ""]
    open(sys.argv[1], "w").write("\n".join(out))


if __name__ == "__main__":
    main()
