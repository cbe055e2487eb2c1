/* Just enough of CUDA to run the EP's kernel bodies (src/mlx/bridge_kernels*.cpp) on the CPU: every
 * thread of a block is a thread of its own, blocks run one after another, __syncthreads and the warp
 * shuffles are barriers, __shared__ arrays are statics (one block at a time uses them), __half and
 * __nv_bfloat16 round as the GPU's conversions do, and mma.sync m16n8k16 (f16 in, f32 accumulate)
 * is computed from the warp's fragments in their PTX layout. Slow and exact enough to check what a
 * kernel computes, its indexing and bounds, where no GPU is at hand (tools/cuda_emu/run.py). */
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

struct emu_block {
  std::unique_ptr<std::barrier<>> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<uint64_t> slots;            /* one shuffle value per thread */
  std::vector<uint32_t> fragments;        /* mma: six words per thread */
};
inline thread_local emu_block *emu_cur = nullptr;
inline thread_local int emu_tid = 0;

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__

inline void __syncthreads() { emu_cur->block->arrive_and_wait(); }

inline std::barrier<> &emu_warp() { return *emu_cur->warps[emu_tid / 32]; }

template <typename T>
T __shfl_xor_sync(unsigned, T v, int offset) {
  static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  emu_cur->slots[emu_tid] = bits;
  emu_warp().arrive_and_wait();
  int partner = (emu_tid / 32) * 32 + ((emu_tid % 32) ^ offset);
  uint64_t got = emu_cur->slots[partner];
  emu_warp().arrive_and_wait();
  T out;
  std::memcpy(&out, &got, sizeof out);
  return out;
}

/* Runs body once per thread of a grid of blocks (grid and block as counts of blocks and threads). */
inline void emu_launch(dim3 grid, dim3 block, const std::function<void()> &body) {
  gridDim = grid, blockDim = block;
  const int threads = static_cast<int>(block.x * block.y * block.z);
  for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
      for (unsigned bx = 0; bx < grid.x; bx++) {
        emu_block b;
        b.block = std::make_unique<std::barrier<>>(threads);
        for (int w = 0; w * 32 < threads; w++)
          b.warps.push_back(std::make_unique<std::barrier<>>(std::min(32, threads - w * 32)));
        b.slots.assign(threads, 0);
        b.fragments.assign(static_cast<size_t>(threads) * 6, 0);
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; t++)
          pool.emplace_back([&, t] {
            emu_cur = &b, emu_tid = t;
            blockIdx = {bx, by, bz};
            threadIdx = {static_cast<unsigned>(t) % block.x, static_cast<unsigned>(t) / block.x % block.y,
                         static_cast<unsigned>(t) / (block.x * block.y)};
            body();
            /* a thread that ends no longer holds the others back */
            b.warps[t / 32]->arrive_and_drop();
            b.block->arrive_and_drop();
          });
        for (auto &th : pool) th.join();
      }
}

/* ---- types and intrinsics ------------------------------------------------------------------ */
struct __half {
  _Float16 v;
  __half() = default;
  __half(float f) : v(static_cast<_Float16>(f)) {}
  operator float() const { return static_cast<float>(v); }
};
struct __nv_bfloat16 {
  uint16_t bits;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (std::isnan(f)) {
      bits = 0x7fc0;
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    bits = static_cast<uint16_t>(u >> 16);
  }
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return static_cast<float>(h); }
struct uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline float __uint_as_float(unsigned i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using std::isfinite;

/* mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: A 16x16 (a0 row g k 2t..2t+1, a1 row g+8, a2
 * row g k 2t+8.., a3 row g+8 k 2t+8..), B 16x8 (b0 k 2t..2t+1 column g, b1 k 2t+8..), D 16x8 (d0, d1
 * row g columns 2t, 2t+1; d2, d3 row g+8), g = lane / 4, t = lane % 4. */
inline void ort_ep_mlx_mma16816(float *d, const uint32_t *a, const uint32_t *b) {
  uint32_t *mine = &emu_cur->fragments[static_cast<size_t>(emu_tid) * 6];
  for (int i = 0; i < 4; i++) mine[i] = a[i];
  mine[4] = b[0], mine[5] = b[1];
  emu_warp().arrive_and_wait();
  const int warp0 = (emu_tid / 32) * 32, lane = emu_tid % 32, g = lane / 4, t = lane % 4;
  auto half_at = [](uint32_t word, int hi) {
    uint16_t h = static_cast<uint16_t>(hi ? word >> 16 : word & 0xffffu);
    _Float16 f;
    std::memcpy(&f, &h, 2);
    return static_cast<float>(f);
  };
  auto A = [&](int row, int k) { /* the lane holding A[row][k] and which of its words */
    int rg = row % 8, kt = (k % 8) / 2, word = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    return half_at(emu_cur->fragments[static_cast<size_t>(warp0 + rg * 4 + kt) * 6 + word], k % 2);
  };
  auto B = [&](int k, int col) {
    int kt = (k % 8) / 2, word = 4 + (k >= 8 ? 1 : 0);
    return half_at(emu_cur->fragments[static_cast<size_t>(warp0 + col * 4 + kt) * 6 + word], k % 2);
  };
  float out[4];
  for (int r = 0; r < 4; r++) {
    int row = g + (r >= 2 ? 8 : 0), col = 2 * t + r % 2;
    float acc = d[r];
    for (int k = 0; k < 16; k++) acc += A(row, k) * B(k, col);
    out[r] = acc;
  }
  emu_warp().arrive_and_wait();
  for (int r = 0; r < 4; r++) d[r] = out[r];
}
