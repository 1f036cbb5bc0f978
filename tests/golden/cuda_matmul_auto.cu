// jitdl: jd_matmul, 1 kernel(s) for sm_90
// launched in order on one stream:
//   jd_matmul_k0<<<(2, 1, 1), (16, 16, 1)>>>
// helpers: NumPy's semantics where C's differ
#define JD_INLINE static __device__ __forceinline__
template <typename T> JD_INLINE T jd_fmax(T a, T b) {   // NaN wins, max(-0, 0) = 0
  return a != a ? a : b != b ? b : a > b ? a : b > a ? b : signbit(a) ? b : a;
}
template <typename T> JD_INLINE T jd_fmin(T a, T b) {   // NaN wins, min(-0, 0) = -0
  return a != a ? a : b != b ? b : a < b ? a : b < a ? b : signbit(a) ? a : b;
}
template <typename T> JD_INLINE T jd_fmod_floor(T a, T b) {   // remainder: divisor's sign
  T r = fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> JD_INLINE T jd_floordiv(T a, T b) {     // floor_divide of floats
  if (b == 0) return a / b;
  T m = fmod(a, b);
  T d = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) d -= 1;
  T f = floor(d);
  return d - f > (T)0.5 ? f + 1 : f;
}
template <typename T> JD_INLINE T jd_idiv(T a, T b) {   // x // 0 == 0, floor division
  if (b == 0) return 0;
  if (b == (T)-1) return (T)(0 - a);
  T q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> JD_INLINE T jd_imod(T a, T b) {   // x % 0 == 0, the divisor's sign
  if (b == 0 || b == (T)-1) return 0;
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> JD_INLINE T jd_udiv(T a, T b) { return b == 0 ? 0 : a / b; }
template <typename T> JD_INLINE T jd_umod(T a, T b) { return b == 0 ? 0 : a % b; }
template <typename T> JD_INLINE T jd_ipow(T x, T e) {   // a negative exponent gives 0
  if (e < 0) return 0;
  T r = 1;
  while (e > 0) { if (e & 1) r = (T)(r * x); x = (T)(x * x); e >>= 1; }
  return r;
}
template <typename T> JD_INLINE T jd_sign(T x) { return x < 0 ? (T)-1 : x > 0 ? (T)1 : x; }
template <typename T> JD_INLINE T jd_imin(T a, T b) { return a < b ? a : b; }
template <typename T> JD_INLINE T jd_imax(T a, T b) { return a > b ? a : b; }

extern "C" __global__ void __launch_bounds__(256) jd_matmul_k0(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C) {
  {
    const long long j_o = (long long)blockIdx.x;
    {
      const long long i_i_o = (long long)threadIdx.y;
      {
        const long long j_i_o = (long long)threadIdx.x;
        {
          float C_acc[16];
          #pragma unroll
          for (long long i_i_i = 0LL; i_i_i < 4LL; ++i_i_i) {
            #pragma unroll
            for (long long j_i_i = 0LL; j_i_i < 4LL; ++j_i_i) {
              if ((((j_i_i + (j_i_o * 4LL)) + (j_o * 64LL)) < 96LL)) {
                C_acc[((i_i_i * 4LL) + j_i_i)] = 0.0f;
              }
            }
          }
          for (long long k_o = 0LL; k_o < 5LL; ++k_o) {
            {
              __shared__ float B_cache_l[512];
              __shared__ float A_cache_l[512];
              __syncthreads();
              for (long long jd_f = (long long)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)); jd_f < 512LL; jd_f += 256) {
                const long long d1_r = (jd_f) % 8LL;
                const long long d0_r = jd_f / 8LL;
                A_cache_l[((d0_r * 8LL) + d1_r)] = A[(((d0_r * 40LL) + d1_r) + (k_o * 8LL))];
              }
              for (long long jd_f = (long long)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)); jd_f < 8LL; jd_f += 256) {
                const long long d0_r_1 = jd_f;
                for (long long d1_r_1 = 0LL; d1_r_1 < 32LL; ++d1_r_1) {
                  B_cache_l[((d0_r_1 * 64LL) + d1_r_1)] = B[((((d0_r_1 * 96LL) + d1_r_1) + (j_o * 64LL)) + (k_o * 768LL))];
                }
                for (long long d1_r_1 = 32LL; d1_r_1 < 32LL + 32LL; ++d1_r_1) {
                  if (((d1_r_1 + (j_o * 64LL)) < 96LL)) {
                    B_cache_l[((d0_r_1 * 64LL) + d1_r_1)] = B[((((d0_r_1 * 96LL) + d1_r_1) + (j_o * 64LL)) + (k_o * 768LL))];
                  }
                }
              }
              __syncthreads();
              #pragma unroll
              for (long long k_i = 0LL; k_i < 8LL; ++k_i) {
                #pragma unroll
                for (long long i_i_i = 0LL; i_i_i < 4LL; ++i_i_i) {
                  #pragma unroll
                  for (long long j_i_i = 0LL; j_i_i < 4LL; ++j_i_i) {
                    if ((((j_i_i + (j_i_o * 4LL)) + (j_o * 64LL)) < 96LL)) {
                      C_acc[((i_i_i * 4LL) + j_i_i)] = (C_acc[((i_i_i * 4LL) + j_i_i)] + (A_cache_l[(((i_i_i * 8LL) + (i_i_o * 32LL)) + k_i)] * B_cache_l[((j_i_i + (j_i_o * 4LL)) + (k_i * 64LL))]));
                    }
                  }
                }
              }
            }
          }
          #pragma unroll
          for (long long i_i_i = 0LL; i_i_i < 4LL; ++i_i_i) {
            #pragma unroll
            for (long long j_i_i = 0LL; j_i_i < 4LL; ++j_i_i) {
              if ((((j_i_i + (j_i_o * 4LL)) + (j_o * 64LL)) < 96LL)) {
                C[(((((i_i_i * 96LL) + (i_i_o * 384LL)) + j_i_i) + (j_i_o * 4LL)) + (j_o * 64LL))] = C_acc[((i_i_i * 4LL) + j_i_i)];
              }
            }
          }
        }
      }
    }
  }
}
