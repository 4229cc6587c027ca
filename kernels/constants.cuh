// Numbers the kernels and the host must agree on, written once: inr_cli/backends/launch.py reads
// this file's #defines for its launch plans and activation codes.
#pragma once

// Activation codes (launch.ACTIVATION_CODES).
#define ACT_LINEAR 0
#define ACT_SIGMOID 1
#define ACT_SINE 2  // sin(omega0 * z), SIREN
#define ACT_RELU 3

// column_reduce's block: REDUCE_TX adjacent columns by REDUCE_TY rows of threads.
#define REDUCE_TX 32
#define REDUCE_TY 8

// mse_loss's block size: its shared-memory tree reduction is written for exactly this many threads.
#define LOSS_THREADS 256

// The fused network's kernels (fused_network.cu): the widths instantiated (a network runs in the
// smallest that holds its layers), and the rows a block carries through the layers at a time:
// FUSED_ROW_ELEMENTS / width, at most FUSED_MAX_ROWS (two such chunks of floats fit 48 KB; 128 rows
// for the narrowest widths took half as long again to compile, every row tile being unrolled).
#define FUSED_MAX_WIDTH 128
#define FUSED_ROW_ELEMENTS 4096
#define FUSED_MAX_ROWS 64

// The one-kernel training pass (fused_network.cu, network_train): a block of FUSED_TRAIN_THREADS
// threads carries a tile of FUSED_TRAIN_TILE_ELEMENTS / width rows (at most FUSED_TRAIN_MAX_ROWS;
// halved, down to FUSED_TRAIN_MIN_ROWS, until its shared memory fits the device) through the whole
// pass; a network's rows are split between blocks of at least FUSED_TRAIN_GROUP_TILES tiles each
// (launch.plan_fused_network). A tile's products are at most 16 values a thread (4x4).
#define FUSED_TRAIN_THREADS 256
#define FUSED_TRAIN_TILE_ELEMENTS 4096
#define FUSED_TRAIN_MAX_ROWS 128
#define FUSED_TRAIN_MIN_ROWS 16
#define FUSED_TRAIN_GROUP_TILES 4

// Under --precision tf32, a product over at most this many terms stays FP32 (numpy_ops.matmul, the
// matmul plans, the fused network's first layer): K = 2 is the coordinates (u, v), the input of a
// first layer or of the Fourier projection, which TF32's 10 mantissa bits would move (past 2048 px
// pixel centres merge); so short a product costs as little in FP32.
#define FP32_MAX_K 2
