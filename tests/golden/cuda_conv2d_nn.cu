// jitdl: jd_conv2d, 3 kernel(s) for sm_90
// launched in order on one stream:
//   jd_conv2d_k0<<<(2, 1, 1), (256, 1, 1)>>>
//   jd_conv2d_k1<<<(2, 1, 1), (256, 1, 1)>>>
//   jd_conv2d_k2<<<(2, 1, 1), (256, 1, 1)>>>
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

extern "C" __global__ void __launch_bounds__(256) jd_conv2d_k0(const float* __restrict__ X, float* __restrict__ conv2d_pad) {
  {
    const int idx0_idx1_f_idx2_f_idx3_f_o = (int)blockIdx.x;
    {
      const int idx0_idx1_f_idx2_f_idx3_f_i = (int)threadIdx.x;
      if (((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) < 504)) {
        conv2d_pad[(idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256))] = ((((((((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) / 12) % 14) >= 1) && ((((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) / 12) % 14) < 13)) && (((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) % 12) >= 1)) && (((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) % 12) < 11)) ? X[(((((((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) / 12) / 14) * 12) + ((((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) / 12) % 14) - 1)) * 10) + (((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) % 12) - 1))] : 0.0f);
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) jd_conv2d_k1(const float* __restrict__ W, const float* __restrict__ conv2d_pad, float* __restrict__ conv2d) {
  {
    const int idx0_idx1_f_idx2_f_idx3_f_o = (int)blockIdx.x;
    {
      const int idx0_idx1_f_idx2_f_idx3_f_i = (int)threadIdx.x;
      if (((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) < 480)) {
        {
          __align__(16) float conv2d_acc[1];
          conv2d_acc[0] = 0.0f;
          for (int k0 = 0; k0 < 3; ++k0) {
            for (int k1 = 0; k1 < 3; ++k1) {
              for (int k2 = 0; k2 < 3; ++k2) {
                conv2d_acc[0] = (conv2d_acc[0] + (conv2d_pad[((((((((((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) / 10) / 12) / 4) * 3) + k0) * 14) + ((((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) / 10) % 12) + k1)) * 12) + (((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) % 10) + k2))] * W[((((((((((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) / 10) / 12) % 4) * 3) + k0) * 3) + k1) * 3) + k2)]));
              }
            }
          }
          conv2d[(idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256))] = conv2d_acc[0];
        }
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) jd_conv2d_k2(const float* __restrict__ b, float* __restrict__ relu, const float* __restrict__ conv2d) {
  {
    const int idx0_idx1_f_idx2_f_idx3_f_o = (int)blockIdx.x;
    {
      const int idx0_idx1_f_idx2_f_idx3_f_i = (int)threadIdx.x;
      if (((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) < 480)) {
        relu[(idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256))] = (((conv2d[(idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256))] + b[((((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) / 10) / 12) % 4)]) < 0.0f) ? 0.0f : (conv2d[(idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256))] + b[((((idx0_idx1_f_idx2_f_idx3_f_i + (idx0_idx1_f_idx2_f_idx3_f_o * 256)) / 10) / 12) % 4)]));
      }
    }
  }
}
