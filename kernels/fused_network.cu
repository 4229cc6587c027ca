// fused_network -- a narrow network's layers in two kernels per training step, its activations kept
// in shared memory between layers; the same arithmetic as NumpyBackend's layer operations composed
// as core/network.py's Network.forward and Network.backward compose them (linear_forward for each
// layer; then linear_backward_input and linear_backward_weights from the last layer to the first).
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
