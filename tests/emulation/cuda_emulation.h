// Lets a CUDA C kernel file compile as C++ and run on the CPU, for tests without a GPU.
//
// Each CUDA thread of a block is a fiber (its own stack, switched with ucontext) on the OS thread
// that launched the kernel; the blocks of the grid run one after another. A fiber runs until it
// reaches a barrier, then the next one runs, in thread order. So:
//   - __syncthreads() is a true barrier over the block's live threads (a thread that has returned
//     no longer holds it back), and __shared__ arrays are shared by exactly the running block;
//   - the 32 lanes of a warp (threads 32w .. 32w + 31 in linear order) meet at the warp-collective
//     operations: __syncwarp, the __shfl_sync family, __ballot_sync / __any_sync / __all_sync, and
//     emu::warp_gather, on which kernels/tensor_core.cuh builds the tensor-core instructions. A lane
//     exchanges values exactly as the hardware's lanes do, so lane arithmetic and fragment layouts
//     run as written;
//   - a barrier that can never complete (threads of one block waiting at different barriers, a
//     collective whose mask names a lane that has returned or reads a lane outside its mask) stops
//     the launch with an error naming the kernel's threads, instead of hanging: see emu::launch.
// Speed, memory coalescing and bank conflicts are not emulated. Runs are deterministic: the same
// launch interleaves its threads the same way every time.
//
// INR_CUDA_EMULATION is defined for the kernel headers that put an emulated version of an inline
// PTX instruction beside the instruction itself.
#pragma once

#define INR_CUDA_EMULATION 1

#include <sys/mman.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

// One launch runs on one OS thread at a time, so these are per OS thread: launches from several
// threads (Python threads calling in at once) keep apart.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline unsigned int __float_as_uint(float x) { unsigned int u; std::memcpy(&u, &x, 4); return u; }
inline float __uint_as_float(unsigned int u) { float x; std::memcpy(&x, &u, 4); return x; }
template <typename T> inline T __ldg(const T* p) { return *p; }
// IEEE single rounding, never fused (x86-64's SSE arithmetic, which has no fused multiply-add).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }

#define __global__
#define __align__(n) __attribute__((aligned(n)))
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static thread_local
#define __launch_bounds__(...)

// Fibers run one at a time on one OS thread and switch only at a barrier: a read-modify-write is
// atomic here as it is.
inline float atomicAdd(float* address, float value)
{
    const float old = *address;
    *address = old + value;
    return old;
}

namespace emu {

constexpr unsigned int FULL_MASK = 0xffffffffu;
constexpr size_t SLOT_BYTES = 64;  // the most one lane contributes to one warp collective
constexpr size_t STACK_BYTES = 256 * 1024;

enum class State { Ready, AtBlockBarrier, AtWarpBarrier, Done };

struct Fiber {
    ucontext_t context;
    char* stack = nullptr;  // mmap'ed, with a guard page below it
    uint3 thread;
    State state = State::Ready;
    unsigned int wait_mask = 0;      // the lanes its warp collective waits for
    unsigned long long collectives = 0;  // how many warp collectives it has entered
};

struct Warp {
    unsigned int lanes = 0;    // lanes that exist (the last warp of a block may be partial)
    unsigned int live = 0;     // lanes that have not returned
    unsigned int arrived = 0;  // lanes waiting at a warp collective
    // Two sets of slots, used by alternate collectives: a lane may write the next one's while
    // another still reads this one's (no lane can reach the one after before every lane of the
    // mask has arrived at the next, that is, finished reading).
    alignas(16) unsigned char slots[2][32][SLOT_BYTES];
};

struct Scheduler {
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    ucontext_t home;
    int current = -1;
    unsigned int live = 0, at_block_barrier = 0;
    const std::function<void()>* kernel = nullptr;
    std::string error;
};

inline thread_local Scheduler scheduler;

inline Fiber& me() { return scheduler.fibers[scheduler.current]; }
inline unsigned int lane_id() { return static_cast<unsigned int>(scheduler.current) % 32; }
inline Warp& my_warp() { return scheduler.warps[static_cast<unsigned int>(scheduler.current) / 32]; }

inline std::string where(int fiber)
{
    const uint3 t = scheduler.fibers[fiber].thread;
    return "block (" + std::to_string(blockIdx.x) + ", " + std::to_string(blockIdx.y) + ", " +
           std::to_string(blockIdx.z) + ") thread (" + std::to_string(t.x) + ", " + std::to_string(t.y) + ", " +
           std::to_string(t.z) + ")";
}

// Back to the scheduler; returns when this fiber is resumed.
inline void yield() { swapcontext(&me().context, &scheduler.home); }

inline void fail(const std::string& message)
{
    if (scheduler.error.empty()) scheduler.error = message;
    yield();  // the scheduler stops the launch and never resumes this fiber
}

// A vector access (float2, float4, red.v2/v4) the hardware faults on where p is not aligned to its
// size: the launch stops, naming it.
inline void check_aligned(const void* p, size_t bytes, const char* what)
{
    if (reinterpret_cast<uintptr_t>(p) % bytes != 0)
        fail(std::string(what) + ": an access of " + std::to_string(bytes) + " bytes at an address not aligned to it, " +
             where(scheduler.current));
}

inline void release_block_barrier_if_complete()
{
    if (scheduler.at_block_barrier == 0 || scheduler.at_block_barrier != scheduler.live) return;
    for (auto& fiber : scheduler.fibers)
        if (fiber.state == State::AtBlockBarrier) fiber.state = State::Ready;
    scheduler.at_block_barrier = 0;
}

inline void block_barrier()
{
    me().state = State::AtBlockBarrier;
    ++scheduler.at_block_barrier;
    release_block_barrier_if_complete();
    yield();
}

// Every lane of `mask` waits here until all of them have arrived. Lanes that do not exist (past
// the end of the block) are left out of the mask; a lane of the mask that has returned can never
// arrive, which is an error.
inline void warp_barrier(unsigned int mask)
{
    Warp& warp = my_warp();
    const unsigned int lane = lane_id();
    mask &= warp.lanes;
    if (!(mask >> lane & 1u)) fail("a warp collective whose mask leaves out the calling lane, at " + where(scheduler.current));
    if (mask & ~warp.live) fail("a warp collective waits for a lane that has returned, at " + where(scheduler.current));
    Fiber& fiber = me();
    fiber.state = State::AtWarpBarrier;
    fiber.wait_mask = mask;
    warp.arrived |= 1u << lane;
    if ((warp.arrived & mask) == mask) {
        const unsigned int first = static_cast<unsigned int>(scheduler.current) / 32 * 32;
        for (unsigned int l = 0; l < 32; ++l)
            if (mask >> l & 1u) scheduler.fibers[first + l].state = State::Ready;
        warp.arrived &= ~mask;
    }
    yield();
}

// The values every lane of `mask` put in, after all of them have: all[l] is lane l's `bytes`
// bytes from `mine` (lanes outside the mask: left as they were).
inline void warp_gather(unsigned int mask, const void* mine, size_t bytes, void* all)
{
    Warp& warp = my_warp();
    const unsigned int parity = me().collectives++ & 1u;
    std::memcpy(warp.slots[parity][lane_id()], mine, bytes);
    warp_barrier(mask);
    mask &= warp.lanes;
    for (unsigned int l = 0; l < 32; ++l)
        if (mask >> l & 1u) std::memcpy(static_cast<char*>(all) + l * bytes, warp.slots[parity][l], bytes);
}

// The value lane `source` put in (an error unless it is in the mask).
template <typename T>
inline T warp_read(unsigned int mask, T var, unsigned int source)
{
    static_assert(sizeof(T) <= SLOT_BYTES, "a warp collective's value is too large for the emulation");
    Warp& warp = my_warp();
    const unsigned int parity = me().collectives++ & 1u;
    std::memcpy(warp.slots[parity][lane_id()], &var, sizeof(T));
    warp_barrier(mask);
    if (!((mask & warp.lanes) >> source & 1u))
        fail("a shuffle reads lane " + std::to_string(source) + ", outside its mask, at " + where(scheduler.current));
    T value;
    std::memcpy(&value, warp.slots[parity][source], sizeof(T));
    return value;
}

inline void run_fiber(int index)
{
    (*scheduler.kernel)();
    Fiber& fiber = scheduler.fibers[index];
    fiber.state = State::Done;
    --scheduler.live;
    my_warp().live &= ~(1u << lane_id());
    const unsigned int first = static_cast<unsigned int>(index) / 32 * 32;
    for (unsigned int l = first; l < first + 32 && l < scheduler.fibers.size(); ++l) {
        const Fiber& other = scheduler.fibers[l];
        if (other.state == State::AtWarpBarrier && other.wait_mask >> lane_id() & 1u && scheduler.error.empty())
            scheduler.error = "a warp collective at " + where(static_cast<int>(l)) + " waits for a lane that has "
                              "returned, " + where(index);
    }
    // A returned thread no longer holds back its block's barriers (but still its warp's, above).
    release_block_barrier_if_complete();
}  // uc_link resumes the scheduler

inline Fiber& fiber_slot(size_t index)
{
    while (scheduler.fibers.size() <= index) {
        Fiber fiber;
        const size_t page = 4096;
        void* memory = mmap(nullptr, STACK_BYTES + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                            -1, 0);
        if (memory == MAP_FAILED) throw std::bad_alloc();
        mprotect(memory, page, PROT_NONE);  // a stack overflow faults instead of corrupting its neighbour
        fiber.stack = static_cast<char*>(memory) + page;
        scheduler.fibers.push_back(fiber);
    }
    return scheduler.fibers[index];
}

// Dynamic shared memory (`extern __shared__` on a GPU; kernels/fused_network.cu's INR_DYNAMIC_SHARED
// here): the bytes the launch asks for (set_dynamic_shared, before the launch), filled with NaN before
// each block, as a GPU leaves shared memory undefined (a kernel that reads what it never wrote sees
// NaN), and followed by a guard checked after each block (a kernel that writes past its bytes is
// stopped with an error).
inline thread_local size_t dynamic_shared_bytes = 0;
inline thread_local std::vector<float4> dynamic_shared_memory;
constexpr unsigned int SHARED_GARBAGE = 0x7fffffffu, SHARED_GUARD = 0x7fa5a5a5u;
constexpr size_t SHARED_GUARD_FLOATS = 16;

inline float* dynamic_shared() { return reinterpret_cast<float*>(dynamic_shared_memory.data()); }

inline void fill_dynamic_shared()
{
    const size_t floats = (dynamic_shared_bytes + 15) / 16 * 4;
    dynamic_shared_memory.assign((floats + SHARED_GUARD_FLOATS) / 4, float4{});
    auto* words = reinterpret_cast<unsigned int*>(dynamic_shared_memory.data());
    for (size_t i = 0; i < floats; ++i) words[i] = SHARED_GARBAGE;
    for (size_t i = floats; i < floats + SHARED_GUARD_FLOATS; ++i) words[i] = SHARED_GUARD;
}

inline bool dynamic_shared_guard_intact()
{
    const size_t floats = (dynamic_shared_bytes + 15) / 16 * 4;
    const auto* words = reinterpret_cast<const unsigned int*>(dynamic_shared_memory.data());
    for (size_t i = floats; i < floats + SHARED_GUARD_FLOATS; ++i)
        if (words[i] != SHARED_GUARD) return false;
    return true;
}

// Runs `kernel` on every thread of the grid; returns "" or what went wrong (the launch stops there).
inline std::string launch(dim3 grid, dim3 block, const std::function<void()>& kernel)
{
    gridDim = grid;
    blockDim = block;
    const unsigned int threads = block.x * block.y * block.z;
    for (unsigned int t = 0; t < threads; ++t) fiber_slot(t);
    scheduler.warps.assign((threads + 31) / 32, Warp());
    scheduler.kernel = &kernel;
    scheduler.error.clear();
    for (unsigned int bz = 0; bz < grid.z; ++bz)
        for (unsigned int by = 0; by < grid.y; ++by)
            for (unsigned int bx = 0; bx < grid.x; ++bx) {
                blockIdx = {bx, by, bz};
                fill_dynamic_shared();
                for (unsigned int w = 0; w < scheduler.warps.size(); ++w) {
                    const unsigned int count = threads - 32 * w < 32 ? threads - 32 * w : 32;
                    Warp& warp = scheduler.warps[w];
                    warp.lanes = warp.live = count == 32 ? FULL_MASK : (1u << count) - 1;
                    warp.arrived = 0;
                }
                for (unsigned int t = 0; t < threads; ++t) {
                    Fiber& fiber = scheduler.fibers[t];
                    fiber.thread = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
                    fiber.state = State::Ready;
                    fiber.collectives = 0;
                    getcontext(&fiber.context);
                    fiber.context.uc_stack.ss_sp = fiber.stack;
                    fiber.context.uc_stack.ss_size = STACK_BYTES;
                    fiber.context.uc_link = &scheduler.home;
                    makecontext(&fiber.context, reinterpret_cast<void (*)()>(run_fiber), 1, static_cast<int>(t));
                }
                scheduler.live = threads;
                scheduler.at_block_barrier = 0;
                while (scheduler.live > 0) {
                    bool ran = false;
                    for (unsigned int t = 0; t < threads && scheduler.error.empty(); ++t) {
                        if (scheduler.fibers[t].state != State::Ready) continue;
                        scheduler.current = static_cast<int>(t);
                        threadIdx = scheduler.fibers[t].thread;
                        swapcontext(&scheduler.home, &scheduler.fibers[t].context);
                        ran = true;
                    }
                    if (!scheduler.error.empty()) break;
                    if (!ran) {  // every live thread waits, and no barrier can complete
                        std::string waiting;
                        unsigned int listed = 0, waiting_threads = 0;
                        for (unsigned int t = 0; t < threads; ++t) {
                            const State state = scheduler.fibers[t].state;
                            if (state == State::Done) continue;
                            if (++waiting_threads > 8) continue;
                            ++listed;
                            waiting += "\n  " + where(static_cast<int>(t)) +
                                       (state == State::AtBlockBarrier ? " at __syncthreads" : " at a warp collective");
                        }
                        if (waiting_threads > listed)
                            waiting += "\n  and " + std::to_string(waiting_threads - listed) + " more";
                        scheduler.error = "deadlock: no barrier can complete; the threads wait at:" + waiting;
                        break;
                    }
                }
                scheduler.current = -1;
                if (scheduler.error.empty() && !dynamic_shared_guard_intact())
                    scheduler.error = "block (" + std::to_string(bx) + ", " + std::to_string(by) + ", " +
                                      std::to_string(bz) + ") wrote past its " + std::to_string(dynamic_shared_bytes) +
                                      " bytes of dynamic shared memory";
                if (!scheduler.error.empty()) return scheduler.error;
            }
    return "";
}

// What a generated launcher hands back to Python: "" or the launch's error, valid until the next
// launch on this thread.
inline const char* result(std::string message)
{
    static thread_local std::string kept;
    kept = std::move(message);
    return kept.c_str();
}

}  // namespace emu

inline void __syncthreads() { emu::block_barrier(); }
inline void __syncwarp(unsigned int mask = emu::FULL_MASK)
{
    emu::me().collectives++;
    emu::warp_barrier(mask);
}

// The shuffles as the CUDA C++ Programming Guide defines them: a warp is split into segments of
// `width` lanes; a source lane outside the caller's segment gives back the caller's own value
// (shfl_up below the segment, shfl_down and shfl_xor past its end).
template <typename T>
inline T __shfl_sync(unsigned int mask, T var, int src_lane, int width = warpSize)
{
    const unsigned int lane = emu::lane_id();
    const unsigned int base = lane / width * width;
    return emu::warp_read(mask, var, base + static_cast<unsigned int>(src_lane) % width);
}

template <typename T>
inline T __shfl_up_sync(unsigned int mask, T var, unsigned int delta, int width = warpSize)
{
    const unsigned int lane = emu::lane_id();
    const bool own = lane % width < delta;
    return emu::warp_read(mask, var, own ? lane : lane - delta);
}

template <typename T>
inline T __shfl_down_sync(unsigned int mask, T var, unsigned int delta, int width = warpSize)
{
    const unsigned int lane = emu::lane_id();
    const bool own = lane % width + delta >= static_cast<unsigned int>(width);
    return emu::warp_read(mask, var, own ? lane : lane + delta);
}

template <typename T>
inline T __shfl_xor_sync(unsigned int mask, T var, int lane_mask, int width = warpSize)
{
    const unsigned int lane = emu::lane_id();
    const unsigned int source = lane ^ static_cast<unsigned int>(lane_mask);
    const bool own = source >= (lane / width + 1) * width;
    return emu::warp_read(mask, var, own ? lane : source);
}

inline unsigned int __ballot_sync(unsigned int mask, int predicate)
{
    int votes[32] = {};
    const int mine = predicate != 0;
    emu::warp_gather(mask, &mine, sizeof mine, votes);
    unsigned int ballot = 0;
    for (unsigned int l = 0; l < 32; ++l)
        if ((mask & emu::my_warp().lanes) >> l & 1u && votes[l]) ballot |= 1u << l;
    return ballot;
}

inline int __any_sync(unsigned int mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned int mask, int predicate)
{
    return __ballot_sync(mask, predicate) == (mask & emu::my_warp().lanes);
}
