// fused_network -- a narrow network's training pass in fused kernels, its activations kept in shared
// memory between layers; the same arithmetic as NumpyBackend's layer operations composed as
// core/network.py's Network.forward and Network.backward compose them (linear_forward for each layer;
// mse_loss; then linear_backward_input and linear_backward_weights from the last layer to the first).
// Two designs (launch.FUSED_VARIANTS): one kernel a step, network_train (the engine's, at the end of
// this file), and the two kernels of before, network_forward and network_backward (here first), kept
// to time beside it and for the stacks whose shared memory the one kernel cannot hold.
//
// ==== Two kernels a step: network_forward, network_backward ==========================================
//
// After tiny-cuda-nn's FullyFusedMLP (a block owns a chunk of the batch's rows and carries them
// through every layer; each warp owns 16 output columns and multiplies on warp-level matrix
// fragments), with what this project's networks need besides: biases, a sine with omega0, ReLU and
// sigmoid, FP32 or TF32 (mma.sync m16n8k8, kernels/tensor_core.cuh; a first layer on the coordinates
// stays FP32, as numpy_ops.matmul says), a first layer of any width up to the network's, the
// networks dimension (blockIdx.y), and the weight gradients in the backward kernel itself.
//
// The stack: layers j = 0 .. layers - 1 of one network, from `in0` inputs through hidden layers of
// `hidden` neurons to `out` outputs: layer j maps in_j to out_j (in_0 = in0, out_last = out, all
// others `hidden`), its activation hidden_kind, the last one's out_kind. Its weights [out_j, in_j]
// and bias [out_j] lie one after another in each network's parameters, from `offset`.
// WIDTH (16, 32, 64, 128) bounds every in_j and out_j; a block has WIDTH / 16 warps and works on
// ROWS rows at a time (constants.cuh: as many as keep its shared memory within 48 KB). Columns past a layer's
// width are zero in shared memory, so every product runs over whole fragments.
//
// network_forward: x [N or 1, rows, in0] -> the stack's output. Each layer's z and a go to global
// memory for the backward pass: hz, ha [N, layers - 1, rows, hidden] (stride_h between networks)
// for the hidden layers, oz, oa [N, rows, out] (stride_o) for the last (oa may be oz: a linear
// output). grid (ceil(rows / ROWS), networks).
//
// network_backward: from grad_out = dL/d(output) [N, rows, out] (stride_o), through each layer's
// activation derivative, back to the stack's input; each block adds its rows' weight and bias
// gradients into its own slot of `partial` [N, groups, the stack's parameters] (stride_partial
// between networks; with one group, the gradients themselves). The host sums the groups
// (column_reduce). Block g of a network takes chunks g, g + groups, ... in order, so the sums'
// order depends on rows and groups alone, never on the number of networks. With input_grad, the
// gradient at the stack's input: dL/dz of the layer before the stack, (G W_0) * act'(z_in, x) with
// input_kind (linear: dL/dx itself). grid (groups, networks).
//
// Launch: block 2 * WIDTH threads (WIDTH / 16 warps).

#include "activation_math.cuh"
#include "constants.cuh"
#include "tensor_core.cuh"

template <int WIDTH>
struct Stack {
    static_assert(WIDTH % 16 == 0 && WIDTH <= FUSED_MAX_WIDTH, "a width of whole warps' columns");
    static constexpr int WARPS = WIDTH / 16, THREADS = 32 * WARPS;
    static constexpr int ROWS = FUSED_ROW_ELEMENTS / WIDTH < FUSED_MAX_ROWS ? FUSED_ROW_ELEMENTS / WIDTH
                                                                              : FUSED_MAX_ROWS;  // rows per chunk
    static constexpr int MT = ROWS / 16;                          // m16 row tiles per chunk
    static constexpr int STRIDE = WIDTH + 4;                      // shared row: lane (g, t) reads [g][t]: bank 4 g + t
};

__device__ __forceinline__ int round8(int n) { return (n + 7) / 8 * 8; }

// One warp's m16n8k8 steps in either precision, on operands given as functions a(row, k) and
// b(k, col) over one 16x8 and one 8x8 block. A lane's accumulators are the mma's: (g, 2t),
// (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) of its 16x8 tile.
template <bool TF32>
struct Fragments;

template <>
struct Fragments<true> {
    struct A { unsigned int r[4]; };
    struct B { unsigned int r[2]; };
    template <class At>
    __device__ __forceinline__ static A load_a(At at, int g, int t)
    {
        return {{to_tf32(at(g, t)), to_tf32(at(g + 8, t)), to_tf32(at(g, t + 4)), to_tf32(at(g + 8, t + 4))}};
    }
    template <class At>
    __device__ __forceinline__ static B load_b(At at, int g, int t)
    {
        return {{to_tf32(at(t, g)), to_tf32(at(t + 4, g))}};
    }
    __device__ __forceinline__ static void mma(float acc[4], const A& a, const B& b)
    {
        mma_tf32_16x8x8(acc, a.r, b.r, acc);
    }
};

template <>
struct Fragments<false> {
    struct A { float v[2][8]; };  // rows g and g + 8
    struct B { float v[2][8]; };  // columns 2t and 2t + 1
    template <class At>
    __device__ __forceinline__ static A load_a(At at, int g, int t)
    {
        A a;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            a.v[0][k] = at(g, k);
            a.v[1][k] = at(g + 8, k);
        }
        return a;
    }
    template <class At>
    __device__ __forceinline__ static B load_b(At at, int g, int t)
    {
        B b;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            b.v[0][k] = at(k, 2 * t);
            b.v[1][k] = at(k, 2 * t + 1);
        }
        return b;
    }
    __device__ __forceinline__ static void mma(float acc[4], const A& a, const B& b)
    {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float sum = acc[i];
#pragma unroll
            for (int k = 0; k < 8; ++k) sum += a.v[i / 2][k] * b.v[i % 2][k];
            acc[i] = sum;
        }
    }
};

// C (ROWS x n) = A (ROWS x k) B (k x n) for one chunk, A in shared memory [row][k], B given by
// b_at(k, col) (zero outside k x n). The warps share the columns in pairs of n8 tiles (16
// columns, the B fragments loaded once per k-step) and, where there are fewer pairs than warps,
// the row tiles too. acc[i][p] is the warp's i-th row tile and its pair's p-th n8 tile; row tile
// and column of each are given by tile_row(i) and tile_col(p).
template <int WIDTH, bool TF32>
struct ChunkProduct {
    using S = Stack<WIDTH>;
    using F = Fragments<TF32>;
    float acc[S::MT][2][4];
    int pairs, warps_per_pair, pair, first_tile, active;

    __device__ __forceinline__ ChunkProduct(int n)
    {
        const int warp = threadIdx.x / 32;
        pairs = (n + 15) / 16;
        warps_per_pair = S::WARPS / pairs > 0 ? S::WARPS / pairs : 1;
        pair = warp % pairs;
        first_tile = warp / pairs;
        active = warp < pairs * warps_per_pair;
    }

    __device__ __forceinline__ int tile_row(int i) const { return (first_tile + i * warps_per_pair) * 16; }
    __device__ __forceinline__ int tile_col(int p) const { return pair * 16 + p * 8; }
    __device__ __forceinline__ bool has(int i) const { return active && first_tile + i * warps_per_pair < S::MT; }

    template <class BAt>
    __device__ __forceinline__ void run(const float (*a)[S::STRIDE], int k, BAt b_at)
    {
        const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
        for (int i = 0; i < S::MT; ++i)
#pragma unroll
            for (int p = 0; p < 2; ++p)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[i][p][r] = 0.0f;
        if (!active) return;
        for (int k0 = 0; k0 < k; k0 += 8) {
            typename F::B b[2];
#pragma unroll
            for (int p = 0; p < 2; ++p)
                b[p] = F::load_b([&](int kk, int c) { return b_at(k0 + kk, tile_col(p) + c); }, g, t);
#pragma unroll
            for (int i = 0; i < S::MT; ++i) {
                if (!has(i)) break;
                const int row0 = tile_row(i);
                const typename F::A fa = F::load_a([&](int r, int kk) { return a[row0 + r][k0 + kk]; }, g, t);
#pragma unroll
                for (int p = 0; p < 2; ++p) F::mma(acc[i][p], fa, b[p]);
            }
        }
    }

    // f(row, col, value) for each accumulator of the warp (rows and columns within the chunk).
    template <class Each>
    __device__ __forceinline__ void for_each(Each f) const
    {
        const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
        for (int i = 0; i < S::MT; ++i) {
            if (!has(i)) break;
#pragma unroll
            for (int p = 0; p < 2; ++p)
#pragma unroll
                for (int r = 0; r < 4; ++r) f(tile_row(i) + g + 8 * (r / 2), tile_col(p) + 2 * t + r % 2, acc[i][p][r]);
        }
    }
};

// Rows [row0, row0 + ROWS) of a [rows, cols] matrix into shared memory, columns up to round8(cols),
// zero past the matrix's rows and columns.
template <int WIDTH, class Value>
__device__ __forceinline__ void load_chunk(float (*s)[Stack<WIDTH>::STRIDE], int cols, Value value)
{
    const int padded = round8(cols);
    for (int i = threadIdx.x; i < Stack<WIDTH>::ROWS * padded; i += Stack<WIDTH>::THREADS) {
        const int r = i / padded, c = i % padded;
        s[r][c] = value(r, c);
    }
}

struct Layer {
    int in, out, kind;
    long long weights;  // the weights' offset in a network's parameters (the bias follows them)
};

__device__ __forceinline__ Layer stack_layer(int j, int layers, int in0, int hidden, int out, int hidden_kind,
                                             int out_kind, long long offset)
{
    long long weights = offset;
    for (int i = 0;; ++i) {
        const int in_i = i == 0 ? in0 : hidden, out_i = i == layers - 1 ? out : hidden;
        if (i == j) return {in_i, out_i, i == layers - 1 ? out_kind : hidden_kind, weights};
        weights += (long long)out_i * in_i + out_i;
    }
}

// The stack's parameters per network: the size of a block's slot in `partial`.
__device__ __forceinline__ long long stack_parameters(int layers, int in0, int hidden, int out)
{
    const Layer last = stack_layer(layers - 1, layers, in0, hidden, out, 0, 0, 0);
    return last.weights + (long long)last.out * last.in + last.out;
}

// One layer of network_forward over the chunk in act: its z and a to global memory (rows below
// `rows`) and, unless it is the last, its a back into act as the next layer's input.
template <int WIDTH, bool TF32>
__device__ __forceinline__ void forward_layer(float (*act)[Stack<WIDTH>::STRIDE], const Layer& layer,
                                              const float* w, bool last, float omega0, float* z, float* a,
                                              int row0, int rows)
{
    const float* bias = w + (long long)layer.out * layer.in;
    ChunkProduct<WIDTH, TF32> product(layer.out);
    product.run(act, round8(layer.in), [&](int k, int n) {  // B = W^T
        return k < layer.in && n < layer.out ? w[(long long)n * layer.in + k] : 0.0f;
    });
    __syncthreads();  // every warp has read this layer's input
    product.for_each([&](int r, int c, float v) {
        const bool column = c < layer.out;
        const float zv = column ? v + bias[c] : 0.0f;
        const float av = column ? activate(zv, layer.kind, omega0) : 0.0f;
        if (column && row0 + r < rows) {
            const long long at = (long long)(row0 + r) * layer.out + c;
            z[at] = zv;
            a[at] = av;
        }
        if (!last) act[r][c] = av;
    });
    __syncthreads();
}

template <int WIDTH, bool TF32>
__device__ __forceinline__ void network_forward(const float* __restrict__ x, long long stride_x,
                                                const float* __restrict__ params, long long stride_params,
                                                long long offset, int layers, int in0, int hidden, int out,
                                                int hidden_kind, int out_kind, float omega0, float* hz, float* ha,
                                                long long stride_h, float* oz, float* oa, long long stride_o, int rows)
{
    using S = Stack<WIDTH>;
    __shared__ __align__(16) float act[S::ROWS][S::STRIDE];
    const long long net = blockIdx.y;
    const int row0 = blockIdx.x * S::ROWS;
    x += net * stride_x;
    params += net * stride_params;
    load_chunk<WIDTH>(act, in0, [&](int r, int c) {
        return row0 + r < rows && c < in0 ? x[(long long)(row0 + r) * in0 + c] : 0.0f;
    });
    __syncthreads();
    for (int j = 0; j < layers; ++j) {
        const Layer layer = stack_layer(j, layers, in0, hidden, out, hidden_kind, out_kind, offset);
        const bool last = j == layers - 1;
        float* z = last ? oz + net * stride_o : hz + net * stride_h + (long long)j * rows * hidden;
        float* a = last ? oa + net * stride_o : ha + net * stride_h + (long long)j * rows * hidden;
        // A product over the coordinates alone stays FP32 under TF32 (constants.cuh, FP32_MAX_K).
        if (TF32 && layer.in <= FP32_MAX_K) {
            forward_layer<WIDTH, false>(act, layer, params + layer.weights, last, omega0, z, a, row0, rows);
        } else {
            forward_layer<WIDTH, TF32>(act, layer, params + layer.weights, last, omega0, z, a, row0, rows);
        }
    }
}

template <int WIDTH, bool TF32>
__device__ __forceinline__ void network_backward(
    const float* __restrict__ x, long long stride_x, const float* __restrict__ z_in, int input_kind,
    const float* __restrict__ params, long long stride_params, long long offset, int layers, int in0, int hidden,
    int out, int hidden_kind, int out_kind, float omega0, const float* __restrict__ hz, const float* __restrict__ ha,
    long long stride_h, const float* __restrict__ oz, const float* __restrict__ oa, long long stride_o,
    const float* __restrict__ grad_out, float* partial, long long stride_partial, float* input_grad, int rows)
{
    using S = Stack<WIDTH>;
    using F = Fragments<TF32>;
    __shared__ __align__(16) float grad[S::ROWS][S::STRIDE];   // dL/dz of the layer at hand
    __shared__ __align__(16) float input[S::ROWS][S::STRIDE];  // that layer's input
    const long long net = blockIdx.y;
    const int groups = gridDim.x;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    x += net * stride_x;
    if (z_in) z_in += net * stride_x;
    params += net * stride_params;
    hz += net * stride_h;
    ha += net * stride_h;
    oz += net * stride_o;
    oa += net * stride_o;
    grad_out += net * stride_o;
    float* slot = partial + net * stride_partial + blockIdx.x * stack_parameters(layers, in0, hidden, out);
    if (input_grad) input_grad += net * stride_x;
    const int chunks = (rows + S::ROWS - 1) / S::ROWS;

    for (int chunk = blockIdx.x; chunk < chunks; chunk += groups) {
        const bool first_chunk = chunk == (int)blockIdx.x;
        const int row0 = chunk * S::ROWS;
        auto valid = [&](int r) { return row0 + r < rows; };
        load_chunk<WIDTH>(grad, out, [&](int r, int c) {
            if (!valid(r) || c >= out) return 0.0f;
            const long long at = (long long)(row0 + r) * out + c;
            return grad_out[at] * activation_derivative(oz[at], oa[at], out_kind, omega0);
        });
        for (int j = layers - 1; j >= 0; --j) {
            const Layer layer = stack_layer(j, layers, in0, hidden, out, hidden_kind, out_kind, offset);
            const float* w = params + layer.weights;
            const float* layer_input = j > 0 ? ha + (long long)(j - 1) * rows * hidden : x;
            load_chunk<WIDTH>(input, layer.in, [&](int r, int c) {
                return valid(r) && c < layer.in ? layer_input[(long long)(row0 + r) * layer.in + c] : 0.0f;
            });
            __syncthreads();

            // Weight gradient, gradᵀ input over the chunk's rows: warp w the 16 rows (outputs)
            // 16 w .. 16 w + 15 of it, every n8 tile of its columns (inputs).
            float* weight_slot = slot + (layer.weights - offset);
            if (warp * 16 < layer.out) {
                float acc[WIDTH / 8][4];
#pragma unroll
                for (int n = 0; n < WIDTH / 8; ++n)
#pragma unroll
                    for (int r = 0; r < 4; ++r) acc[n][r] = 0.0f;
                const int n_tiles = round8(layer.in) / 8;
                for (int k0 = 0; k0 < S::ROWS; k0 += 8) {
                    const typename F::A fa =
                        F::load_a([&](int m, int kk) { return grad[k0 + kk][warp * 16 + m]; }, g, t);
#pragma unroll
                    for (int n = 0; n < WIDTH / 8; ++n) {
                        if (n >= n_tiles) break;
                        const typename F::B fb =
                            F::load_b([&](int kk, int c) { return input[k0 + kk][n * 8 + c]; }, g, t);
                        F::mma(acc[n], fa, fb);
                    }
                }
#pragma unroll
                for (int n = 0; n < WIDTH / 8; ++n) {
                    if (n >= n_tiles) break;
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        const int m = warp * 16 + g + 8 * (r / 2), c = n * 8 + 2 * t + r % 2;
                        if (m < layer.out && c < layer.in) {
                            float* at = weight_slot + (long long)m * layer.in + c;
                            *at = first_chunk ? acc[n][r] : *at + acc[n][r];
                        }
                    }
                }
            }
            // Bias gradient: the column sums of grad, one thread a column, rows in order.
            float* bias_slot = weight_slot + (long long)layer.out * layer.in;
            for (int c = threadIdx.x; c < layer.out; c += S::THREADS) {
                float sum = 0.0f;
                for (int r = 0; r < S::ROWS; ++r) sum += grad[r][c];
                bias_slot[c] = first_chunk ? sum : bias_slot[c] + sum;
            }

            // The previous layer's dL/dz (or the input gradient): (grad W) * act'(z, a).
            if (j == 0 && !input_grad) {
                __syncthreads();  // grad and input are read before the next chunk loads them
                break;
            }
            ChunkProduct<WIDTH, TF32> product(layer.in);
            product.run(grad, round8(layer.out), [&](int k, int n) {  // B = W
                return k < layer.out && n < layer.in ? w[(long long)k * layer.in + n] : 0.0f;
            });
            __syncthreads();  // every warp has read grad
            if (j > 0) {
                const float* z_prev = hz + (long long)(j - 1) * rows * hidden;
                product.for_each([&](int r, int c, float v) {
                    const bool inside = valid(r) && c < layer.in;
                    const float d = inside ? activation_derivative(z_prev[(long long)(row0 + r) * hidden + c],
                                                                   input[r][c], hidden_kind, omega0)
                                           : 0.0f;
                    grad[r][c] = v * d;
                });
            } else {
                product.for_each([&](int r, int c, float v) {
                    if (!valid(r) || c >= in0) return;
                    const long long at = (long long)(row0 + r) * in0 + c;
                    input_grad[at] = v * activation_derivative(z_in ? z_in[at] : 0.0f, x[at], input_kind, omega0);
                });
            }
            __syncthreads();
        }
    }
}

#define FUSED_NETWORK(WIDTH, PRECISION, TF32)                                                                     \
    extern "C" __global__ void __launch_bounds__(Stack<WIDTH>::THREADS)                                           \
        network_forward_##WIDTH##_##PRECISION(                                                                    \
            const float* __restrict__ x, long long stride_x, const float* __restrict__ params,                    \
            long long stride_params, long long offset, int layers, int in0, int hidden, int out, int hidden_kind, \
            int out_kind, float omega0, float* hz, float* ha, long long stride_h, float* oz, float* oa,           \
            long long stride_o, int rows)                                                                         \
    {                                                                                                             \
        network_forward<WIDTH, TF32>(x, stride_x, params, stride_params, offset, layers, in0, hidden, out,        \
                                     hidden_kind, out_kind, omega0, hz, ha, stride_h, oz, oa, stride_o, rows);    \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(Stack<WIDTH>::THREADS)                                           \
        network_backward_##WIDTH##_##PRECISION(                                                                   \
            const float* __restrict__ x, long long stride_x, const float* __restrict__ z_in, int input_kind,      \
            const float* __restrict__ params, long long stride_params, long long offset, int layers, int in0,     \
            int hidden, int out, int hidden_kind, int out_kind, float omega0, const float* __restrict__ hz,       \
            const float* __restrict__ ha, long long stride_h, const float* __restrict__ oz,                       \
            const float* __restrict__ oa, long long stride_o, const float* __restrict__ grad_out, float* partial,  \
            long long stride_partial, float* input_grad, int rows)                                                \
    {                                                                                                             \
        network_backward<WIDTH, TF32>(x, stride_x, z_in, input_kind, params, stride_params, offset, layers, in0,  \
                                      hidden, out, hidden_kind, out_kind, omega0, hz, ha, stride_h, oz, oa,       \
                                      stride_o, grad_out, partial, stride_partial, input_grad, rows);             \
    }

FUSED_NETWORK(16, fp32, false)
FUSED_NETWORK(32, fp32, false)
FUSED_NETWORK(64, fp32, false)
FUSED_NETWORK(128, fp32, false)
FUSED_NETWORK(16, tf32, true)
FUSED_NETWORK(32, tf32, true)
FUSED_NETWORK(64, tf32, true)
FUSED_NETWORK(128, tf32, true)

// ==== One kernel a step: network_train ================================================================
//
// network_train: the stack's forward pass, the mean squared error and the backward pass in one launch.
// A block takes a network (blockIdx.y) and a group of its rows (blockIdx.x: tiles g, g + groups, ... of
// `tile` rows each, in order). It holds the stack's weights and its own weight and bias gradients in
// shared memory for the whole launch and carries each tile through every layer and back with every
// activation in shared memory: only the input, the targets, the gradients, the loss (and, asked for,
// the gradient at the stack's input) cross to global memory. After tiny-cuda-nn's fully fused MLP (a
// block keeps its rows' activations on the chip through every layer), taken further: the loss and the
// backward pass in the same kernel, and the weight gradients summed in shared memory, tile after tile,
// instead of by separate products over activations written out.
//
// Per tile: x into shared memory; each layer's product, then its bias and activation: a of each hidden
// layer and act'(z) beside it (sine, sigmoid and ReLU alike: the derivative is what the backward pass
// needs); the output layer's a against the targets: the tile's share of the loss, and
// G = dL/dz = 2 (a - t) / count * act'(z) (mse_loss and activation_backward as the reference composes
// them). Then from the last layer to the first: the bias gradient (G's column sums), the weight
// gradient (G^T times the layer's input) added into the block's sums, and the previous layer's G,
// (G W) * act'(z) (or, with input_grad, the gradient at the stack's input, as network_backward gives it).
//
// Products: the hidden layers' (width x width) under TF32 on the tensor cores (mma.sync m16n8k8, a warp
// 32x16 or 16x16 of the output at a time), their operands rounded to TF32 once, as they are written into
// shared memory (the hidden weights when staged; a and G of the hidden layers after their last use in
// FP32); the rest, and every product under FP32, as FP32 FMAs on 4x4 outputs a thread read as float4s
// from shared memory (1x4 for the thin products of the first and last layers, their K dimension split
// between adjacent lanes and summed by shuffles). The first and last layers' operands are rounded as
// they are read, by numpy_ops.tf32_rounds's rule (a product over the coordinates stays FP32).
//
// Every sum is in an order fixed by the plan (tile, groups) and the shapes, never by the number of
// networks: a network's gradients are the same bits in any pack.
//
// Output: the block's weight and bias gradients into its slot of `grads` ([N, groups, the stack's
// parameters], stride_grads between networks; with one group, the gradients themselves), its share of
// the loss (sum of squared errors * loss_scale) into losses [N, groups]; the host sums the groups.
// Launch: block FUSED_TRAIN_THREADS, grid (groups, networks), dynamic shared memory of 4
// launch.fused_train_shared_floats(...) bytes (TrainLayout).

#ifdef INR_CUDA_EMULATION
#define INR_DYNAMIC_SHARED(name) float* name = emu::dynamic_shared()
#else
#define INR_DYNAMIC_SHARED(name) extern __shared__ __align__(16) float name[]
#endif

constexpr int TRAIN_THREADS = FUSED_TRAIN_THREADS;
constexpr int TRAIN_WARPS = TRAIN_THREADS / 32;
constexpr unsigned int ALL_LANES = 0xffffffffu;

__device__ __forceinline__ int round4(int n) { return (n + 3) / 4 * 4; }

// A row of n floats in shared memory: whole float4s, and 4 floats more, so that the rows a warp reads
// at once start 4 banks apart.
__device__ __forceinline__ int row_stride(int n) { return round4(n) + 4; }

__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// Where each array of a block's shared memory starts, in floats (launch.fused_train_shared_floats is the
// same arithmetic). Layer j's weights: rows(j) rows (its outputs, padded with zeros: `width` for all but
// the last layer, round4(out) for it) of cols(j) floats (row_stride of its inputs: in0 for the first,
// `width` for the others), its bias (rows(j) floats) after them; the block's gradients in the same
// layout after all the weights; then x, a and act'(z) of each layer but the last, G, and a scratch.
struct TrainLayout {
    int tile, layers, in0, out, width;

    __device__ __forceinline__ int rows(int j) const { return j == layers - 1 ? round4(out) : width; }
    __device__ __forceinline__ int cols(int j) const { return row_stride(j == 0 ? in0 : width); }
    __device__ __forceinline__ int weights(int j) const
    {
        int at = 0;
        for (int i = 0; i < j; ++i) at += rows(i) * cols(i) + rows(i);
        return at;
    }
    __device__ __forceinline__ int bias(int j) const { return weights(j) + rows(j) * cols(j); }
    __device__ __forceinline__ int gradients() const { return weights(layers); }
    __device__ __forceinline__ int x() const { return 2 * weights(layers); }
    __device__ __forceinline__ int activation(int j) const
    {
        return x() + tile * row_stride(in0) + 2 * j * tile * row_stride(width);
    }
    __device__ __forceinline__ int derivative(int j) const { return activation(j) + tile * row_stride(width); }
    __device__ __forceinline__ int grad() const { return activation(layers - 1); }
    __device__ __forceinline__ int scratch() const { return grad() + tile * row_stride(width); }
};

// C (M x N) = A (M x K) B (K x N) by the block in FP32 FMAs, M, N and K multiples of 4 (zeros where the
// matrices are padded). A thread takes the MR x 4 outputs (MR = 4, or 1 for a thin product: then four
// times as many threads share it) of rows m0 .. m0 + MR - 1 and columns n(c): 4 ni + c where B is
// stored [k][n] (B_KN: a float4 of a B row), ni + N/4 c where it is stored [n][k] (a float4 along k of
// 4 consecutive rows of B^T, which the lanes of a warp read from different banks). A is stored [m][k]
// or, A_KM, [k][m]. Where the outputs are still a quarter of the threads or fewer, K is split between
// adjacent lanes, their sums added by shuffles in a fixed order, each lane then writing a share of the
// outputs. ROUND: operands rounded to TF32 as they are read. in_place: the epilogue may overwrite A (a
// barrier after every read of it; the outputs then at most one pass of the threads, so that every read
// comes before the barrier). epilogue(m, n, value) once for each output.
template <int MR, bool A_KM, bool B_KN, bool ROUND, class Epilogue>
__device__ __forceinline__ void simt_product(const float* a, int sa, const float* b, int sb, int M, int N, int K,
                                             bool in_place, Epilogue epilogue)
{
    constexpr int VALUES = 4 * MR;
    const int nt = N / 4, tiles = M / MR * nt;
    int split = 1;  // only where 3/4 of the threads would idle: each split costs shuffles
    if (tiles * 4 <= TRAIN_THREADS)
        while (split < 32 && tiles * split * 2 <= TRAIN_THREADS && 8 * split <= K) split *= 2;
    const int per_pass = TRAIN_THREADS / split;
    for (int first = 0; first < tiles; first += per_pass) {
        const int index = first + (int)threadIdx.x / split, part = (int)threadIdx.x % split;
        const bool active = index < tiles;
        const int m0 = active ? index / nt * MR : 0, ni = active ? index % nt : 0;
        float acc[MR][4];
#pragma unroll
        for (int r = 0; r < MR; ++r)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[r][c] = 0.0f;
        if (active) {
            for (int k = 4 * part; k < K; k += 4 * split) {
                float av[MR][4], bv[4][4];  // av[r][i] = A[m0 + r][k + i], bv[i][c] = B[k + i][n(c)]
                auto operand = [](float x) { return ROUND ? tf32_value(x) : x; };
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    if (A_KM && MR == 4) {
                        const float4 u = load4(a + (k + i) * sa + m0);
                        const float us[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                        for (int r = 0; r < MR; ++r) av[r][i] = operand(us[r]);
                    } else if (A_KM) {
                        av[0][i] = operand(a[(k + i) * sa + m0]);
                    } else if (i < MR) {
                        const float4 u = load4(a + (m0 + i) * sa + k);
                        const float us[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                        for (int j = 0; j < 4; ++j) av[i][j] = operand(us[j]);
                    }
                    const float4 v = B_KN ? load4(b + (k + i) * sb + 4 * ni) : load4(b + (ni + nt * i) * sb + k);
                    const float vs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        if (B_KN) bv[i][j] = operand(vs[j]); else bv[j][i] = operand(vs[j]);
                    }
                }
#pragma unroll
                for (int r = 0; r < MR; ++r)
#pragma unroll
                    for (int c = 0; c < 4; ++c)
#pragma unroll
                        for (int i = 0; i < 4; ++i) acc[r][c] = fmaf(av[r][i], bv[i][c], acc[r][c]);
            }
        }
        // The K-split's sums: a butterfly that halves what it sends at each step (a reduce-scatter), so
        // that lane `part` ends with VALUES / split of the totals (past VALUES lanes, lanes in pairs,
        // fours... with one): those of output index 4 r + c = base + i.
        float v[VALUES];
#pragma unroll
        for (int i = 0; i < VALUES; ++i) v[i] = acc[i / 4][i % 4];
        int base = 0;
#pragma unroll
        for (int step = 0; step < 5; ++step) {
            const int offset = 1 << step;
            if (offset >= split) break;
            const bool upper = part & offset;
            if ((VALUES >> step) > 1) {
                const int half = VALUES >> (step + 1);
#pragma unroll
                for (int i = 0; i < half; ++i) {
                    const float send = upper ? v[i] : v[i + half], keep = upper ? v[i + half] : v[i];
                    v[i] = keep + __shfl_xor_sync(ALL_LANES, send, offset);
                }
                base += upper ? half : 0;
            } else {
                v[0] += __shfl_xor_sync(ALL_LANES, v[0], offset);
            }
        }
        if (in_place) __syncthreads();
        const int count = split >= VALUES ? 1 : VALUES / split;
        if (active && part < VALUES)
#pragma unroll
            for (int i = 0; i < VALUES; ++i)
                if (i < count) {
                    const int r = (base + i) / 4, c = (base + i) % 4;
                    epilogue(m0 + r, B_KN ? 4 * ni + c : ni + nt * c, v[i]);
                }
    }
}

// The same on the tensor cores (TF32, mma.sync m16n8k8) for operands already rounded to TF32: M a
// multiple of 16, N of 16, K of 8; a warp takes 32x16 outputs (16x16 where M is no multiple of 32) at a
// time: per k-step 2 (1) A fragments and 2 B fragments, 4 (2) products. in_place as above: its outputs
// then take one pass of the warps, as the plan's tiles (a multiple of 32 rows, or 16, of at most
// FUSED_TRAIN_TILE_ELEMENTS values) make sure.
template <bool A_KM, bool B_KN, class Epilogue>
__device__ __forceinline__ void mma_product(const float* a, int sa, const float* b, int sb, int M, int N, int K,
                                            bool in_place, Epilogue epilogue)
{
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int tall = M % 32 == 0 ? 2 : 1, bn = N / 16, blocks = M / (16 * tall) * bn;
    auto at = [&](int m, int k) { return __float_as_uint(A_KM ? a[k * sa + m] : a[m * sa + k]); };
    auto bt = [&](int k, int n) { return __float_as_uint(B_KN ? b[k * sb + n] : b[n * sb + k]); };
    for (int first = 0; first < blocks; first += TRAIN_WARPS) {
        const int index = first + warp;
        const bool active = index < blocks;  // the same for the whole warp, as mma.sync needs
        const int m0 = active ? index / bn * 16 * tall : 0, n0 = active ? index % bn * 16 : 0;
        float acc[2][2][4];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int p = 0; p < 2; ++p)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[i][p][r] = 0.0f;
        if (active) {
            for (int k = 0; k < K; k += 8) {
                unsigned int fa[2][4], fb[2][2];
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int m = m0 + 16 * i + g;
                    if (i < tall) {
                        fa[i][0] = at(m, k + t);
                        fa[i][1] = at(m + 8, k + t);
                        fa[i][2] = at(m, k + t + 4);
                        fa[i][3] = at(m + 8, k + t + 4);
                    }
                }
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    fb[p][0] = bt(k + t, n0 + 8 * p + g);
                    fb[p][1] = bt(k + t + 4, n0 + 8 * p + g);
                }
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int p = 0; p < 2; ++p)
                        if (i < tall) mma_tf32_16x8x8(acc[i][p], fa[i], fb[p], acc[i][p]);
            }
        }
        if (in_place) __syncthreads();
        if (active)
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int p = 0; p < 2; ++p)
#pragma unroll
                    for (int r = 0; r < 4; ++r)
                        if (i < tall) epilogue(m0 + 16 * i + g + 8 * (r / 2), n0 + 8 * p + 2 * t + r % 2, acc[i][p][r]);
    }
}

// C = A B as above: on the tensor cores where `tensor` (TF32 and a hidden layer's product), else in
// FP32 FMAs on MR x 4 outputs a thread, rounding the operands as they are read where `round`.
template <bool TF32, int MR, bool A_KM, bool B_KN, class Epilogue>
__device__ __forceinline__ void layer_product(bool tensor, bool round, const float* a, int sa, const float* b, int sb,
                                              int M, int N, int K, bool in_place, Epilogue epilogue)
{
    if constexpr (TF32) {
        if (tensor) return mma_product<A_KM, B_KN>(a, sa, b, sb, M, N, K, in_place, epilogue);
        if (round) return simt_product<MR, A_KM, B_KN, true>(a, sa, b, sb, M, N, K, in_place, epilogue);
    }
    simt_product<MR, A_KM, B_KN, false>(a, sa, b, sb, M, N, K, in_place, epilogue);
}

// The bias gradient: db[c] += the sum over the tile's rows of g[r][c], c < cols (a multiple of 4), in
// a fixed order (each of `parts` adjacent lanes a stride of rows, then shuffles); with ROUND, g rounded
// to TF32 in place once summed, for the products that read it next.
template <bool ROUND>
__device__ __forceinline__ void bias_gradient(float* g, int sg, int tile, int cols, float* db)
{
    int parts = 1;
    while (parts < 8 && cols * parts * 2 <= TRAIN_THREADS) parts *= 2;
    const int per_pass = TRAIN_THREADS / parts;
    for (int first = 0; first < cols; first += per_pass) {
        const int c = first + (int)threadIdx.x / parts, part = (int)threadIdx.x % parts;
        float sum = 0.0f;
        if (c < cols)
            for (int r = part; r < tile; r += parts) {
                const float v = g[r * sg + c];
                sum += v;
                if (ROUND) g[r * sg + c] = tf32_value(v);
            }
        for (int offset = 1; offset < parts; offset *= 2) sum += __shfl_xor_sync(ALL_LANES, sum, offset);
        if (c < cols && part == 0) db[c] += sum;
    }
}

template <bool TF32>
__device__ __forceinline__ void network_train(
    const float* __restrict__ x, long long stride_x, const float* __restrict__ targets, long long stride_t,
    const float* __restrict__ params, long long stride_params, long long offset, int layers, int in0, int hidden,
    int out, int width, int hidden_kind, int out_kind, float omega0, float loss_scale, int tile, float* grads,
    long long stride_grads, float* losses, long long stride_losses, const float* __restrict__ z_in, int input_kind,
    float* input_grad, int rows)
{
    INR_DYNAMIC_SHARED(shared);
    const TrainLayout at{tile, layers, in0, out, width};
    const long long net = blockIdx.y;
    const int groups = gridDim.x, tiles = (rows + tile - 1) / tile;
    const int sx = row_stride(in0), sw = row_stride(width);
    x += net * stride_x;
    targets += net * stride_t;
    params += net * stride_params;
    if (z_in) z_in += net * stride_x;
    if (input_grad) input_grad += net * stride_x;
    float* const xs = shared + at.x();
    float* const g = shared + at.grad();
    auto layer_of = [&](int j) { return stack_layer(j, layers, in0, hidden, out, hidden_kind, out_kind, offset); };
    auto hidden_layer = [&](int j) { return j > 0 && j < layers - 1; };
    // Under TF32 every product over a hidden layer's values rounds them (unless the layer is no wider
    // than the coordinates): a and G of the hidden layers, and the hidden-to-hidden weights, are then
    // stored rounded, once, and the hidden-to-hidden products run on the tensor cores.
    const bool tf32_hidden = TF32 && hidden > FP32_MAX_K;

    // The weights, padded with zeros (the hidden-to-hidden layers' rounded under TF32: they are only ever
    // the tensor cores' operands), and the gradients' sums at zero.
    for (int j = 0; j < layers; ++j) {
        const Layer layer = layer_of(j);
        const float* w = params + layer.weights;
        const int rows_j = at.rows(j), cols_j = at.cols(j);
        const bool round = tf32_hidden && hidden_layer(j);
        for (int i = threadIdx.x; i < rows_j * cols_j + rows_j; i += TRAIN_THREADS) {
            float v;
            if (i < rows_j * cols_j) {
                const int r = i / cols_j, c = i % cols_j;
                v = r < layer.out && c < layer.in ? w[r * layer.in + c] : 0.0f;
                v = round ? tf32_value(v) : v;
            } else {
                const int r = i - rows_j * cols_j;
                v = r < layer.out ? w[(long long)layer.out * layer.in + r] : 0.0f;
            }
            shared[at.weights(j) + i] = v;
            shared[at.gradients() + at.weights(j) + i] = 0.0f;
        }
    }
    float loss = 0.0f;  // this thread's outputs' squared errors
    const float two_scale = 2.0f * loss_scale;

    for (int tile_index = blockIdx.x; tile_index < tiles; tile_index += groups) {
        const int row0 = tile_index * tile;
        auto valid = [&](int r) { return row0 + r < rows; };
        for (int i = threadIdx.x; i < tile * sx; i += TRAIN_THREADS) {
            const int r = i / sx, c = i % sx;
            xs[i] = valid(r) && c < in0 ? x[(long long)(row0 + r) * in0 + c] : 0.0f;
        }
        __syncthreads();

        // Forward.
        for (int j = 0; j < layers; ++j) {
            const Layer layer = layer_of(j);
            const float* input = j == 0 ? xs : shared + at.activation(j - 1);
            const int s_in = j == 0 ? sx : sw, k = j == 0 ? round4(in0) : width;
            const float* w = shared + at.weights(j);
            const float* bias = shared + at.bias(j);
            const bool round = TF32 && layer.in > FP32_MAX_K;
            if (j == layers - 1) {  // the output against the targets: the loss and G
                layer_product<TF32, 1, false, false>(false, round, input, s_in, w, at.cols(j), tile, round4(out), k,
                                                     false, [&](int m, int n, float v) {
                    float d = 0.0f;
                    if (n < out && valid(m)) {
                        const float z = v + bias[n], a = activate(z, out_kind, omega0);
                        const float diff = a - targets[(long long)(row0 + m) * out + n];
                        loss += diff * diff;
                        d = diff * two_scale * activation_derivative(z, a, out_kind, omega0);
                    }
                    g[m * sw + n] = d;
                });
            } else {
                float* a_out = shared + at.activation(j);
                float* d_out = shared + at.derivative(j);
                const bool tensor = tf32_hidden && hidden_layer(j);
                layer_product<TF32, 4, false, false>(tensor, round, input, s_in, w, at.cols(j), tile, width, k, false,
                                                     [&](int m, int n, float v) {
                    float a = 0.0f, d = 0.0f;
                    if (n < layer.out) {
                        const float z = v + bias[n];
                        a = activate(z, layer.kind, omega0);
                        d = activation_derivative(z, a, layer.kind, omega0);
                    }
                    a_out[m * sw + n] = tf32_hidden ? tf32_value(a) : a;  // only ever a product's operand
                    d_out[m * sw + n] = d;
                });
            }
            __syncthreads();
        }

        // Backward, from the last layer to the first; g holds its dL/dz.
        for (int j = layers - 1; j >= 0; --j) {
            const Layer layer = layer_of(j);
            const bool tensor = tf32_hidden && hidden_layer(j);
            float* dw = shared + at.gradients() + at.weights(j);
            const float* w = shared + at.weights(j);
            // G of all but the output layer is only ever a product's operand after its sum: rounded here.
            if (tf32_hidden && j < layers - 1) {
                bias_gradient<true>(g, sw, tile, at.rows(j), dw + at.rows(j) * at.cols(j));
            } else {
                bias_gradient<false>(g, sw, tile, at.rows(j), dw + at.rows(j) * at.cols(j));
            }
            __syncthreads();
            const float* input = j == 0 ? xs : shared + at.activation(j - 1);
            const int s_in = j == 0 ? sx : sw, n_in = j == 0 ? round4(in0) : width;
            const int cols_j = at.cols(j);
            auto add_weight_gradient = [&](int m, int n, float v) { dw[m * cols_j + n] += v; };
            if (tensor || (hidden_layer(j) && width * width / 16 * 2 >= TRAIN_THREADS)) {
                layer_product<TF32, 4, true, true>(tensor, TF32, g, sw, input, s_in, at.rows(j), n_in, tile, false,
                                                   add_weight_gradient);
            } else {  // thin (the first and last layers), or too few 4x4 outputs for the threads
                layer_product<TF32, 1, true, true>(false, TF32, g, sw, input, s_in, at.rows(j), n_in, tile, false,
                                                   add_weight_gradient);
            }
            const bool round = TF32 && layer.out > FP32_MAX_K;
            if (j > 0) {  // the previous layer's G, in place
                const float* d_prev = shared + at.derivative(j - 1);
                layer_product<TF32, 4, false, true>(tensor, round, g, sw, w, cols_j, tile, width, at.rows(j), true,
                                                    [&](int m, int n, float v) {
                    g[m * sw + n] = v * d_prev[m * sw + n];
                });
            } else if (input_grad) {  // the gradient at the stack's input
                layer_product<TF32, 1, false, true>(false, round, g, sw, w, cols_j, tile, round4(in0), at.rows(j),
                                                    false, [&](int m, int n, float v) {
                    if (n >= in0 || !valid(m)) return;
                    const long long i = (long long)(row0 + m) * in0 + n;
                    input_grad[i] = v * activation_derivative(z_in ? z_in[i] : 0.0f, x[i], input_kind, omega0);
                });
            }
            __syncthreads();
        }
    }

    // The block's sums out: the gradients, packed as the parameters are, and its share of the loss.
    float* slot = grads + net * stride_grads + (long long)blockIdx.x * stack_parameters(layers, in0, hidden, out);
    for (int j = 0; j < layers; ++j) {
        const Layer layer = layer_of(j);
        const float* dw = shared + at.gradients() + at.weights(j);
        float* to = slot + (layer.weights - offset);
        const int cols_j = at.cols(j), count = layer.out * layer.in;
        for (int i = threadIdx.x; i < count + layer.out; i += TRAIN_THREADS)
            to[i] = i < count ? dw[i / layer.in * cols_j + i % layer.in] : dw[at.rows(j) * cols_j + i - count];
    }
    for (int offset_lane = 16; offset_lane > 0; offset_lane /= 2) loss += __shfl_xor_sync(ALL_LANES, loss, offset_lane);
    float* scratch = shared + at.scratch();
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = loss;
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int w = 0; w < TRAIN_WARPS; ++w) sum += scratch[w];
        losses[net * stride_losses + blockIdx.x] = sum * loss_scale;
    }
}

#define FUSED_TRAIN(PRECISION, TF32)                                                                                \
    extern "C" __global__ void __launch_bounds__(FUSED_TRAIN_THREADS, 1) network_train_##PRECISION(                \
        const float* __restrict__ x, long long stride_x, const float* __restrict__ targets, long long stride_t,     \
        const float* __restrict__ params, long long stride_params, long long offset, int layers, int in0,            \
        int hidden, int out, int width, int hidden_kind, int out_kind, float omega0, float loss_scale, int tile,      \
        float* grads, long long stride_grads, float* losses, long long stride_losses,                               \
        const float* __restrict__ z_in, int input_kind, float* input_grad, int rows)                                \
    {                                                                                                               \
        network_train<TF32>(x, stride_x, targets, stride_t, params, stride_params, offset, layers, in0, hidden, out, \
                            width, hidden_kind, out_kind, omega0, loss_scale, tile, grads, stride_grads, losses,     \
                            stride_losses, z_in, input_kind, input_grad, rows);                                     \
    }

FUSED_TRAIN(fp32, false)
FUSED_TRAIN(tf32, true)
