// column_reduce -- NumpyBackend.column_reduce: out[net, j] = sum_i x[net, i, j], for every network.
// Bias gradients (sum of dZ over the batch), loss sums and split-K partial products, so nothing
// goes to the host to be added.
//
// A block of REDUCE_TX x REDUCE_TY threads (constants.cuh) owns REDUCE_TX adjacent columns
// (threadIdx.x: coalesced reads along a row) and the rows [blockIdx.y * rows_per_block, ... +
// rows_per_block) of network blockIdx.z; the REDUCE_TY partial sums meet in shared memory. With
// gridDim.y > 1 the block writes the partial row out[net * stride_out + blockIdx.y * cols + j] and
// the host launches a second pass over those partial rows: a deterministic two-pass reduction, no
// atomics, so results do not vary from run to run.
// Launch: block (REDUCE_TX, REDUCE_TY), grid (ceil(cols / REDUCE_TX), row_blocks, networks).

#include "constants.cuh"

extern "C" __global__ void column_reduce(const float* __restrict__ x, float* __restrict__ out, int rows, int cols,
                                         int rows_per_block, long long stride_x, long long stride_out)
{
    __shared__ float partial[REDUCE_TY][REDUCE_TX + 1];
    x += blockIdx.z * stride_x;
    out += blockIdx.z * stride_out;
    int col = blockIdx.x * REDUCE_TX + threadIdx.x;
    int row_begin = blockIdx.y * rows_per_block;
    int row_end = row_begin + rows_per_block < rows ? row_begin + rows_per_block : rows;
    float sum = 0.0f;
    if (col < cols) {
        for (int r = row_begin + threadIdx.y; r < row_end; r += REDUCE_TY) {
            sum += x[(long long)r * cols + col];
        }
    }
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        float total = 0.0f;
        for (int k = 0; k < REDUCE_TY; ++k) total += partial[k][threadIdx.x];
        out[(long long)blockIdx.y * cols + col] = total;
    }
}
