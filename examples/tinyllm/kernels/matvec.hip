// out = W x for one decode step, the HIP twin of matvec.cu: one block per output row,
// threads stride over the columns, then a tree reduction in shared memory.
// Compiled by hipcc from build.rs into a code object bundle, one entry per gfx target.
#include <hip/hip_runtime.h>

#define MATVEC_THREADS 256

extern "C" __global__ void matvec(float *out, const float *w, const float *x,
                                  unsigned int rows, unsigned int cols) {
    __shared__ float partial[MATVEC_THREADS];
    const unsigned int row = blockIdx.x;
    if (row >= rows) {
        return;
    }
    const float *weights = w + (size_t)row * cols;
    float sum = 0.0f;
    for (unsigned int c = threadIdx.x; c < cols; c += blockDim.x) {
        sum += weights[c] * x[c];
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[row] = partial[0];
    }
}
