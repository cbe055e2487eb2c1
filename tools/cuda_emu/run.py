#!/usr/bin/env python3
"""Runs the EP's CUDA kernels on the CPU (tools/cuda_emu/cuda_emu.h) against references of their own:
generates their C++ form from src/mlx/bridge_kernels*.cpp (gen.py), builds emu_test.cpp with g++
(C++20: std::barrier; _Float16 for __half) and runs it. What a kernel computes, its indexing and its
bounds are checked here, where no GPU is at hand; the GPU suite checks them again on the device.

    tools/cuda_emu/run.py [--cxx g++]          exit 0 pass, 1 fail, 2 no usable compiler
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    args = ap.parse_args()
    if not shutil.which(args.cxx):
        print(f"{args.cxx} not found", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, os.path.join(HERE, "gen.py"), os.path.join(tmp, "kernels.inc")], check=True)
        exe = os.path.join(tmp, "emu_test")
        build = subprocess.run([args.cxx, "-std=c++20", "-O1", "-pthread", "-Wno-unknown-pragmas", "-I", HERE, "-I", tmp,
                                os.path.join(HERE, "emu_test.cpp"), "-o", exe], capture_output=True, text=True)
        if build.returncode:
            print(build.stderr[-6000:], file=sys.stderr)
            return 1
        run = subprocess.run([exe], capture_output=True, text=True, timeout=600)
        print(run.stdout, end="")
        return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
