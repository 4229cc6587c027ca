// Optimizer -- NumpyBackend.advance_schedule, adam_update and sgd_update.
// The step counter and the learning rate live in device memory, so the launches of a training
// step never change and the whole step can be replayed as a CUDA graph.

// One thread. hyper = [lr, lr / (1 - beta1^t), sqrt(1 - beta2^t)] for update t = step + 1, with
// lr rising linearly to lr_max over the first `warmup` steps, then on the cosine from lr_max (step
// warmup) to lr_min (step total); then step += 1.
extern "C" __global__ void advance_schedule(long long* step, float* hyper, double lr_max, double lr_min,
                                            long long total, long long warmup, double beta1, double beta2)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    long long s = *step;
    double lr;
    if (s < warmup) {
        lr = lr_max * (double)(s + 1) / (double)warmup;
    } else {
        long long span = total - warmup;
        double progress = (double)((s < total ? s : total) - warmup) / (double)(span > 0 ? span : 1);
        lr = lr_min + 0.5 * (lr_max - lr_min) * (1.0 + cos(3.14159265358979323846 * progress));
    }
    double t = (double)(s + 1);
    hyper[0] = (float)lr;
    hyper[1] = (float)(lr / (1.0 - pow(beta1, t)));
    hyper[2] = (float)sqrt(1.0 - pow(beta2, t));
    *step = s + 1;
}

// Adam as PyTorch writes it: p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps). All parameters of
// the network are one flat vector: one launch updates them all.
extern "C" __global__ void adam_update(float* __restrict__ params, const float* __restrict__ grads,
                                       float* __restrict__ m, float* __restrict__ v, long long n,
                                       const float* __restrict__ hyper, float beta1, float beta2, float eps)
{
    float step_size = hyper[1];
    float sqrt_bc2 = hyper[2];
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float g = grads[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        params[i] -= step_size * mi / (sqrtf(vi) / sqrt_bc2 + eps);
    }
}

// SGD with momentum as PyTorch writes it: buf = mu * buf + g; p -= lr * buf.
extern "C" __global__ void sgd_update(float* __restrict__ params, const float* __restrict__ grads,
                                      float* __restrict__ buf, long long n, const float* __restrict__ hyper,
                                      float momentum)
{
    float lr = hyper[0];
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float b = momentum * buf[i] + grads[i];
        buf[i] = b;
        params[i] -= lr * b;
    }
}
