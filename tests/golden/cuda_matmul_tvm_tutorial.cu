// jitdl: jd_matmul, 1 kernel(s) for sm_90
// launched in order on one stream:
//   jd_matmul_k0<<<(3, 2, 1), (8, 8, 1)>>>
// helpers: NumPy's semantics where C's differ
#define JD_INLINE static __device__ __forceinline__
template <typename T> JD_INLINE T jd_fmax(T a, T b) {   // NaN wins, max(-0, 0) = 0
  return a != a ? a : b != b ? b : a > b ? a : b > a ? b : signbit(a) ? b : a;
}
template <typename T> JD_INLINE T jd_fmin(T a, T b) {   // NaN wins, min(-0, 0) = -0
  return a != a ? a : b != b ? b : a < b ? a : b < a ? b : signbit(a) ? a : b;
}
template <typename T, typename U> JD_INLINE T jd_shl(T a, T b) {   // NumPy: 0 past the width
  return (unsigned long long)(long long)b < sizeof(T) * 8 ? (T)((U)a << (int)b) : (T)0;
}
template <typename T> JD_INLINE T jd_ashr(T a, T b) {   // -1 or 0 past the width
  return (unsigned long long)(long long)b < sizeof(T) * 8 ? (T)(a >> (int)b)
                                                          : (T)(a < 0 ? -1 : 0);
}
template <typename T> JD_INLINE T jd_lshr(T a, T b) {
  return (unsigned long long)b < sizeof(T) * 8 ? (T)(a >> (int)b) : (T)0;
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
template <typename T> JD_INLINE T jd_pow(T x, T y) {   // one correctly rounded operation
  if (y == (T)2) return x * x;                        // where there is one, as on the CPU
  if (y == (T)1) return x;
  if (y == (T)-1) return (T)1 / x;
  if (y == (T)0.5 && x > (T)0) return sqrt(x);
  return pow(x, y);
}
template <typename T> JD_INLINE T jd_idiv(T a, T b) {   // x // 0 == 0, floor division
  if (b == 0) return 0;
  if (b == (T)-1) return (T)(0ull - (unsigned long long)a);    // (INT_MIN // -1 wraps)
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
  typedef unsigned long long U;     // (products wrap, as NumPy's: no signed overflow)
  while (e > 0) { if (e & 1) r = (T)((U)r * (U)x); x = (T)((U)x * (U)x); e >>= 1; }
  return r;
}
template <typename T> JD_INLINE T jd_sign(T x) { return x < 0 ? (T)-1 : x > 0 ? (T)1 : x; }
template <typename T> JD_INLINE T jd_imin(T a, T b) { return a < b ? a : b; }
template <typename T> JD_INLINE T jd_imax(T a, T b) { return a > b ? a : b; }

extern "C" __global__ void __launch_bounds__(64) jd_matmul_k0(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C) {
  {
    const int i_o = (int)blockIdx.y;
    {
      const int j_o = (int)blockIdx.x;
      {
        const int i_i_o = (int)threadIdx.y;
        {
          const int j_i_o = (int)threadIdx.x;
          {
            __align__(16) float C_local_l[16];
            for (int i_r = 0; i_r < 4; ++i_r) {
              for (int j_r = 0; j_r < 4; ++j_r) {
                C_local_l[((i_r * 4) + j_r)] = 0.0f;
              }
            }
            {
              float jd_pf0[4];
              float jd_pf1[4];
              {
                const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 0;
                const int d1_o = (jd_f) % 8;
                const int d0_i = (jd_f / 8) % 4;
                const int d0_o = jd_f / 32;
                jd_pf0[0] = A[(((((d0_i * 48) + (d0_o * 192)) + d1_o) + (i_o * 1536)) + (0 * 8))];
              }
              {
                const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 64;
                const int d1_o = (jd_f) % 8;
                const int d0_i = (jd_f / 8) % 4;
                const int d0_o = jd_f / 32;
                jd_pf0[1] = A[(((((d0_i * 48) + (d0_o * 192)) + d1_o) + (i_o * 1536)) + (0 * 8))];
              }
              {
                const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 128;
                const int d1_o = (jd_f) % 8;
                const int d0_i = (jd_f / 8) % 4;
                const int d0_o = jd_f / 32;
                jd_pf0[2] = A[(((((d0_i * 48) + (d0_o * 192)) + d1_o) + (i_o * 1536)) + (0 * 8))];
              }
              {
                const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 192;
                const int d1_o = (jd_f) % 8;
                const int d0_i = (jd_f / 8) % 4;
                const int d0_o = jd_f / 32;
                jd_pf0[3] = A[(((((d0_i * 48) + (d0_o * 192)) + d1_o) + (i_o * 1536)) + (0 * 8))];
              }
              {
                const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 0;
                const int d1_i = (jd_f) % 4;
                const int d1_o_1 = (jd_f / 4) % 8;
                const int d0_o_1 = jd_f / 32;
                jd_pf1[0] = B[(((((d0_o_1 * 96) + d1_i) + (d1_o_1 * 4)) + (j_o * 32)) + (0 * 768))];
              }
              {
                const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 64;
                const int d1_i = (jd_f) % 4;
                const int d1_o_1 = (jd_f / 4) % 8;
                const int d0_o_1 = jd_f / 32;
                jd_pf1[1] = B[(((((d0_o_1 * 96) + d1_i) + (d1_o_1 * 4)) + (j_o * 32)) + (0 * 768))];
              }
              {
                const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 128;
                const int d1_i = (jd_f) % 4;
                const int d1_o_1 = (jd_f / 4) % 8;
                const int d0_o_1 = jd_f / 32;
                jd_pf1[2] = B[(((((d0_o_1 * 96) + d1_i) + (d1_o_1 * 4)) + (j_o * 32)) + (0 * 768))];
              }
              {
                const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 192;
                const int d1_i = (jd_f) % 4;
                const int d1_o_1 = (jd_f / 4) % 8;
                const int d0_o_1 = jd_f / 32;
                jd_pf1[3] = B[(((((d0_o_1 * 96) + d1_i) + (d1_o_1 * 4)) + (j_o * 32)) + (0 * 768))];
              }
              for (int k_o = 0; k_o < 6; ++k_o) {
                {
                  __shared__ __align__(16) float B_cache_l[256];
                  __shared__ __align__(16) float A_cache_l[256];
                  __syncthreads();
                  {
                    const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 0;
                    const int d1_o = (jd_f) % 8;
                    const int d0_i = (jd_f / 8) % 4;
                    const int d0_o = jd_f / 32;
                    A_cache_l[(((d0_i * 8) + (d0_o * 32)) + d1_o)] = jd_pf0[0];
                  }
                  {
                    const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 64;
                    const int d1_o = (jd_f) % 8;
                    const int d0_i = (jd_f / 8) % 4;
                    const int d0_o = jd_f / 32;
                    A_cache_l[(((d0_i * 8) + (d0_o * 32)) + d1_o)] = jd_pf0[1];
                  }
                  {
                    const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 128;
                    const int d1_o = (jd_f) % 8;
                    const int d0_i = (jd_f / 8) % 4;
                    const int d0_o = jd_f / 32;
                    A_cache_l[(((d0_i * 8) + (d0_o * 32)) + d1_o)] = jd_pf0[2];
                  }
                  {
                    const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 192;
                    const int d1_o = (jd_f) % 8;
                    const int d0_i = (jd_f / 8) % 4;
                    const int d0_o = jd_f / 32;
                    A_cache_l[(((d0_i * 8) + (d0_o * 32)) + d1_o)] = jd_pf0[3];
                  }
                  {
                    const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 0;
                    const int d1_i = (jd_f) % 4;
                    const int d1_o_1 = (jd_f / 4) % 8;
                    const int d0_o_1 = jd_f / 32;
                    B_cache_l[(((d0_o_1 * 32) + d1_i) + (d1_o_1 * 4))] = jd_pf1[0];
                  }
                  {
                    const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 64;
                    const int d1_i = (jd_f) % 4;
                    const int d1_o_1 = (jd_f / 4) % 8;
                    const int d0_o_1 = jd_f / 32;
                    B_cache_l[(((d0_o_1 * 32) + d1_i) + (d1_o_1 * 4))] = jd_pf1[1];
                  }
                  {
                    const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 128;
                    const int d1_i = (jd_f) % 4;
                    const int d1_o_1 = (jd_f / 4) % 8;
                    const int d0_o_1 = jd_f / 32;
                    B_cache_l[(((d0_o_1 * 32) + d1_i) + (d1_o_1 * 4))] = jd_pf1[2];
                  }
                  {
                    const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 192;
                    const int d1_i = (jd_f) % 4;
                    const int d1_o_1 = (jd_f / 4) % 8;
                    const int d0_o_1 = jd_f / 32;
                    B_cache_l[(((d0_o_1 * 32) + d1_i) + (d1_o_1 * 4))] = jd_pf1[3];
                  }
                  __syncthreads();
                  if (k_o + 1 < 6) {
                    {
                      const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 0;
                      const int d1_o = (jd_f) % 8;
                      const int d0_i = (jd_f / 8) % 4;
                      const int d0_o = jd_f / 32;
                      jd_pf0[0] = A[(((((d0_i * 48) + (d0_o * 192)) + d1_o) + (i_o * 1536)) + ((k_o + 1) * 8))];
                    }
                    {
                      const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 64;
                      const int d1_o = (jd_f) % 8;
                      const int d0_i = (jd_f / 8) % 4;
                      const int d0_o = jd_f / 32;
                      jd_pf0[1] = A[(((((d0_i * 48) + (d0_o * 192)) + d1_o) + (i_o * 1536)) + ((k_o + 1) * 8))];
                    }
                    {
                      const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 128;
                      const int d1_o = (jd_f) % 8;
                      const int d0_i = (jd_f / 8) % 4;
                      const int d0_o = jd_f / 32;
                      jd_pf0[2] = A[(((((d0_i * 48) + (d0_o * 192)) + d1_o) + (i_o * 1536)) + ((k_o + 1) * 8))];
                    }
                    {
                      const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 192;
                      const int d1_o = (jd_f) % 8;
                      const int d0_i = (jd_f / 8) % 4;
                      const int d0_o = jd_f / 32;
                      jd_pf0[3] = A[(((((d0_i * 48) + (d0_o * 192)) + d1_o) + (i_o * 1536)) + ((k_o + 1) * 8))];
                    }
                    {
                      const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 0;
                      const int d1_i = (jd_f) % 4;
                      const int d1_o_1 = (jd_f / 4) % 8;
                      const int d0_o_1 = jd_f / 32;
                      jd_pf1[0] = B[(((((d0_o_1 * 96) + d1_i) + (d1_o_1 * 4)) + (j_o * 32)) + ((k_o + 1) * 768))];
                    }
                    {
                      const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 64;
                      const int d1_i = (jd_f) % 4;
                      const int d1_o_1 = (jd_f / 4) % 8;
                      const int d0_o_1 = jd_f / 32;
                      jd_pf1[1] = B[(((((d0_o_1 * 96) + d1_i) + (d1_o_1 * 4)) + (j_o * 32)) + ((k_o + 1) * 768))];
                    }
                    {
                      const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 128;
                      const int d1_i = (jd_f) % 4;
                      const int d1_o_1 = (jd_f / 4) % 8;
                      const int d0_o_1 = jd_f / 32;
                      jd_pf1[2] = B[(((((d0_o_1 * 96) + d1_i) + (d1_o_1 * 4)) + (j_o * 32)) + ((k_o + 1) * 768))];
                    }
                    {
                      const int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) + 192;
                      const int d1_i = (jd_f) % 4;
                      const int d1_o_1 = (jd_f / 4) % 8;
                      const int d0_o_1 = jd_f / 32;
                      jd_pf1[3] = B[(((((d0_o_1 * 96) + d1_i) + (d1_o_1 * 4)) + (j_o * 32)) + ((k_o + 1) * 768))];
                    }
                  }
                  for (int k_i = 0; k_i < 8; ++k_i) {
                    {
                      __align__(16) float B_cache_cache_l[4];
                      __align__(16) float A_cache_cache_l[4];
                      for (int d0_r = 0; d0_r < 4; ++d0_r) {
                        A_cache_cache_l[d0_r] = A_cache_l[(((d0_r * 8) + (i_i_o * 32)) + k_i)];
                      }
                      for (int d1_r = 0; d1_r < 4; ++d1_r) {
                        B_cache_cache_l[d1_r] = B_cache_l[((d1_r + (j_i_o * 4)) + (k_i * 32))];
                      }
                      for (int i_r = 0; i_r < 4; ++i_r) {
                        for (int j_r = 0; j_r < 4; ++j_r) {
                          C_local_l[((i_r * 4) + j_r)] = (C_local_l[((i_r * 4) + j_r)] + (A_cache_cache_l[i_r] * B_cache_cache_l[j_r]));
                        }
                      }
                    }
                  }
                }
              }
            }
            for (int i_i_i = 0; i_i_i < 4; ++i_i_i) {
              for (int j_i_i = 0; j_i_i < 4; ++j_i_i) {
                C[((((((i_i_i * 96) + (i_i_o * 384)) + (i_o * 3072)) + j_i_i) + (j_i_o * 4)) + (j_o * 32))] = C_local_l[((i_i_i * 4) + j_i_i)];
              }
            }
          }
        }
      }
    }
  }
}
