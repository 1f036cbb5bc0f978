// jitdl: jd_rowsum, 1 kernel(s) for sm_90
// launched in order on one stream:
//   jd_rowsum_k0<<<(9, 1, 1), (32, 1, 1)>>>
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

extern "C" __global__ void __launch_bounds__(32) jd_rowsum_k0(const float* __restrict__ X, float* __restrict__ S) {
  {
    const int i = (int)blockIdx.x;
    {
      __shared__ __align__(16) float X_cache_l[100];
      __syncthreads();
      for (int jd_f = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)); jd_f < 100; jd_f += 32) {
        const int d1_r = jd_f;
        X_cache_l[d1_r] = X[(d1_r + (i * 100))];
      }
      __syncthreads();
      {
        __align__(16) float S_acc[1];
        S_acc[0] = 0.0f;
        {
          const int k_i = (int)threadIdx.x;
          for (int k_o = 0; k_o < 3; ++k_o) {
            S_acc[0] = (S_acc[0] + X_cache_l[(k_i + (k_o * 32))]);
          }
          if (((k_i + 96) < 100)) {
            S_acc[0] = (S_acc[0] + X_cache_l[(k_i + 96)]);
          }
        }
        {
          float jd_v0 = S_acc[0];
          jd_v0 = (jd_v0 + __shfl_down_sync(0xffffffffu, jd_v0, 16, 32));
          jd_v0 = (jd_v0 + __shfl_down_sync(0xffffffffu, jd_v0, 8, 32));
          jd_v0 = (jd_v0 + __shfl_down_sync(0xffffffffu, jd_v0, 4, 32));
          jd_v0 = (jd_v0 + __shfl_down_sync(0xffffffffu, jd_v0, 2, 32));
          jd_v0 = (jd_v0 + __shfl_down_sync(0xffffffffu, jd_v0, 1, 32));
          S_acc[0] = __shfl_sync(0xffffffffu, jd_v0, 0, 32);
        }
        S[i] = S_acc[0];
      }
    }
  }
}
