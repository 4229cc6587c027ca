// Lets a CUDA C kernel file compile as C++ and run on the CPU, for tests without a GPU.
//
// A launch runs the blocks of the grid one after another; the threads of a block are real
// std::threads, so __syncthreads() is a true barrier and __shared__ arrays (static storage here)
// are shared by exactly the threads of the running block. Indexing, tiling, bounds checks and
// barrier placement are exercised as on the GPU; speed, warps and memory coalescing are not.
#pragma once

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;
inline std::barrier<>* emu_block_barrier = nullptr;

struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }

#define __global__
#define __align__(n) __attribute__((aligned(n)))
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __launch_bounds__(...)

inline void __syncthreads() { emu_block_barrier->arrive_and_wait(); }

// The threads of a block are real threads: an atomic add must be one here too.
inline float atomicAdd(float* address, float value) { return std::atomic_ref<float>(*address).fetch_add(value); }

namespace emu {

inline void launch(dim3 grid, dim3 block, const std::function<void()>& kernel)
{
    gridDim = grid;
    blockDim = block;
    const unsigned int threads = block.x * block.y * block.z;
    for (unsigned int bz = 0; bz < grid.z; ++bz)
        for (unsigned int by = 0; by < grid.y; ++by)
            for (unsigned int bx = 0; bx < grid.x; ++bx) {
                std::barrier<> barrier(threads);
                emu_block_barrier = &barrier;
                std::vector<std::thread> pool;
                pool.reserve(threads);
                for (unsigned int t = 0; t < threads; ++t) {
                    pool.emplace_back([&, t] {
                        blockIdx = {bx, by, bz};
                        threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
                        kernel();
                        // A finished thread no longer holds back its block's barriers.
                        barrier.arrive_and_drop();
                    });
                }
                for (auto& thread : pool) thread.join();
            }
}

}  // namespace emu
