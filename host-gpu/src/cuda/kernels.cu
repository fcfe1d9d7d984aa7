// The CUDA backend's kernels, compiled at run time with NVRTC. Everything is f32 and row-major;
// the matrix products are cuBLAS calls made from engine.rs. No fast math: expf, logf and sqrtf
// are the accurate versions.
//
// Every kernel that works on rows runs one block per row with BLOCK threads; the element-wise
// kernels use grid-stride loops, so any grid size is correct.

#define BLOCK 256

__device__ __forceinline__ float negative_infinity() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// The sum of `v` over the block (blockDim.x a multiple of 32), given to every thread.
__device__ float block_sum(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // an earlier call may still be reading partial
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = threadIdx.x < warps ? partial[threadIdx.x] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) partial[0] = v;
    __syncthreads();
    return partial[0];
}

// The maximum of `v` over the block, given to every thread.
__device__ float block_max(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = threadIdx.x < warps ? partial[threadIdx.x] : negative_infinity();
    if (warp == 0) v = warp_max(v);
    if (threadIdx.x == 0) partial[0] = v;
    __syncthreads();
    return partial[0];
}

extern "C" {

// dst[dst_rows[i]] = scale * src[src_rows[i]] for i < n, rows of `width`. Grid: n blocks.
__global__ void gather_rows(const float* src, const int* src_rows, float* dst, const int* dst_rows,
                            int n, int width, float scale) {
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        const float* from = src + (long long)src_rows[i] * width;
        float* to = dst + (long long)dst_rows[i] * width;
        for (int c = threadIdx.x; c < width; c += blockDim.x) to[c] = scale * from[c];
    }
}

// From qkv (rows, 3 * width), whose first `width` columns are q: content_q = q + u and
// position_q = q + v, each (rows, width).
__global__ void add_position_biases(const float* qkv, const float* u, const float* v,
                                    float* content_q, float* position_q, int rows, int width) {
    const long long total = (long long)rows * width;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const long long r = e / width;
        const int k = (int)(e - r * width);
        const float q = qkv[r * 3 * width + k];
        content_q[e] = q + u[k];
        position_q[e] = q + v[k];
    }
}

// Copies the keys and values of qkv rows [row0, row0 + n) into rows [at, at + n) of a stream's
// key and value memory, each (capacity, width).
__global__ void store_kv(const float* qkv, int row0, int n, int width, float* keys, float* values, int at) {
    const long long total = (long long)n * width;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const long long i = e / width;
        const int k = (int)(e - i * width);
        const float* row = qkv + (row0 + i) * 3 * width;
        keys[(at + i) * width + k] = row[width + k];
        values[(at + i) * width + k] = row[2 * width + k];
    }
}

// Fills rows [0, n) of the key and value memory with key_row and value_row (the zero start).
__global__ void fill_kv(const float* key_row, const float* value_row, float* keys, float* values,
                        int n, int width) {
    const long long total = (long long)n * width;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const int k = (int)(e % width);
        keys[e] = key_row[k];
        values[e] = value_row[k];
    }
}

// Attention probabilities of one stream's segment. content (n_head, qlen, klen) holds
// (q + u) . k_j, position (n_head, qlen, distances) holds (q + v) . R_d; probs is
// (n_head, qlen, klen). Grid: (qlen, n_head) blocks, one per (query, head).
//
// Key j is hidden from query i when j > mlen + i (the future) or, with same_length, when
// j <= i - shift, where shift = qlen - (klen - mem_len) if klen > mem_len, else qlen. Seen keys
// score (content + position[min(mlen + i - j, max_distance)]) * scale; when every key is
// hidden the probabilities are uniform over all klen keys, as in Hugging Face.
__global__ void attention_probs(const float* content, const float* position, float* probs, int qlen,
                                int klen, int distances, int mlen, int mem_len, int same_length,
                                int max_distance, float scale) {
    const int i = blockIdx.x, head = blockIdx.y;
    const float* ac = content + ((long long)head * qlen + i) * klen;
    const float* bd = position + ((long long)head * qlen + i) * distances;
    float* p = probs + ((long long)head * qlen + i) * klen;
    const int mask_len = klen - mem_len;
    const int shift = mask_len > 0 ? qlen - mask_len : qlen;

    float local_max = negative_infinity();
    int local_seen = 0;
    for (int j = threadIdx.x; j < klen; j += blockDim.x) {
        const bool hidden = j > mlen + i || (same_length && j <= i - shift);
        if (!hidden) {
            const int d = min(mlen + i - j, max_distance);
            local_max = fmaxf(local_max, (ac[j] + bd[d]) * scale);
            local_seen = 1;
        }
    }
    const float max = block_max(local_max);
    const float seen = block_sum((float)local_seen);
    if (seen == 0.0f) {
        for (int j = threadIdx.x; j < klen; j += blockDim.x) p[j] = 1.0f / (float)klen;
        return;
    }
    float local_sum = 0.0f;
    for (int j = threadIdx.x; j < klen; j += blockDim.x) {
        const bool hidden = j > mlen + i || (same_length && j <= i - shift);
        float e = 0.0f;
        if (!hidden) {
            const int d = min(mlen + i - j, max_distance);
            e = expf((ac[j] + bd[d]) * scale - max);
        }
        p[j] = e;
        local_sum += e;
    }
    const float inv_sum = 1.0f / block_sum(local_sum);
    for (int j = threadIdx.x; j < klen; j += blockDim.x) p[j] *= inv_sum;
}

// out = LayerNorm(x) per row of `width` (biased variance, two passes); out may equal x.
// Grid: one block per row.
__global__ void layer_norm(const float* x, float* out, const float* gain, const float* bias, float eps,
                           int width) {
    const float* row = x + (long long)blockIdx.x * width;
    float* o = out + (long long)blockIdx.x * width;
    float s = 0.0f;
    for (int c = threadIdx.x; c < width; c += blockDim.x) s += row[c];
    const float mean = block_sum(s) / (float)width;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        const float d = row[c] - mean;
        ss += d * d;
    }
    const float inv_std = 1.0f / sqrtf(block_sum(ss) / (float)width + eps);
    for (int c = threadIdx.x; c < width; c += blockDim.x) o[c] = (row[c] - mean) * inv_std * gain[c] + bias[c];
}

// h += delta per row of `width`, then, when `normalize`, h = LayerNorm(h) (post-LN).
// Grid: one block per row.
__global__ void residual(float* h, const float* delta, const float* gain, const float* bias, float eps,
                         int width, int normalize) {
    float* row = h + (long long)blockIdx.x * width;
    const float* d = delta + (long long)blockIdx.x * width;
    for (int c = threadIdx.x; c < width; c += blockDim.x) row[c] += d[c];
    if (!normalize) return;
    __syncthreads();
    float s = 0.0f;
    for (int c = threadIdx.x; c < width; c += blockDim.x) s += row[c];
    const float mean = block_sum(s) / (float)width;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        const float v = row[c] - mean;
        ss += v * v;
    }
    const float inv_std = 1.0f / sqrtf(block_sum(ss) / (float)width + eps);
    for (int c = threadIdx.x; c < width; c += blockDim.x) row[c] = (row[c] - mean) * inv_std * gain[c] + bias[c];
}

// x[r][c] += b[c] for a (rows, width) block whose rows are `ld` apart; then max(x, 0) if `relu`.
__global__ void add_bias(float* x, int ld, const float* b, int rows, int width, int relu) {
    const long long total = (long long)rows * width;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const long long r = e / width;
        const int c = (int)(e - r * width);
        float v = x[r * ld + c] + b[c];
        if (relu) v = fmaxf(v, 0.0f);
        x[r * ld + c] = v;
    }
}

// The adaptive log-softmax, in place, one block per row of logits (rows, n_token). Cluster c
// covers columns [bounds[c], bounds[c + 1]) for c <= n_clusters; tail (rows, n_clusters) holds
// the tail clusters' head logits. Head columns become logit - lse(head); a tail token's column
// becomes (tail logit - lse(head)) + (logit - lse(its cluster)). n_clusters = 0 is a full
// log-softmax.
__global__ void adaptive_log_softmax(float* logits, const float* tail, const int* bounds, int n_clusters,
                                     int n_token) {
    float* row = logits + (long long)blockIdx.x * n_token;
    const float* t = tail + (long long)blockIdx.x * n_clusters;
    const int shortlist = bounds[1];

    float m = negative_infinity();
    for (int c = threadIdx.x; c < shortlist; c += blockDim.x) m = fmaxf(m, row[c]);
    for (int c = threadIdx.x; c < n_clusters; c += blockDim.x) m = fmaxf(m, t[c]);
    const float head_max = block_max(m);
    float s = 0.0f;
    for (int c = threadIdx.x; c < shortlist; c += blockDim.x) s += expf(row[c] - head_max);
    for (int c = threadIdx.x; c < n_clusters; c += blockDim.x) s += expf(t[c] - head_max);
    const float head_lse = head_max + logf(block_sum(s));
    for (int c = threadIdx.x; c < shortlist; c += blockDim.x) row[c] -= head_lse;

    for (int cluster = 1; cluster <= n_clusters; cluster++) {
        const int start = bounds[cluster], end = bounds[cluster + 1];
        float cm = negative_infinity();
        for (int c = start + threadIdx.x; c < end; c += blockDim.x) cm = fmaxf(cm, row[c]);
        const float cluster_max = block_max(cm);
        float cs = 0.0f;
        for (int c = start + threadIdx.x; c < end; c += blockDim.x) cs += expf(row[c] - cluster_max);
        const float cluster_lse = cluster_max + logf(block_sum(cs));
        const float offset = (t[cluster - 1] - head_lse) - cluster_lse;
        for (int c = start + threadIdx.x; c < end; c += blockDim.x) row[c] += offset;
    }
}

// out[r] = log_probs[r][targets[r]] (0 where targets[r] < 0), for r < rows.
__global__ void gather_targets(const float* log_probs, const int* targets, float* out, int rows, int n_token) {
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x) {
        const int t = targets[r];
        out[r] = t >= 0 ? log_probs[(long long)r * n_token + t] : 0.0f;
    }
}

// Calibration statistics. range[c] = max(range[c], |x[r][c]|) over the rows r < rows of x
// (rows, width): one thread per column, reading x row by row (neighbouring threads, neighbouring
// columns). NaN never enters a range (fmaxf).
__global__ void column_max_abs(const float* x, int rows, int width, float* range) {
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < width; c += gridDim.x * blockDim.x) {
        float m = range[c];
        for (int r = 0; r < rows; r++) m = fmaxf(m, fabsf(x[(long long)r * width + c]));
        range[c] = m;
    }
}

// out[i] = x[i] widened to double, exactly, for i < n: the input of the double-precision product
// that accumulates X^T X.
__global__ void widen(const float* x, int n, double* out) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        out[i] = (double)x[i];
    }
}

// Makes the (n, n) matrix g exactly symmetric: each entry below the diagonal becomes its mirror
// above it (g[r][c] = g[c][r] for r > c), as the CPU's Gram matrices are.
__global__ void mirror_upper(double* g, int n) {
    const long long total = (long long)n * n;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const long long r = e / n;
        const long long c = e - r * n;
        if (r > c) g[e] = g[c * n + r];
    }
}

}  // extern "C"
