// jitdl: jd_elementwise, 1 kernel(s) for sm_90
// launched in order on one stream:
//   jd_elementwise_k0<<<(1056, 1, 1), (256, 1, 1)>>>
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

extern "C" __global__ void __launch_bounds__(256) jd_elementwise_k0(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ elementwise, const long long A_n0) {
  for (long long idx0_o_o = 0LL; idx0_o_o < jd_idiv<long long>((jd_idiv<long long>((A_n0 + 255LL), 256LL) + 1055LL), 1056LL); ++idx0_o_o) {
    {
      const long long idx0_o_i = (long long)blockIdx.x;
      if (((idx0_o_i + (idx0_o_o * 1056LL)) < jd_idiv<long long>((A_n0 + 255LL), 256LL))) {
        {
          const long long idx0_i = (long long)threadIdx.x;
          if ((((idx0_i + (idx0_o_i * 256LL)) + (idx0_o_o * 270336LL)) < A_n0)) {
            elementwise[((idx0_i + (idx0_o_i * 256LL)) + (idx0_o_o * 270336LL))] = ((sqrtf(fabsf(A[((idx0_i + (idx0_o_i * 256LL)) + (idx0_o_o * 270336LL))])) * B[((idx0_i + (idx0_o_i * 256LL)) + (idx0_o_o * 270336LL))]) + 1.0f);
          }
        }
      }
    }
  }
}
