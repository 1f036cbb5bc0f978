"""Math routines emitted inline as LLVM IR: branch-free, so the loop vectoriser can widen
them (a libm call would stay scalar), and exact where NumPy is exact (integer floor
division and modulo, division by zero). Each takes scalars or vectors alike."""
from __future__ import annotations

import decimal
import hashlib
import math
import struct

from llvmlite import ir

from jitdl.codegen.lltypes import (F32, F64, I1, I32, I64, const, elem, lanes_const, like,
                                   poison, suffix)
from jitdl.ir.nodes import Intrin
from jitdl.target.cpu import host


# Intrin -> the MathLib method that writes it inline, for float32 and float64 alike
INLINE = {Intrin.EXP: "exp", Intrin.LOG: "log", Intrin.TANH: "tanh", Intrin.EXP2: "exp2",
          Intrin.EXPM1: "expm1", Intrin.LOG2: "log2", Intrin.LOG10: "log10",
          Intrin.LOG1P: "log1p", Intrin.SIN: "sin", Intrin.COS: "cos", Intrin.TAN: "tan",
          Intrin.ATAN: "atan", Intrin.ASIN: "asin", Intrin.ACOS: "acos", Intrin.ERF: "erf",
          Intrin.SINH: "sinh", Intrin.COSH: "cosh"}


def _hi_lo(value, bits=32):
    """A real number (a Decimal) as hi + lo: hi a double of `bits` significant bits, so
    that its product with a short number (an exponent, a float cut to 21 bits) is exact,
    and lo the double nearest the rest."""
    m, e = math.frexp(float(value))
    hi = math.ldexp(math.floor(m * 2.0 ** bits), e - bits)
    return hi, float(value - decimal.Decimal(hi))


with decimal.localcontext() as _ctx:
    _ctx.prec = 40
    _LN2 = decimal.Decimal(2).ln()
    LN2_HI, LN2_LO = _hi_lo(_LN2)
    IVLN2_HI, IVLN2_LO = _hi_lo(1 / _LN2)
    IVLN10_HI, IVLN10_LO = _hi_lo(1 / decimal.Decimal(10).ln())
    LOG10_2_HI, LOG10_2_LO = _hi_lo(decimal.Decimal(2).log10())
    LN2_LO_FULL = float(_LN2 - decimal.Decimal(float(_LN2)))    # ln 2 - double(ln 2)

# expm1(r) = r + r^2 q(r) on |r| <= ln2 / 2: q's Taylor coefficients 1/13! ... 1/2 (the
# first term left out is below 2^-56 of r there)
_EXPM1_Q = tuple(1.0 / math.factorial(k) for k in range(13, 1, -1))
# log((1 + s) / (1 - s)) = 2s + s R(s^2) on |s| <= 3 - 2 sqrt(2): R(z) = z (2/3 + 2z/5 + ...
# + 2z^8/19), the first term left out below 2^-56 of 2s there
_LOG_R = tuple(2.0 / k for k in range(19, 1, -2))
# float32 pow in float64 lanes (MathLib._pow32): |x| = 2^k z with z in [0.671875,
# 1.34375), cut into 16 pieces by the top 4 bits of z's offset from 0.671875 (piece 10
# centred on 1, where 1/c is 1 and log2 c 0, so that log2 z = r P(r) keeps its digits
# near 1); r = z / c - 1 by one fused multiply-add with 1/c rounded, log2 c of that
# rounded 1/c (|r| <= 1/32)
_PIECES_OFF = 0x3FE5800000000000
_PIECES_INVC = (1.4545454545454546, 1.391304347826087, 1.3333333333333333, 1.28,
               1.2307692307692308, 1.1851851851851851, 1.1428571428571428, 1.103448275862069,
               1.0666666666666667, 1.032258064516129, 1.0, 0.9411764705882353,
               0.8888888888888888, 0.8421052631578947, 0.8, 0.7619047619047619)
_POW32_LOGC = (-0.5405683813627028, -0.4764380439429871, -0.41503749927884376,
               -0.35614381022527536, -0.29956028185890793, -0.24511249783653138,
               -0.19264507794239583, -0.14201900487242786, -0.09310940439148145,
               -0.045803689613124754, 0.0, 0.08746284125033943, 0.16992500144231246,
               0.24792751344358557, 0.3219280948873623, 0.39231742277876036)
# log2(1 + r) / r on |r| <= 1/32 (mpmath chebyfit, relative error 2^-37.8)
_POW32_LOG2 = (-0.24071410072852772, 0.28884177476412304, -0.36067366298453307,
               0.4808982358376706, -0.721347520449768, 1.4426950408950046)
# 2^(i / 16), and (2^r - 1) / r on |r| <= 1/32 (chebyfit, relative error 2^-32)
_EXP2_16THS = tuple(2.0 ** (i / 16) for i in range(16))
_POW32_EXP2 = (0.009618279533832767, 0.05550541078283726, 0.24022650694073813,
               0.6931471804009951)
# float64 pow's log (MathLib._log64_tab), over _PIECES_OFF's 16 pieces: ln c of each
# piece's rounded 1 / c as hi + lo (mpmath), and (log(1 + q) - q + q^2 / 2 - q^3 / 3) /
# q^4 on |q| <= 1/32 (chebyfit, degree 8: 2^-54.7)
_LOG64_C_HI = (-0.3746934494414107, -0.3302416868705768, -0.28768207245178085,
               -0.2468600779315258, -0.20763936477824455, -0.16989903679539742,
               -0.13353139262452257, -0.09844007281325251, -0.06453852113757116,
               -0.03174869831458027, 0.0, 0.060624621816434854, 0.11778303565638351,
               0.17185025692665928, 0.2231435513142097, 0.2719337154836418)
_LOG64_C_LO = (-2.3831264386765673e-17, -1.6927253978145054e-17, -2.6071606164425637e-17,
               -6.678539813576451e-18, -1.2053243216686127e-17, 4.868008764439086e-19,
               3.664457663660086e-18, 4.439009633675136e-18, 6.470486661692933e-18,
               -3.0382263084680854e-18, 0.0, 2.6424025938726934e-18, -1.1971685747593662e-18,
               -6.022453821011369e-18, -9.091270597324798e-18, 7.833196376974436e-19)
_LOG64_G = (-0.08349051373626977, 0.09107836004418762, -0.09999988480812212,
            0.11111098706031192, -0.12500000003125947, 0.1428571428908063,
            -0.16666666666666438, 0.19999999999999754, -0.25)
_THIRD = (1 / 3, 1.850371707708594e-17)         # 1/3 as hi + lo
# float32 expm1 (in float64 lanes): expm1(r) = r + r^2 q(r) on |r| <= ln2 / 32, q's
# Taylor coefficients 1/5! ... 1/2 (the first term left out below 2^-37 of r)
_EXPM1_Q16 = tuple(1.0 / math.factorial(k) for k in range(5, 1, -1))
# sinh and cosh on |r| <= ln2 / 2 (z = r^2): cosh r = 1 + z C(z), sinh r = r + r z S(z),
# Taylor's coefficients (C: 1/14! ... 1/2!, S: 1/13! ... 1/3!; the first terms left out
# below 2^-61 of the value), and for float32 results C to 1/8!, S to 1/9! (2^-37)
_COSH_C = tuple(1.0 / math.factorial(k) for k in range(14, 1, -2))
_SINH_S = tuple(1.0 / math.factorial(k) for k in range(13, 2, -2))
_COSH_C32 = tuple(1.0 / math.factorial(k) for k in range(8, 1, -2))
_SINH_S32 = tuple(1.0 / math.factorial(k) for k in range(9, 2, -2))
# float64 bounds: exp(x) is inf above, 0 below (exp2 likewise at 1024 and -1075)
_EXP64_HI, _EXP64_LO = 709.782712893384, -745.1332191019412
_MIN_NORMAL64 = 2.2250738585072014e-308
_LN2_F32 = 0.693147182464599609375             # float32(ln 2) and the rest of ln 2
_LN2_F32_LO = float(_LN2 - decimal.Decimal(_LN2_F32))
_ROUND64 = 1.5 * 2.0 ** 52       # x + this, for |x| < 2^51, is round(x) in the low bits
_ROUND32 = 1.5 * 2.0 ** 23       # (float32's: for |x| < 2^22)


def _bits(v):
    return struct.unpack("<q", struct.pack("<d", v))[0]


def _bits32(v):
    return struct.unpack("<i", struct.pack("<f", v))[0]

# Cephes-style single-precision exp: x = n*ln2 + r, |r| <= ln2/2, e^r by a degree-6
# polynomial, 2^n built from exponent bits in two halves (so denormal results work).
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1)

# Cephes logf: log(1 + m) = m - m^2/2 + m^3 * P(m) for m in [sqrt(1/2) - 1, sqrt(2) - 1)
_LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
          1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
          3.3333331174e-1)
# Cephes tanhf: tanh(x) = x + x^3 * P(x^2) for |x| <= 0.625
_TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
           -3.33332819422e-1)

# Cephes tanh (double): tanh(x) = x + x^3 P(x^2) / Q(x^2) for |x| < 0.625 (Q monic)
_TANH64_P = (-9.64399179425052238628e-1, -9.92877231001918586564e1,
             -1.61468768441708447952e3)
_TANH64_Q = (1.0, 1.12811678491632931402e2, 2.23548839060100448583e3,
             4.84406305325125486048e3)

# sin and cos on [-pi/4, pi/4] (Cephes sinf / cosf): sin r = r + r^3 S(r^2),
# cos r = 1 - r^2 / 2 + r^4 C(r^2)
_SIN_P = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
_COS_P = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)
# pi / 2 as the sum of three float32s, for the reduction x - j pi/2 by fused multiply-adds
_PIO2 = (1.5707963705062866, -4.371138828673793e-08, -1.7151245100058819e-15)
# below this the three-part reduction is within an ulp; above it (and for inf, NaN) libm
_SINCOS_REDUCED = 65536.0

# atan t = t + t^3 P(t^2) / Q(t^2) for |t| <= 0.66 (Cephes atan, Q monic); float32 (Cephes
# atanf): t + t^3 P(t^2) for |t| <= tan(pi/8)
_ATAN64 = ((-8.750608600031904122785e-1, -1.615753718733365076637e1,
            -7.500855792314704667340e1, -1.228866684490136173410e2,
            -6.485021904942025371773e1),
           (1.0, 2.485846490142306297962e1, 1.650270098316988542046e2,
            4.328810604912902668951e2, 4.853903996359136964868e2,
            1.945506571482613964425e2))
_ATAN32 = ((8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1),)
# asin s = s + s^3 P(s^2) for |s| <= 1/2: float64, P of degree 13 within 2^-57.4 of (asin s
# - s) / s^3 (mpmath's chebyfit), no division; float32 (Cephes asinf)
_ASIN64 = ((0.02961201126495512, -0.01924167174674304, 0.019554513336123378,
            0.0030448799094556773, 0.009319560794767446, 0.009621842970100282,
            0.011566459612121669, 0.01396378001220357, 0.017352816540325496,
            0.02237215744350722, 0.03038194447553234, 0.044642857142551895,
            0.07500000000000118, 0.16666666666666666),)
_ASIN32 = ((4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2, 7.4953002686e-2,
            1.6666752422e-1),)
# tan r = r + r^3 P(r^2) / Q(r^2) for |r| <= pi/4 (Cephes tan, Q monic)
_TAN64 = ((-1.30936939181383777646e4, 1.15351664838587416140e6, -1.79565251976484877988e7),
          (1.0, 1.36812963470692954678e4, -1.32089234440210967447e6,
           2.50083801823357915839e7, -5.38695755929454629881e7))
# pi/2, pi/4 and pi as a double and the double nearest the rest; pi/2 in three doubles
_PIO2_HL = (1.5707963267948966, 6.123233995736766e-17)
_PIO4_HL = (0.7853981633974483, 3.061616997868383e-17)
_PI_HL = (3.141592653589793, 1.2246467991473532e-16)
_3PIO4_HL = (2.356194490192345, 9.184850993605148e-17)
_PIO2_64 = _PIO2_HL + (-1.4973849048591698e-33,)
# float64 sin, cos and tan reduce |x| below this by j pi/2 in three parts; beyond it (and
# inf, NaN) libm
_REDUCED64 = 1e9
# sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2) for |r| <= pi/4 (fdlibm's double
# kernels, the first term left out below 2^-58 of the result)
# float32 log2 in float32 lanes: log2(1 + f) = f / ln2 + f^2 R(f) on [sqrt(1/2) - 1,
# sqrt 2 - 1], R of degree 8 within 2^-24.2 of itself (Chebyshev interpolation against
# mpmath)
_LOG2_32R = (-0.11349202344802571, 0.18497874280124013, -0.18901662152732895,
             0.20470400371642905, -0.23988556115498555, 0.2885674134172937,
             -0.3606849008143184, 0.48089817565413173, -0.7213474867121143)
with decimal.localcontext() as _ctx:     # 1 / ln2 and log10(2) as float32 hi + lo
    _ctx.prec = 40
    _IVLN2_F32, _IVLN2_F32_LO = _hi_lo(1 / _LN2, bits=24)
    _LOG10_2_F32 = _hi_lo(decimal.Decimal(2).log10(), bits=24)
    _LN2_F32_SPLIT = _hi_lo(_LN2, bits=24)
# float32 tan in float32 lanes: tan r = r + r^3 Q(r^2) on |r| <= pi/4, Q of degree 6
# within 2^-25.5 of (tan r - r) / r^3 (Chebyshev interpolation in r^2 against mpmath)
_TAN32_F = (0.003863475935556415, 0.0011479742325494933, 0.009987834678275485,
            0.02161299828616649, 0.053995624699261106, 0.13333224912832362,
            0.33333334030002604)
_SIN64 = (1.58969099521155010221e-10, -2.50507602534068634195e-08, 2.75573137070700676789e-06,
          -1.98412698298579493134e-04, 8.33333333332248946124e-03, -1.66666666666666324348e-01)
_COS64 = (-1.13596475577881948265e-11, 2.08757232129817482790e-09, -2.75573143513906633035e-07,
          2.48015872894767294178e-05, -1.38888888888741095749e-03, 4.16666666666666019037e-02)
# erf by ranges of |x| (fdlibm's rational functions, numerator and denominator from the
# highest power): x + x P/Q(x^2) below 0.84375; ERX + P/Q(|x| - 1) below 1.25; 1 -
# exp(-x^2 - 0.5625 + P/Q(1/x^2)) / |x| below 1/0.35 and (another pair) up to 6, 1 beyond
_ERX = 8.45062911510467529297e-01
_ERF_SMALL = ((-2.37630166566501626084e-05, -5.77027029648944159157e-03,
               -2.84817495755985104766e-02, -3.25042107247001499370e-01,
               1.28379167095512558561e-01),
              (-3.96022827877536812320e-06, 1.32494738004321644526e-04,
               5.08130628187576562776e-03, 6.50222499887672944485e-02,
               3.97917223959155352819e-01, 1.0))
_ERF_MID = ((-2.16637559486879084300e-03, 3.54783043256182359371e-02,
             -1.10894694282396677476e-01, 3.18346619901161753674e-01,
             -3.72207876035701323847e-01, 4.14856118683748331666e-01,
             -2.36211856075265944077e-03),
            (1.19844998467991074170e-02, 1.36370839120290507362e-02,
             1.26171219808761642112e-01, 7.18286544141962662868e-02,
             5.40397917702171048937e-01, 1.06420880400844228286e-01, 1.0))
_ERFC_NEAR = ((-9.81432934416914548592e+00, -8.12874355063065934246e+01,
               -1.84605092906711035994e+02, -1.62396669462573470355e+02,
               -6.23753324503260060396e+01, -1.05586262253232909814e+01,
               -6.93858572707181764372e-01, -9.86494403484714822705e-03),
              (-6.04244152148580987438e-02, 6.57024977031928170135e+00,
               1.08635005541779435134e+02, 4.29008140027567833386e+02,
               6.45387271733267880336e+02, 4.34565877475229228821e+02,
               1.37657754143519042600e+02, 1.96512716674392571292e+01, 1.0))
_ERFC_FAR = ((-4.83519191608651397019e+02, -1.02509513161107724954e+03,
              -6.37566443368389627722e+02, -1.60636384855821916062e+02,
              -1.77579549177547519889e+01, -7.99283237680523006574e-01,
              -9.86494292470009928597e-03),
             (-2.24409524465858183362e+01, 4.74528541206955367215e+02,
              2.55305040643316442583e+03, 3.19985821950859553908e+03,
              1.53672958608443695994e+03, 3.25792512996573918826e+02,
              3.03380607434824582924e+01, 1.0))

# float32 erf by ranges of |x| (fitted by tools/fit_erf32.py: least squares iterated towards
# minimax, the coefficients then rounded to float32; highest power first): x + x P(x^2)
# below 0.84375 (P within 1.2e-10 relatively); erf(1) + M(|x| - 1) below 1.25 (M within
# 1.2e-10); 1 - exp(-x^2) R(v) up to 4, v = (|x| - 2.625) / 1.375 on [-1, 1] and R =
# erfc(x) exp(x^2) within 6.6e-9 relatively (erfc is at most 0.077 there, so its errors
# stay below a tenth of erf's ulp); 1 from 4 on, where erfc is below erf's half ulp
_ERF32_SMALL = (8.87632195e-05, -0.000825226074, 0.00520988926, -0.0268626828, 0.112837501,
                -0.376126379, 0.128379166)
_ERF32_MID = (0.0130948387, 0.00453556981, -0.0690918639, 0.0691825226, 0.138367891,
              -0.415107459, 0.415107489, 1.34711584e-08)
_ERF1_F32 = 0.842700779                        # erf(1) in float32
_ERFC32_SCALED = (-8.51761251e-06, 2.62243448e-05, -5.15711981e-05, 0.000143054727,
                  -0.000419488264, 0.0011256116, -0.00291451765, 0.0073416559,
                  -0.0178720616, 0.0418870859, -0.0941455737, 0.201887548)


def _split(pair, ty):
    """A constant given as a double and the double nearest its rest, as (hi, lo) for ty:
    float32 takes hi rounded to float32 and the rest after it."""
    if elem(ty) != F32:
        return pair
    hi = struct.unpack("f", struct.pack("f", pair[0]))[0]
    return hi, (pair[0] - hi) + pair[1]


def _joined(b, *incoming):
    """The value of whichever (value, block) pair control came from: a phi."""
    out = b.phi(incoming[0][0].type)
    for v, block in incoming:
        out.add_incoming(v, block)
    return out


class MathLib:
    def __init__(self, gen):
        self.gen = gen

    def _intr(self, b, name, ty, *args):
        fn = self.gen.declare(f"{name}.{suffix(ty)}", ty, [a.type for a in args])
        return b.call(fn, list(args))

    def _madd(self, b, x, y, z):
        """x * y + z, one fused multiply-add where the target has one (llvm.fmuladd)."""
        return self._intr(b, "llvm.fmuladd", x.type, x, y, z)

    def sign_bit(self, b, x):
        """Whether x's sign bit is set (-0, -inf and negative NaNs too), lane by lane."""
        ints = like(I32 if elem(x.type) == F32 else I64, x)
        return b.icmp_signed("<", b.bitcast(x, ints), const(ints, 0))

    def _horner(self, b, coefs, x):
        p = const(x.type, coefs[0])
        for coef in coefs[1:]:
            p = self._madd(b, p, x, const(x.type, coef))
        return p

    def _estrin(self, b, coefs, x):
        """The polynomial _horner computes (coefficients from the highest degree), with
        a dependency chain of about log2(degree) fused multiply-adds instead of degree:
        pairs c0 + c1 x, then pairs of those with x^2, x^4, ..."""
        terms = [const(x.type, v) for v in reversed(coefs)]          # (lowest first)
        power = x
        while len(terms) > 1:
            pairs = [self._madd(b, terms[i + 1], power, terms[i])
                     for i in range(0, len(terms) - 1, 2)]
            terms = pairs + ([terms[-1]] if len(terms) % 2 else [])
            power = b.fmul(power, power)
        return terms[0]

    def exp(self, b, x, base2=False):
        """Cephes-style expf for float32 (exp2f with base2; within an ulp): x = n ln2 + r
        (n + r / ln2), e^r by a polynomial, 2^n in two halves (denormal results work).
        x is clamped to a range whose ends overflow to inf and round to 0 through the
        formula itself, and a NaN passes through it, so no select fixes the edges (a
        third fewer instructions than clamping with maxnum / minnum and selecting inf, 0
        and NaN afterwards). float64: _exp64."""
        ty = x.type
        if elem(ty) != F32:
            return self._exp64(b, x, base2)
        i32 = like(I32, x)
        c = lambda v: const(ty, v)  # noqa: E731
        # (2^128 overflows; exp(-104) and 2^-151 are below half the least denormal)
        hi, lo = (128.5, -151.0) if base2 else (89.0, -104.0)
        xc = b.select(b.fcmp_ordered("<", x, c(lo)), c(lo), x)          # (NaN kept)
        xc = b.select(b.fcmp_ordered(">", xc, c(hi)), c(hi), xc)
        # n rounded to an integer by adding 1.5 * 2^23, which leaves it in the low bits (no
        # float -> int conversion, whose result for a NaN would be poison)
        shifted = b.fadd(xc if base2 else b.fmul(xc, c(1.4426950408889634)), c(_ROUND32))
        n = b.fsub(shifted, c(_ROUND32))
        if base2:
            t = b.fsub(xc, n)                           # (exact)
            r = self._madd(b, t, c(_LN2_F32), b.fmul(t, c(_LN2_F32_LO)))
        else:
            r = self._madd(b, n, c(-0.693359375), xc)
            r = self._madd(b, n, c(2.12194440e-4), r)
        p = self._horner(b, _EXP_P, r)
        y = b.fadd(self._madd(b, p, b.fmul(r, r), r), c(1.0))
        ni = b.sub(b.bitcast(shifted, i32), const(i32, _bits32(_ROUND32)))
        n1 = b.ashr(ni, const(i32, 1))
        n2 = b.sub(ni, n1)
        return b.fmul(b.fmul(y, self._pow2(b, n1, ty)), self._pow2(b, n2, ty))

    def _exp_edges(self, b, x, y, lo, hi):
        """An exponential y of x made inf above hi, 0 below lo (exp(-inf) = 0), NaN kept."""
        c = lambda v: const(x.type, v)  # noqa: E731
        y = b.select(b.fcmp_ordered(">", x, c(hi)), c(math.inf), y)
        y = b.select(b.fcmp_ordered("<", x, c(lo)), c(0.0), y)
        return b.select(b.fcmp_unordered("uno", x, x), x, y)

    def log(self, b, x):
        """Cephes logf for float32 (within 2 ulp): x = m * 2^e with m in [sqrt(1/2),
        sqrt(2)), log(m) by a degree-9 polynomial in m - 1; denormals are scaled first.
        float64: _log64."""
        ty = x.type
        if elem(ty) != F32:
            return self._log64(b, x, "e")
        i32 = like(I32, x)
        c = lambda v: const(ty, v)  # noqa: E731
        tiny = b.fcmp_ordered("<", x, c(1.1754943508222875e-38))       # below normal
        xs = b.select(tiny, b.fmul(x, c(8388608.0)), x)
        bits = b.bitcast(xs, i32)
        e = b.sub(b.and_(b.lshr(bits, const(i32, 23)), const(i32, 0xFF)), const(i32, 126))
        e = b.sub(e, b.select(tiny, const(i32, 23), const(i32, 0)))
        m = b.bitcast(b.or_(b.and_(bits, const(i32, 0x007FFFFF)), const(i32, 0x3F000000)), ty)
        small = b.fcmp_ordered("<", m, c(0.707106781186547524))
        e = b.sub(e, b.zext(small, i32))
        m = b.fsub(b.select(small, b.fadd(m, m), m), c(1.0))
        z = b.fmul(m, m)
        p = self._horner(b, _LOG_P, m)
        ef = b.sitofp(e, ty)
        y = self._madd(b, ef, c(-2.12194440e-4), b.fmul(b.fmul(p, m), z))
        y = self._madd(b, z, c(-0.5), y)
        return self._log_edges(b, x, self._madd(b, ef, c(0.693359375), b.fadd(m, y)))

    def _log_edges(self, b, x, y, lazy=False):
        """A logarithm y of x made inf at inf, -inf at +-0, NaN below 0, NaN kept. lazy: for
        a vector with such a lane only (_patch), where the routine is long enough that a
        branch costs less than the selects (pow, log1p: 7-10% faster at 1000 elements;
        log and log2 5% slower)."""
        c = lambda v: const(x.type, v)  # noqa: E731

        def edges():
            v = b.select(b.fcmp_ordered("==", x, c(math.inf)), c(math.inf), y)
            v = b.select(b.fcmp_ordered("==", x, c(0.0)), c(-math.inf), v)
            v = b.select(b.fcmp_ordered("<", x, c(0.0)), c(math.nan), v)
            return b.select(b.fcmp_unordered("uno", x, x), x, v)
        if not lazy:
            return edges()
        inside = b.and_(b.fcmp_ordered(">", x, c(0.0)), b.fcmp_ordered("<", x, c(math.inf)))
        return self._patch(b, b.not_(inside), y, edges)

    def exp2(self, b, x):
        return self.exp(b, x, base2=True)

    def expm1(self, b, x):
        if elem(x.type) == F32:
            return self._in_double(b, x, lambda v: self._expm1_of_float32(b, v))
        return self._expm1_64(b, x)

    def log2(self, b, x):
        return self._log2_32(b, x) if elem(x.type) == F32 else self._log64(b, x, "2")

    def _log2_32(self, b, x, scale=None, extra=None):
        """float32 log2 in float32 lanes, within an ulp: x = 2^e (1 + f) with 1 + f in
        [sqrt(1/2), sqrt 2) (denormals scaled first), f / ln2 as hi + lo by a fused
        multiply-add and a split 1 / ln2, f^2 R(f) (_LOG2_32R) joining lo, e + hi summed
        exactly, one rounding at the end: log2 of a power of two is exact; _log_edges.
        `scale` (hi, lo), a constant split in two: log2(x) times it (log10 x as log2(x)
        log10(2)), the product's error kept. `extra`, a term below the result's ulp (or
        one of the low part's size), joins the low part before the one rounding."""
        ty = x.type
        i32 = like(I32, x)
        c = lambda v: const(ty, v)  # noqa: E731
        k = lambda v: const(i32, v)  # noqa: E731
        fma = lambda *a: self._intr(b, "llvm.fma", ty, *a)  # noqa: E731
        tiny = b.fcmp_ordered("<", x, c(1.1754943508222875e-38))
        xs = b.select(tiny, b.fmul(x, c(8388608.0)), x)
        sqrt_half = 0x3F3504F3
        ix = b.add(b.bitcast(xs, i32), k(0x3F800000 - sqrt_half))
        e = b.sub(b.ashr(ix, k(23)), k(127))
        e = b.sitofp(b.sub(e, b.select(tiny, k(23), k(0))), ty)
        f = b.fsub(b.bitcast(b.add(b.and_(ix, k(0x7FFFFF)), k(sqrt_half)), ty), c(1.0))
        hi = b.fmul(f, c(_IVLN2_F32))
        lo = self._madd(b, b.fmul(f, f), self._horner(b, _LOG2_32R, f),
                        self._madd(b, f, c(_IVLN2_F32_LO), fma(f, c(_IVLN2_F32), b.fneg(hi))))
        t = b.fadd(e, hi)
        lo = b.fadd(b.fadd(b.fsub(e, t), hi), lo)       # (|hi| < 1 <= |e| or e = 0: exact)
        if scale is not None:
            s_hi, s_lo = c(scale[0]), c(scale[1])
            p = b.fmul(t, s_hi)
            lo = fma(lo, s_hi, fma(t, s_lo, fma(t, s_hi, b.fneg(p))))
            t = p
        lo = lo if extra is None else b.fadd(lo, extra)
        return self._log_edges(b, x, b.fadd(t, lo), lazy=extra is not None)   # (log1p)

    def log10(self, b, x):
        return self._log2_32(b, x, _LOG10_2_F32) if elem(x.type) == F32 else \
            self._log64(b, x, "10")

    def log1p(self, b, x):
        if elem(x.type) == F32:
            return self._log1p_32(b, x)
        return self._log1p64(b, x)

    def _log1p_32(self, b, x):
        """float32 log1p in float32 lanes: u = 1 + x rounded, its rounding error e exact
        (a two-sum), log(u) by _log2_32 scaled by ln 2 (double-float), plus e / u (below
        u's ulp: one float32 division); -inf at -1, NaN below, +-0 kept."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        fabs = lambda v: self._intr(b, "llvm.fabs", ty, v)  # noqa: E731
        u = b.fadd(c(1.0), x)
        err = b.select(b.fcmp_ordered("<=", fabs(x), c(1.0)), b.fadd(b.fsub(c(1.0), u), x),
                       b.fadd(b.fsub(x, u), c(1.0)))
        ok = b.and_(b.fcmp_ordered(">", u, c(0.0)), b.fcmp_ordered("<", u, c(math.inf)))
        err = b.select(ok, b.fdiv(err, u), c(0.0))
        y = self._log2_32(b, u, _LN2_F32_SPLIT, extra=err)
        return b.select(b.fcmp_ordered("==", x, c(0.0)), x, y)

    def _expm1_of_float32(self, b, x):
        """expm1 of float64 lanes x widened from float32, within 2^-36 of the true value
        (float32's rounding then within half an ulp and a little): x = n ln2 / 16 + r
        (|r| <= ln2 / 32, one fused multiply-add: its error stays below 2^-46), expm1(r) =
        r + r^2 Q(r) with Q Taylor's to r^3 / 120, and with s = 2^(n // 16) 2^(n % 16 / 16)
        (_lookup16), s expm1(r) + (s - 1) by one fused multiply-add; x clamped to [-30,
        89] (the results there round to -1 and overflow float32); +-0 and NaN kept."""
        ty = x.type
        i64 = like(I64, x)
        c = lambda v: const(ty, v)  # noqa: E731
        xc = self._intr(b, "llvm.minnum", ty, self._intr(b, "llvm.maxnum", ty, x, c(-30.0)),
                        c(89.0))
        shifted = b.fadd(b.fmul(xc, c(16 / math.log(2.0))), c(_ROUND64))
        n = b.sub(b.bitcast(shifted, i64), const(i64, _bits(_ROUND64)))
        r = self._intr(b, "llvm.fma", ty, b.fsub(shifted, c(_ROUND64)), c(-math.log(2.0) / 16),
                       xc)
        em = self._madd(b, b.fmul(r, r), self._estrin(b, _EXPM1_Q16, r), r)
        s = self._exp2_sixteenths(b, n)
        y = self._madd(b, s, em, b.fsub(s, c(1.0)))
        y = b.select(b.fcmp_ordered("==", x, c(0.0)), x, y)
        return b.select(b.fcmp_unordered("uno", x, x), x, y)

    def sinh(self, b, x):
        return self._sinh_cosh(b, x, cosh=False)

    def cosh(self, b, x):
        return self._sinh_cosh(b, x, cosh=True)

    def _sinh_cosh(self, b, x, cosh):
        """sinh or cosh without a second exponential or a division: |x| = n ln2 + r (|r| <=
        ln2 / 2), and with h = 2^(n-1), t = 2^-2n, sinh |x| = h ((1 - t) cosh r + (1 + t)
        sinh r) and cosh |x| = h ((1 + t) cosh r + (1 - t) sinh r), cosh r and sinh r by
        Taylor polynomials in r^2. At n = 0, 1 - t is 0 and sinh r comes out as itself, so a
        small x keeps its digits. float32 in float64 lanes; float64 with the leading terms
        (1 -+ t) + (1 +- t) r_hi summed exactly and the rest (r's low part too) added once,
        within about half an ulp. sinh takes x's sign (-0 too); inf past the range (2^(n-1)
        applied in two halves), NaN kept."""
        ty = x.type
        f32 = elem(ty) == F32
        d = like(F64, x)
        c = lambda v: const(d, v)  # noqa: E731
        i64 = like(I64, x)
        xd = b.fpext(x, d) if f32 else x
        ax = self._intr(b, "llvm.fabs", d, xd)
        if f32:
            # (n <= 145, so 2^(n-1) and 2^(-n-1) are normal doubles: their exponent fields
            # sum to 2044, so the second is one subtraction from the first; r in one fused
            # multiply-add, whose 2^-47 is far below float32's half ulp)
            shifted = b.fadd(b.fmul(self._intr(b, "llvm.minnum", d, ax, c(100.0)),
                                    c(1 / math.log(2.0))), c(_ROUND64))
            n = b.fsub(shifted, c(_ROUND64))
            r = self._intr(b, "llvm.fma", d, n, c(-math.log(2.0)), ax)
            z = b.fmul(r, r)
            ch = self._madd(b, z, self._estrin(b, _COSH_C32, z), c(1.0))
            sh = self._madd(b, b.fmul(r, z), self._estrin(b, _SINH_S32, z), r)
            up = b.shl(b.add(b.bitcast(shifted, i64), const(i64, 1022)), const(i64, 52))
            down = b.bitcast(b.sub(const(i64, 2044 << 52), up), d)         # h t
            up = b.bitcast(up, d)                                           # h
            kc, ks = b.fadd(up, down), b.fsub(up, down)
            kc, ks = (kc, ks) if cosh else (ks, kc)
            y = self._madd(b, kc, ch, b.fmul(ks, sh))
        else:
            n, r_hi, r_lo = self._exp64_reduce(b, ax, 0.0, 711.0)
            r = b.fadd(r_hi, r_lo)      # (r_lo, n times ln2's low part, is not below
            z = b.fmul(r, r)            # r_hi's ulp: the polynomials take the sum)
            even = b.fmul(z, self._estrin(b, _COSH_C, z))                  # cosh r - 1
            odd = b.fmul(b.fmul(r, z), self._estrin(b, _SINH_S, z))        # sinh r - r
            tn = b.select(b.icmp_signed(">", n, const(i64, 60)), const(i64, 60), n)
            t = self._pow2(b, b.neg(b.add(tn, tn)), d)
            t = t if cosh else b.fneg(t)
            kc, ks = b.fadd(c(1.0), t), b.fsub(c(1.0), t)   # (rounded once 2n > 53:
            p = b.fmul(ks, r_hi)                            # what they lost joins lo)
            s = b.fadd(kc, p)                   # |kc| >= |p| (or kc = 0): the error exact
            lo = b.fadd(b.fadd(b.fsub(kc, s), p),
                        self._intr(b, "llvm.fma", d, ks, r_hi, b.fneg(p)))
            lo = b.fadd(lo, self._madd(b, b.fsub(b.fsub(c(1.0), ks), t), r_hi,
                                       b.fadd(b.fsub(c(1.0), kc), t)))
            lo = b.fadd(lo, self._madd(b, kc, even, b.fmul(ks, b.fadd(r_lo, odd))))
            n1, n2 = self._halves(b, b.sub(n, const(i64, 1)))
            y = b.fmul(b.fmul(b.fadd(s, lo), self._pow2(b, n1, d)), self._pow2(b, n2, d))
        if not cosh:
            y = self._intr(b, "llvm.copysign", d, y, xd)
        if f32:
            y = b.fptrunc(y, ty)
        return b.select(b.fcmp_unordered("uno", x, x), x, y)

    def pow(self, b, x, y):
        """x ** y (_pow_general), except that a vector whose lanes are all x ** 0.5 of a
        positive x, all x ** 2 or all x ** -1 is that one operation alone, exp and log
        skipped (a scalar exponent: jd.numpy.power(a, 0.5) of 1000 float64 8.2 -> 1.4 us
        on the 2-core Xeon, NumPy's SVML pow 3.2; power(a, -1) of 10^6 3.1 -> 0.36 ms);
        the same results as the general path's."""
        if not isinstance(x.type, ir.VectorType):
            return self._pow_general(b, x, y)
        c = lambda v: const(x.type, v)  # noqa: E731
        root = b.and_(b.fcmp_ordered("==", y, c(0.5)), b.fcmp_ordered(">", x, c(0.0)))
        general = lambda: self._pow_general(b, x, y)  # noqa: E731
        inverse = lambda: self._all_or(  # noqa: E731
            b, b.fcmp_ordered("==", y, c(-1.0)), lambda: b.fdiv(c(1.0), x), general)
        return self._all_or(
            b, root, lambda: self._intr(b, "llvm.sqrt", x.type, x),
            lambda: self._all_or(b, b.fcmp_ordered("==", y, c(2.0)), lambda: b.fmul(x, x),
                                 inverse))

    def _all_or(self, b, mask, fast, slow):
        """fast() where every lane of vector `mask` holds, else slow(): a branch."""
        fn = self.gen.declare(f"llvm.vector.reduce.and.{suffix(mask.type)}", I1, [mask.type])
        with b.if_else(b.call(fn, [mask])) as (then, otherwise):
            with then:
                done = (fast(), b.block)
            with otherwise:
                rest = (slow(), b.block)
        return _joined(b, done, rest)

    def _pow_general(self, b, x, y):
        """x ** y as exp(y log|x|), with C's special cases (_pow_cases). float64: log|x| as
        a double-double within about 2^-64 and y log|x| as one too, so that the result is
        within an ulp however large y log|x| (up to 745) is. float32: all in float64,
        whose error stays far below float32's half ulp, without a division (_pow32). The
        powers whose correctly rounded result is one operation are that operation
        (_pow_exact)."""
        ty = x.type
        fabs = lambda v: self._intr(b, "llvm.fabs", v.type, v)  # noqa: E731
        if elem(ty) == F32:
            return self._pow_exact(b, x, y, self._pow_cases(b, x, y, self._pow32(b, x, y)))
        lh, ll = self._log64_tab(b, fabs(x))
        t = b.fmul(y, lh)
        t_lo = b.fadd(self._intr(b, "llvm.fma", ty, y, lh, b.fneg(t)), b.fmul(y, ll))
        t_lo = b.select(b.fcmp_ordered("<", fabs(t), const(ty, math.inf)), t_lo,
                        const(ty, 0.0))                 # (t infinite or NaN: no low part)
        return self._pow_exact(b, x, y, self._pow_cases(b, x, y, self._exp64(b, t, extra=t_lo)))

    def _pow32(self, b, x, y):
        """|x| ** y of float32 lanes, computed in float64 lanes as 2^(y log2|x|) from two
        tables of 16 (_lookup16), within 2^-30 of the true value (float32's rounding then
        within 0.52 ulp): log2|x| = k + log2 c + r P(r) (_PIECES_OFF), t = y log2|x| = n / 16
        + r2 (|r2| <= 1/32, t clamped to [-200, 200], beyond float32's range either way),
        2^t = 2^(n // 16) 2^(n % 16 / 16) (1 + r2 Q(r2)). Subnormal float32s are normal
        doubles; 0, inf and NaN by _log_edges, NaN kept."""
        ty = x.type
        d, i64 = like(F64, x), like(I64, x)
        c = lambda v: const(d, v)  # noqa: E731
        ci = lambda v: const(i64, v)  # noqa: E731
        ax = self._intr(b, "llvm.fabs", d, b.fpext(x, d))
        k, piece, z = self._pieces(b, b.bitcast(ax, i64))
        r = self._intr(b, "llvm.fma", d, z, self._lookup16(b, _PIECES_INVC, piece), c(-1.0))
        head = b.fadd(b.sitofp(k, d), self._lookup16(b, _POW32_LOGC, piece))
        log2 = self._madd(b, r, self._estrin(b, _POW32_LOG2, r), head)
        t = b.fmul(b.fpext(y, d), self._log_edges(b, ax, log2, lazy=True))
        tc = self._intr(b, "llvm.minnum", d, self._intr(b, "llvm.maxnum", d, t, c(-200.0)),
                        c(200.0))
        shift = 1.5 * 2.0 ** 48                 # (its ulp is 1/16: t rounded to sixteenths)
        shifted = b.fadd(tc, c(shift))
        r2 = b.fsub(tc, b.fsub(shifted, c(shift)))                          # (exact)
        n = b.sub(b.bitcast(shifted, i64), ci(_bits(shift)))
        scale = self._exp2_sixteenths(b, n)
        p = self._madd(b, scale, b.fmul(r2, self._estrin(b, _POW32_EXP2, r2)), scale)
        return b.fptrunc(b.select(b.fcmp_unordered("uno", t, t), t, p), ty)

    def _pieces(self, b, bits):
        """(k, piece, z) of float64 lanes x > 0 given as their bits (i64 lanes), x = 2^k z
        with z in [0.671875, 1.34375) and `piece` (0-15) z's sixteenth of that octave
        (_PIECES_OFF); garbage for 0, inf and NaN, which callers replace."""
        i64 = bits.type
        top = b.sub(bits, const(i64, _PIECES_OFF))
        k = b.ashr(top, const(i64, 52))
        piece = b.and_(b.lshr(top, const(i64, 48)), const(i64, 15))
        return k, piece, b.bitcast(b.sub(bits, b.shl(k, const(i64, 52))), like(F64, bits))

    def _exp2_sixteenths(self, b, n):
        """2^(n / 16) of integer lanes n (i64; the result a normal double), as 2^(n // 16)
        times _EXP2_16THS[n % 16]."""
        i64 = n.type
        frac = self._lookup16(b, _EXP2_16THS, b.and_(n, const(i64, 15)))
        return b.bitcast(b.add(b.bitcast(frac, i64), b.shl(b.ashr(n, const(i64, 4)),
                                                           const(i64, 52))), like(F64, n))

    def _lookup16(self, b, table, i):
        """table[i] (a tuple of 16 doubles) at i64 lanes i in [0, 16): on an AVX-512 host
        one two-register permute (vpermi2pd) per 8 lanes, else a load per lane from the
        table as a constant array."""
        ty = i.type
        if isinstance(ty, ir.VectorType) and host().vector_bytes == 64:     # (avx512f)
            v8, i8 = ir.VectorType(F64, 8), ir.VectorType(I64, 8)
            fn = self.gen.declare("llvm.x86.avx512.vpermi2var.pd.512", v8, [v8, i8, v8])
            lo, hi = lanes_const(F64, table[:8]), lanes_const(F64, table[8:])
            n = ty.count
            parts = []
            for start in range(0, n, 8):      # (a last part of fewer lanes: the last lane
                lanes = [min(start + j, n - 1) for j in range(8)]        # repeated)
                part = b.shuffle_vector(i, poison(ty), lanes_const(I32, lanes))
                parts.append(b.call(fn, [lo, part, hi]))
            while len(parts) > 1:
                if len(parts) % 2:
                    parts.append(parts[-1])
                w = parts[0].type.count
                parts = [b.shuffle_vector(parts[j], parts[j + 1],
                                          lanes_const(I32, list(range(2 * w))))
                         for j in range(0, len(parts), 2)]
            v = parts[0]
            if v.type.count != n:
                v = b.shuffle_vector(v, poison(v.type), lanes_const(I32, list(range(n))))
            return v
        digest = hashlib.sha256(struct.pack(f"<{len(table)}d", *table)).hexdigest()
        name = f"jd_table_{digest[:16]}"
        arr = self.gen.module.globals.get(name)
        if arr is None:
            aty = ir.ArrayType(F64, len(table))
            arr = ir.GlobalVariable(self.gen.module, aty, name=name)
            arr.initializer = ir.Constant(aty, list(table))
            arr.global_constant, arr.linkage = True, "internal"
        if not isinstance(ty, ir.VectorType):
            return b.load(b.gep(arr, [const(I64, 0), i]))
        v = poison(like(F64, i))
        for j in range(ty.count):
            lane = b.extract_element(i, const(I32, j))
            v = b.insert_element(v, b.load(b.gep(arr, [const(I64, 0), lane])), const(I32, j))
        return v

    def _pow_exact(self, b, x, y, r):
        """r, except x ** 1 = x, x ** 2 = x * x, x ** -1 = 1 / x and, for x > 0, x ** 0.5
        = sqrt(x): C's pow (glibc's, so NumPy's) is correctly rounded there, and so is
        the one operation, where exp(y log|x|) may be an ulp off (0.1 ** 2)."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        r = b.select(b.fcmp_ordered("==", y, c(2.0)), b.fmul(x, x), r)
        r = b.select(b.fcmp_ordered("==", y, c(1.0)), x, r)
        # (a division and a square root, the costliest vector instructions, run only for
        # a vector with such a lane)
        r = self._patch(b, b.fcmp_ordered("==", y, c(-1.0)), r, lambda: b.fdiv(c(1.0), x))
        root = b.and_(b.fcmp_ordered("==", y, c(0.5)), b.fcmp_ordered(">", x, c(0.0)))
        return self._patch(b, root, r, lambda: self._intr(b, "llvm.sqrt", ty, x))

    def _pow_cases(self, b, x, y, r):
        """r = exp(y log|x|) made C's pow: 1 for y = 0 and for x = 1 (even NaN) and for
        x = -1 with y = +-inf; negative for a negative x (-0 and -inf too) to an odd
        integer power, NaN for a finite negative x to a non-integer one."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        floor = lambda v: self._intr(b, "llvm.floor", ty, v)  # noqa: E731
        ax = self._intr(b, "llvm.fabs", ty, x)

        def ones():
            one = b.or_(b.fcmp_ordered("==", y, c(0.0)), b.fcmp_ordered("==", x, c(1.0)))
            one = b.or_(one, b.and_(b.fcmp_ordered("==", ax, c(1.0)), b.fcmp_ordered(
                "==", self._intr(b, "llvm.fabs", ty, y), c(math.inf))))
            return b.select(one, c(1.0), r)

        def negative():         # (the lanes of x with its sign bit set)
            half = b.fmul(y, c(0.5))
            whole = b.fcmp_ordered("==", floor(y), y)
            odd = b.and_(whole, b.fcmp_ordered("!=", floor(half), half))
            v = b.select(odd, b.fneg(r), r)
            finite = b.and_(b.fcmp_ordered("<", x, c(0.0)), b.fcmp_ordered("<", ax, c(math.inf)))
            return b.select(b.and_(finite, b.fcmp_unordered("!=", floor(y), y)), c(math.nan),
                            v)
        # (bases are rarely negative: that work runs only for a vector with such a lane)
        r = self._patch(b, self.sign_bit(b, x), r, negative)
        # (where the result is 1, exp(y log|x|) is exactly 1 already, or NaN: y = 0 with x
        # 0, inf or NaN, x = +-1 with y inf or NaN)
        return self._patch(b, b.fcmp_unordered("uno", r, r), r, ones)

    def _log64_tab(self, b, x):
        """log x of a float64 x >= 0 as hi + lo, within about 2^-64 of it (relative: pow
        multiplies it by y up to 745 / |log x|): x = 2^k z over _PIECES_OFF's 16 pieces
        (denormals scaled first), z / c = 1 + q + q_lo with 1 / c from a table (its
        product's rounding error by a fused multiply-add, q exact), log(1 + q) = q - q^2 / 2
        + q^3 / 3 + q^4 G(q) with the first three terms a double-double (the cubic term
        rounded alone left 2^-64.6 of log x: 1.2 ulp of pow), q_lo / (1 + q) by four terms,
        then k ln2 and ln c (both hi + lo) joined by exact two-sums (|k ln2| >= |ln c| >=
        |log(1 + q)| wherever the smaller one is not 0). -inf at 0, inf at inf."""
        ty = x.type
        i64 = like(I64, x)
        c = lambda v: const(ty, v)  # noqa: E731
        ci = lambda v: const(i64, v)  # noqa: E731
        fma = lambda *a: self._intr(b, "llvm.fma", ty, *a)  # noqa: E731
        tiny = b.fcmp_ordered("<", x, c(_MIN_NORMAL64))
        k, piece, z = self._pieces(b, b.bitcast(b.select(tiny, b.fmul(x, c(2.0 ** 54)), x), i64))
        k = b.sitofp(b.sub(k, b.select(tiny, ci(54), ci(0))), ty)
        inv = self._lookup16(b, _PIECES_INVC, piece)
        p = b.fmul(z, inv)
        q_lo = fma(z, inv, b.fneg(p))                   # (exact)
        q = b.fsub(p, c(1.0))                           # (exact: p is within 2^-4 of 1)
        s = b.fmul(q, q)
        s_lo = fma(q, q, b.fneg(s))
        h = b.fsub(q, b.fmul(s, c(0.5)))
        h_lo = b.fsub(b.fsub(q, h), b.fmul(s, c(0.5)))  # (exact: |q| >= q^2 / 2)
        cube = b.fmul(s, q)                             # q^3 / 3 as a double-double too
        cube_lo = self._madd(b, s_lo, q, fma(s, q, b.fneg(cube)))
        third = b.fmul(cube, c(_THIRD[0]))
        third_lo = self._madd(b, cube_lo, c(_THIRD[0]), self._madd(
            b, cube, c(_THIRD[1]), fma(cube, c(_THIRD[0]), b.fneg(third))))
        u = b.fadd(h, third)
        u_lo = b.fadd(b.fsub(h, u), third)              # (exact: |h| >= |q^3 / 3|)
        rest = b.fmul(b.fmul(s, s), self._estrin(b, _LOG64_G, q))
        inv_1q = self._madd(b, self._madd(b, b.fsub(q, c(1.0)), q, c(1.0)), b.fneg(q), c(1.0))
        lo = self._madd(b, s_lo, c(-0.5), self._madd(b, q_lo, inv_1q, rest))
        lo = b.fadd(lo, b.fadd(u_lo, third_lo))
        h = u
        a = b.fmul(k, c(LN2_HI))                        # (exact)
        c_hi = self._lookup16(b, _LOG64_C_HI, piece)
        a_hi = b.fadd(a, c_hi)
        a_lo = b.fsub(c_hi, b.fsub(a_hi, a))            # (exact: |a| >= |c_hi| or a = 0)
        t = b.fadd(a_hi, h)
        t_lo = b.fsub(h, b.fsub(t, a_hi))               # (exact, likewise)
        lo = b.fadd(b.fadd(lo, h_lo), b.fadd(b.fadd(a_lo, t_lo), self._madd(
            b, k, c(LN2_LO), self._lookup16(b, _LOG64_C_LO, piece))))
        hi = b.fadd(t, lo)
        return self._log_edges(b, x, hi, lazy=True), b.fsub(lo, b.fsub(hi, t))

    def _in_double(self, b, x, fn):
        """fn, a float64 routine, of x: a float32 x is widened and the result rounded once
        (fn's error, about an ulp of float64, is far below float32's half ulp)."""
        if elem(x.type) == F64:
            return fn(x)
        return b.fptrunc(fn(b.fpext(x, like(F64, x))), x.type)

    def _pow2(self, b, n, ty):
        """2^n of integer lanes n (i32 for float32, i64 for float64) in the normal
        exponent range, as floats of type ty."""
        bits, bias = (23, 127) if elem(ty) == F32 else (52, 1023)
        return b.bitcast(b.shl(b.add(n, const(n.type, bias)), const(n.type, bits)), ty)

    def _expm1_tail(self, b, r_hi, r_lo):
        """expm1(r) - r_hi for r = r_hi + r_lo, |r| <= ln2 / 2: r_lo + r^2 q(r), q by
        Taylor's series."""
        r = b.fadd(r_hi, r_lo)
        return b.fadd(r_lo, b.fmul(b.fmul(r, r), self._estrin(b, _EXPM1_Q, r)))

    def _exp64_reduce(self, b, x, lo, hi, base2=False):
        """x, clamped to [lo, hi], as n ln2 + r_hi + r_lo (n + (r_hi + r_lo) / ln2 for
        base 2) with |r| <= ln2 / 2 and n an integer (i64 lanes); n ln2 is taken in two
        parts, the first one's product exact."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        xc = self._intr(b, "llvm.minnum", ty, self._intr(b, "llvm.maxnum", ty, x, c(lo)), c(hi))
        # n rounded to an integer by adding 1.5 * 2^52, which leaves it in the low bits
        # (no float -> int64 conversion, which AVX2 does lane by lane)
        shifted = b.fadd(xc if base2 else b.fmul(xc, c(1 / math.log(2.0))), c(_ROUND64))
        n = b.fsub(shifted, c(_ROUND64))
        if base2:
            t = b.fsub(xc, n)                           # (exact)
            r_hi = self._madd(b, t, c(math.log(2.0)), b.fmul(t, c(LN2_LO_FULL)))
            r_lo = c(-0.0)
        else:
            r_hi = self._madd(b, n, c(-LN2_HI), xc)     # (exact)
            r_lo = b.fmul(n, c(-LN2_LO))
        i64 = like(I64, x)
        return b.sub(b.bitcast(shifted, i64), const(i64, _bits(_ROUND64))), r_hi, r_lo

    def _halves(self, b, n):
        """n1 = floor(n / 2) and n - n1 of integers |n| < 2048, by a logical shift (AVX2
        has no arithmetic shift of 64-bit lanes)."""
        bias = const(n.type, 2048)
        n1 = b.sub(b.lshr(b.add(n, bias), const(n.type, 1)), const(n.type, 1024))
        return n1, b.sub(n, n1)

    def _exp64(self, b, x, base2=False, extra=None):
        """float64 exp (exp2 with base2), within an ulp and mostly correctly rounded:
        (1 + r_hi) + (its rounding error + the rest of expm1(r)), times 2^n applied in
        two halves so that results near overflow and in the denormals come out right;
        inf above the range, 0 below, NaN kept. `extra`, a small addition to x (below its
        ulp), joins r's low part."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        lo, hi = (-1075.0, 1024.0) if base2 else (_EXP64_LO, _EXP64_HI)
        n, r_hi, r_lo = self._exp64_reduce(b, x, lo, hi, base2)
        r_lo = r_lo if extra is None else b.fadd(r_lo, extra)
        y = self._sum_exactly(b, c(1.0), r_hi, self._expm1_tail(b, r_hi, r_lo))

        def far():              # (the halves and the edges: near overflow, denormals, inf,
            n1, n2 = self._halves(b, n)                                       # NaN)
            z = b.fmul(b.fmul(y, self._pow2(b, n1, ty)), self._pow2(b, n2, ty))
            return self._exp_edges(b, x, z, lo, hi)
        # where every lane's 2^n is a normal double and y 2^n too, one multiplication
        # (the same bits); the rest only when a lane needs it
        near = 1000.0 if base2 else 700.0
        return self._patch(b, b.fcmp_unordered(">=", self._intr(b, "llvm.fabs", ty, x),
                                               c(near)), b.fmul(y, self._pow2(b, n, ty)), far)

    def _sum_exactly(self, b, big, small, rest):
        """big + small + rest with one rounding at the end where |big| >= |small| (the
        rounding error of big + small recovered exactly) and rest is smaller still."""
        s = b.fadd(big, small)
        return b.fadd(s, b.fadd(b.fadd(b.fsub(big, s), small), rest))

    def _expm1_64(self, b, x):
        """float64 expm1 within an ulp: 2^n expm1(r) + (2^n - 1), computed as
        (2^n1 - 2^-n2 + 2^n1 expm1(r)) 2^n2 (n = n1 + n2, so that 2^n may be 2^1024),
        the first two terms' sum exact; -1 below -40 (where exp(x) is under half an
        ulp of 1), x itself at +-0."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        n, r_hi, r_lo = self._exp64_reduce(b, x, -40.0, _EXP64_HI)
        n1, n2 = self._halves(b, n)
        s1 = self._pow2(b, n1, ty)
        y = self._sum_exactly(b, b.fsub(s1, self._pow2(b, b.neg(n2), ty)), b.fmul(s1, r_hi),
                              b.fmul(s1, self._expm1_tail(b, r_hi, r_lo)))
        y = b.fmul(y, self._pow2(b, n2, ty))
        y = b.select(b.fcmp_ordered(">", x, c(_EXP64_HI)), c(math.inf), y)
        y = b.select(b.fcmp_ordered("<", x, c(-40.0)), c(-1.0), y)
        y = b.select(b.fcmp_ordered("==", x, c(0.0)), x, y)
        return b.select(b.fcmp_unordered("uno", x, x), x, y)

    def _log1p64(self, b, x):
        """float64 log1p: log(u) of u = 1 + x (rounded) plus the rounding's error over u,
        which _log64 adds among its small terms; x itself at +-0."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        u = b.fadd(c(1.0), x)
        err = b.select(b.fcmp_ordered(">", u, c(2.0)), b.fsub(c(1.0), b.fsub(u, x)),
                       b.fsub(x, b.fsub(u, c(1.0))))           # (each exact)
        y = self._log64(b, u, "e", b.fdiv(err, u))
        return b.select(b.fcmp_ordered("==", x, c(0.0)), x, y)

    def _log64_split(self, b, x, normal=False):
        """x = 2^e (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)), denormals scaled first
        (unless the caller knows there are none): e (a float) and f (exact). Garbage for
        x <= 0, inf and NaN, which callers replace."""
        ty = x.type
        i64 = like(I64, x)
        sqrt_half = 0x3FE6A09E667F3BCD                  # the bits of sqrt(1/2)
        if not normal:
            tiny = b.fcmp_ordered("<", x, const(ty, _MIN_NORMAL64))
            x = b.select(tiny, b.fmul(x, const(ty, 2.0 ** 54)), x)
        ix = b.add(b.bitcast(x, i64), const(i64, 0x3FF0000000000000 - sqrt_half))
        e = b.sub(b.lshr(ix, const(i64, 52)), const(i64, 1023))
        if not normal:
            e = b.sub(e, b.select(tiny, const(i64, 54), const(i64, 0)))
        e = b.sitofp(b.trunc(e, like(I32, x)), ty)      # (from int32: one instruction)
        m = b.add(b.and_(ix, const(i64, (1 << 52) - 1)), const(i64, sqrt_half))
        return e, b.fsub(b.bitcast(m, ty), const(ty, 1.0))

    def _log64(self, b, x, base, extra=None):
        """float64 log (base "e", "2" or "10"), within an ulp: x = 2^e (1 + f) with 1 + f
        in [sqrt(1/2), sqrt(2)) (denormals scaled first), log(1 + f) = f - f^2/2 +
        s (f^2/2 + R(s^2)) with s = f / (2 + f); base 2 and 10 split f - f^2/2 into a
        short high part and the rest, so that e + log(1 + f) / ln(base) keeps its low
        bits (log2 of a power of two is exact). `extra`, a small correction to log(x),
        joins the small terms. -inf at 0, NaN below, inf at inf, NaN kept."""
        ty = x.type
        i64 = like(I64, x)
        c = lambda v: const(ty, v)  # noqa: E731
        e, f = self._log64_split(b, x)
        s = b.fdiv(f, b.fadd(c(2.0), f))
        z = b.fmul(s, s)
        hfsq = b.fmul(b.fmul(c(0.5), f), f)
        tail = b.fmul(s, b.fadd(hfsq, b.fmul(z, self._estrin(b, _LOG_R, z))))
        if base == "e":
            low = b.fmul(e, c(LN2_LO))
            low = b.fadd(tail, low if extra is None else b.fadd(low, extra))
            y = b.fadd(b.fmul(e, c(LN2_HI)), b.fsub(f, b.fsub(hfsq, low)))
        else:
            hi = b.fsub(f, hfsq)
            hi = b.bitcast(b.and_(b.bitcast(hi, i64), const(i64, -1 << 32)), ty)
            lo = b.fadd(b.fsub(b.fsub(f, hi), hfsq), tail)
            inv_hi, inv_lo = (IVLN2_HI, IVLN2_LO) if base == "2" else (IVLN10_HI, IVLN10_LO)
            v_hi = b.fmul(hi, c(inv_hi))
            v_lo = b.fadd(b.fmul(b.fadd(lo, hi), c(inv_lo)), b.fmul(lo, c(inv_hi)))
            if base == "10":
                v_lo = b.fadd(b.fmul(e, c(LOG10_2_LO)), v_lo)
                e = b.fmul(e, c(LOG10_2_HI))            # (exact)
            w = b.fadd(e, v_hi)
            v_lo = b.fadd(v_lo, b.fadd(b.fsub(e, w), v_hi))
            y = b.fadd(v_lo, w)
        return self._log_edges(b, x, y)

    def tanh(self, b, x):
        """Cephes tanhf (within 2 ulp) and tanh (double): an odd polynomial (a rational
        function in double) below |x| = 0.625, else 1 - 2 / (exp(2|x|) + 1) with the sign
        of x (exp overflows to inf: +-1). Every lane of a vector computes both."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        ax = self._intr(b, "llvm.fabs", ty, x)
        e = self.exp(b, b.fmul(ax, c(2.0)))
        big = b.fsub(c(1.0), b.fdiv(c(2.0), b.fadd(e, c(1.0))))
        z = b.fmul(x, x)
        if elem(ty) == F32:
            p = self._horner(b, _TANH_P, z)
        else:
            p = b.fdiv(self._horner(b, _TANH64_P, z), self._horner(b, _TANH64_Q, z))
        small = self._madd(b, b.fmul(p, z), x, x)
        r = b.select(b.fcmp_ordered(">", ax, c(0.625)), big, small)
        return self._intr(b, "llvm.copysign", ty, r, x)        # tanh(-0) = -0

    def sin(self, b, x):
        return self.sincos(b, x, cos=False)

    def cos(self, b, x):
        return self.sincos(b, x, cos=True)

    def sincos(self, b, x, cos):
        """sin x (cos x when `cos`) of a scalar or vector x: x = j pi/2 + r with |r| <=
        pi/4, then the quadrant j picks +-sin r or +-cos r. float32 (within 2 ulp): r by
        three fused multiply-adds, short polynomials (Cephes sinf, cosf); float64 (within
        an ulp): _reduce_pio2 and _sin_cos64. Lanes beyond 65536 (float64: 1e9) and inf,
        NaN get libm's, computed only when a lane needs it."""
        ty = x.type
        i32 = like(I32, x)
        c = lambda v: const(ty, v)  # noqa: E731
        if elem(ty) == F32:
            big, ax, j = self._quadrant(b, x, _SINCOS_REDUCED)
            r = ax
            for part in _PIO2:
                r = self._intr(b, "llvm.fma", ty, b.fneg(j), c(part), r)
            z = b.fmul(r, r)
            s = self._madd(b, b.fmul(r, z), self._horner(b, _SIN_P, z), r)
            co = self._madd(b, b.fmul(z, z), self._horner(b, _COS_P, z),
                            self._madd(b, z, c(-0.5), c(1.0)))
        else:
            big, j, r, r_lo = self._reduce_pio2(b, x)
            s, co = self._sin_cos64(b, r, r_lo)
        q = b.fptosi(j, i32)
        odd = b.trunc(q, like(I1, x))

        def half(v):    # (bit 1 set: a quadrant of the second half turn)
            return b.icmp_unsigned("!=", b.and_(v, const(i32, 2)), const(i32, 0))
        if cos:         # cos |x|: cos r, -sin r, -cos r, sin r by quadrant
            v, neg = b.select(odd, s, co), half(b.add(q, const(i32, 1)))
        else:           # sin x = sign(x) sin |x|: sin r, cos r, -sin r, -cos r
            v = b.select(odd, co, s)
            neg = b.xor(half(q), self.sign_bit(b, x))
        v = b.select(neg, b.fneg(v), v)
        return self._patch(b, big, v, lambda: self._libm(b, "cos" if cos else "sin", x))

    def _patch(self, b, bad, v, slow):
        """v with the lanes where `bad` holds replaced by slow(), which runs only when some
        lane needs it."""
        any_bad = bad
        if isinstance(bad.type, ir.VectorType):
            fn = self.gen.declare(f"llvm.vector.reduce.or.{suffix(bad.type)}", I1, [bad.type])
            any_bad = b.call(fn, [bad])
        fast_end = b.block
        with b.if_then(any_bad, likely=False):
            mixed = (b.select(bad, slow(), v), b.block)
        return _joined(b, (v, fast_end), mixed)

    def _libm(self, b, name, x):
        """The C library's function `name` (float32: name + "f") of x: a call for a scalar,
        one call of the out-of-line lane-by-lane function for a vector."""
        ty = x.type
        name += "f" if elem(ty) == F32 else ""
        fn = self.lanewise(name, ty) if isinstance(ty, ir.VectorType) \
            else self.gen.declare_libm(name, ty, [ty])
        return b.call(fn, [x])

    def _odd(self, b, t, coefs, tail=False):
        """t + t^3 P(t^2) / Q(t^2) (only its second term when `tail`), coefs = (P, Q)
        highest power first, or (P,) for t + t^3 P(t^2)."""
        z = b.fmul(t, t)
        r = self._horner(b, coefs[0], z)
        if len(coefs) > 1:
            r = b.fdiv(r, self._horner(b, coefs[1], z))
        return b.fmul(b.fmul(t, z), r) if tail else self._madd(b, b.fmul(t, z), r, t)

    def _atan_ratio(self, b, n, d, neg=None):
        """atan(n / d) for n, d >= 0, not both 0 nor both inf (pi - that where `neg`), with
        one division: the ratio is taken as t = -d / n past tan(3pi/8) (adding pi/2) and
        (n - d) / (n + d) past 0.66 (float32: tan(pi/8); adding pi/4), then atan t = t +
        t^3 R(t^2), summed with the constant's two parts keeping the first sum's rounding
        error. 2.5 d and n + d must not overflow (atan2 scales huge pairs down)."""
        ty = n.type
        c = lambda v: const(ty, v)  # noqa: E731
        f32 = elem(ty) == F32
        big = b.fcmp_ordered(">", n, b.fmul(d, c(2.414213562373095)))
        mid = b.fcmp_ordered(">", n, b.fmul(d, c(0.41421356237309503 if f32 else 0.66)))
        num = b.select(big, b.fneg(d), b.select(mid, b.fsub(n, d), n))
        den = b.select(big, n, b.select(mid, b.fadd(n, d), d))
        t = b.fdiv(num, den)
        q = self._odd(b, t, _ATAN32 if f32 else _ATAN64, tail=True)
        pio2, pio4, pi, pi34 = (_split(p, ty) for p in (_PIO2_HL, _PIO4_HL, _PI_HL, _3PIO4_HL))

        def pick(i):            # the high (i = 0) or low part of the constant
            v = b.select(big, c(pio2[i]), b.select(mid, c(pio4[i]), c(0.0)))
            if neg is None:
                return v
            return b.select(neg, b.select(big, c(pio2[i]), b.select(mid, c(pi34[i]),
                                                                     c(pi[i]))), v)
        if neg is not None:
            t, q = b.select(neg, b.fneg(t), t), b.select(neg, b.fneg(q), q)
        return self._sum_exactly(b, pick(0), t, b.fadd(q, pick(1)))

    def atan(self, b, x):
        """atan x, float32 or float64, within 2 ulp (Cephes' reduction and approximations,
        in one formula with selects): odd, +-pi/2 at +-inf, NaN for NaN."""
        ax = self._intr(b, "llvm.fabs", x.type, x)
        r = self._atan_ratio(b, ax, const(x.type, 1.0))
        return self._intr(b, "llvm.copysign", x.type, r, x)

    def atan2(self, b, y, x):
        """atan2(y, x) as C99 (and NumPy): atan(|y| / |x|) by _atan_ratio, pi - that when
        x's sign bit is set, with y's sign; both zero is taken as atan(0), both infinite
        as atan(1) (so +-pi/4, +-3pi/4), so every signed zero and infinity comes out
        exact; NaN for NaN. Within 2 ulp."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        fabs = lambda v: self._intr(b, "llvm.fabs", ty, v)  # noqa: E731
        n, d = fabs(y), fabs(x)
        inf, zero = c(math.inf), c(0.0)
        both_inf = b.and_(b.fcmp_ordered("==", n, inf), b.fcmp_ordered("==", d, inf))
        both_zero = b.and_(b.fcmp_ordered("==", n, zero), b.fcmp_ordered("==", d, zero))
        # (a pair near the largest float is scaled by 1/16, so that n + d stays finite, a
        # pair of tiny ones up out of the denormals, so that the ratio's bounds compare)
        top, low, up = (2.0 ** 124, 2.0 ** -100, 2.0 ** 50) if elem(ty) == F32 else \
            (2.0 ** 1020, 2.0 ** -1000, 2.0 ** 100)
        m = self._intr(b, "llvm.maxnum", ty, n, d)
        scale = b.select(b.fcmp_ordered(">", m, c(top)), c(1 / 16),
                         b.select(b.fcmp_ordered("<", m, c(low)), c(up), c(1.0)))
        n = b.select(both_inf, c(1.0), b.fmul(n, scale))
        d = b.select(b.or_(both_inf, both_zero), c(1.0), b.fmul(d, scale))
        return self._intr(b, "llvm.copysign", ty, self._atan_ratio(b, n, d, self.sign_bit(b, x)),
                          y)

    def acos(self, b, x):
        return self.asin(b, x, acos=True)

    def asin(self, b, x, acos=False):
        """asin x (acos x when `acos`), float32 or float64, within 2 ulp: asin s = s + q,
        q = s^3 R(s^2), for |s| <= 1/2, at s = |x| up to 1/2 and beyond from asin |x| =
        pi/2 - 2 asin s at s = sqrt((1 - |x|) / 2) (with the square root's rounding error
        added to q); acos x = pi/2 - asin x, 2 asin s or pi - 2 asin s. Each result is
        hi + k s + k q + lo for selected constants, the first sum's rounding error kept,
        so acos 1 = +0 and asin keeps the sign of zero; NaN beyond [-1, 1]."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        ax = self._intr(b, "llvm.fabs", ty, x)
        big = b.fcmp_ordered(">", ax, c(0.5))
        h = b.fmul(b.fsub(c(1.0), ax), c(0.5))
        s = b.select(big, self._intr(b, "llvm.sqrt", ty, h), ax)
        q = self._odd(b, s, _ASIN32 if elem(ty) == F32 else _ASIN64, tail=True)
        two_s = self._intr(b, "llvm.maxnum", ty, b.fadd(s, s), c(1e-30))
        rem = self._intr(b, "llvm.fma", ty, b.fneg(s), s, h)
        if elem(ty) == F64:     # (h - s^2) / 2s: a correction below s's ulp, which 1 / 2s
            i64 = like(I64, x)  # to 2% does (bits' guess, one Newton step; no vdivpd)
            inv = b.bitcast(b.sub(const(i64, 0x7FDE6238DA3C2116), b.bitcast(two_s, i64)), ty)
            inv = self._madd(b, inv, self._madd(b, b.fneg(two_s), inv, c(1.0)), inv)
            err = b.fmul(rem, inv)
        else:
            err = b.fdiv(rem, two_s)
        q = b.fadd(q, b.select(big, err, c(0.0)))
        (h2, l2), (hp, lp) = _split(_PIO2_HL, ty), _split(_PI_HL, ty)
        if not acos:            # pi/2 - 2 asin s, or asin s, then x's sign
            hi = b.select(big, c(h2), c(0.0))
            lo = b.select(big, c(l2), c(0.0))
            k = b.select(big, c(-2.0), c(1.0))
        else:                   # 2 asin s, pi - 2 asin s, or pi/2 - sign(x) asin s
            neg = b.fcmp_ordered("<", x, c(0.0))
            hi = b.select(big, b.select(neg, c(hp), c(0.0)), c(h2))
            lo = b.select(big, b.select(neg, c(lp), c(0.0)), c(l2))
            k = b.select(big, b.select(neg, c(-2.0), c(2.0)), b.select(neg, c(1.0), c(-1.0)))
        a = self._madd(b, k, s, hi)
        a_lo = self._madd(b, k, s, b.fsub(hi, a))       # what a lost (hi - a is exact)
        r = b.fadd(a, b.fadd(a_lo, self._madd(b, k, q, lo)))
        return r if acos else self._intr(b, "llvm.copysign", ty, r, x)

    def _quadrant(self, b, x, limit):
        """(big, |x|, j) for a reduction x = j pi/2 + r: `big` the lanes beyond `limit`
        (and NaN), whose |x| is taken as 0 for the caller to patch; j = round(|x| 2 / pi)."""
        c = lambda v: const(x.type, v)  # noqa: E731
        ax = self._intr(b, "llvm.fabs", x.type, x)
        big = b.fcmp_unordered(">", ax, c(limit))                # (NaN is big too)
        ax = b.select(big, c(0.0), ax)
        return big, ax, self._intr(b, "llvm.roundeven", x.type,
                                   b.fmul(ax, c(0.6366197723675814)))

    def _reduce_pio2(self, b, x):
        """float64 |x| as j pi/2 + r + r_lo, |r| <= pi/4 and r_lo below r's half ulp: the
        product j pi/2 taken exact in three parts by fused multiply-adds (j < 2^30). Also
        `big`, the lanes beyond _REDUCED64 (and NaN), reduced as 0 for the caller to patch."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        fma = lambda *a: self._intr(b, "llvm.fma", ty, *a)  # noqa: E731
        big, ax, j = self._quadrant(b, x, _REDUCED64)
        p1, p2, p3 = (c(p) for p in _PIO2_64)
        r1 = fma(b.fneg(j), p1, ax)                     # exact
        w = b.fmul(j, p2)
        w_lo = fma(j, p2, b.fneg(w))                    # j p2 = w + w_lo exactly
        r = b.fsub(r1, w)
        r_lo = b.fsub(b.fsub(b.fsub(r1, r), w), fma(j, p3, w_lo))
        return big, j, r, r_lo

    def _sin_cos64(self, b, r, r_lo):
        """sin and cos of r + r_lo, |r| <= pi/4, within an ulp: r + (r^3 S(r^2) + r_lo
        cos r), and 1 - r^2/2 as w = 1 - h plus the rounding errors of w and of r^2 (by a
        fused multiply-add), + r^4 C(r^2) - r r_lo."""
        ty = r.type
        c = lambda v: const(ty, v)  # noqa: E731
        z = b.fmul(r, r)
        s = b.fadd(r, self._madd(b, b.fmul(r, z), self._estrin(b, _SIN64, z),
                                 self._madd(b, b.fmul(z, c(-0.5)), r_lo, r_lo)))
        z_lo = self._intr(b, "llvm.fma", ty, r, r, b.fneg(z))       # r^2 = z + z_lo
        h = b.fmul(z, c(0.5))
        w = b.fsub(c(1.0), h)
        small = self._madd(b, b.fmul(z, z), self._estrin(b, _COS64, z),
                           b.fneg(self._madd(b, r, r_lo, b.fmul(z_lo, c(0.5)))))
        return s, b.fadd(w, b.fadd(b.fsub(b.fsub(c(1.0), w), h), small))

    def tan(self, b, x):
        """tan x within 2 ulp: float64 as x = j pi/2 + r (_reduce_pio2), tan r = r + r^3
        P(r^2) / Q(r^2) (Cephes tan) also in two parts, and for odd j -1 / tan r with its
        division corrected; the sign of x. Lanes beyond 1e9 (and inf, NaN) get libm's tan,
        computed only when a lane needs it. float32: _tan32."""
        ty = x.type
        if elem(ty) == F32:
            return self._tan32(b, x)
        c = lambda v: const(ty, v)  # noqa: E731
        fma = lambda *a: self._intr(b, "llvm.fma", ty, *a)  # noqa: E731
        big, j, r, r_lo = self._reduce_pio2(b, x)
        q = self._odd(b, r, _TAN64, tail=True)
        t = b.fadd(r, q)                                # tan(r + r_lo) = t + t_lo
        t_lo = b.fadd(b.fsub(r, t), q)
        t_lo = self._madd(b, r_lo, self._madd(b, t, t, c(1.0)), t_lo)
        y = b.fdiv(c(-1.0), t)                          # -1 / (t + t_lo)
        y = fma(y, fma(t_lo, y, fma(y, t, c(1.0))), y)
        odd = b.trunc(b.fptosi(j, like(I32, x)), like(I1, x))
        v = b.select(odd, y, b.fadd(t, t_lo))
        v = b.select(self.sign_bit(b, x), b.fneg(v), v)
        return self._patch(b, big, v, lambda: self._libm(b, "tan", x))

    def _tan32(self, b, x):
        """float32 tan in float32 lanes, within an ulp: x = j pi/2 + r by three fused
        multiply-adds (the first exact) with the second's rounding error kept (r = r2 +
        r_lo), tan r = r2 + (r_lo + r^3 Q(r^2)) (_TAN32_F) as t + t_lo, and for odd j -1 /
        t, a float32 division refined by one Newton step against t + t_lo; x's sign.
        Lanes beyond 65536, inf and NaN: libm's tanf, computed only when a lane needs it."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        fma = lambda *a: self._intr(b, "llvm.fma", ty, *a)  # noqa: E731
        big, ax, j = self._quadrant(b, x, _SINCOS_REDUCED)
        nj = b.fneg(j)
        p1, p2, p3 = (c(p) for p in _PIO2)
        r1 = fma(nj, p1, ax)                            # (exact)
        w = b.fmul(nj, p2)
        w_lo = fma(nj, p2, b.fneg(w))                   # j p2 = w + w_lo exactly
        r2 = b.fadd(r1, w)
        v = b.fsub(r2, r1)                              # (two-sum: r1 + w = r2 + err)
        err = b.fadd(b.fsub(r1, b.fsub(r2, v)), b.fsub(w, v))
        r_lo = fma(nj, p3, b.fadd(err, w_lo))
        z = b.fmul(r2, r2)
        s = self._madd(b, b.fmul(r2, z), self._horner(b, _TAN32_F, z), r_lo)
        t = b.fadd(r2, s)
        t_lo = b.fadd(b.fsub(r2, t), s)                 # (|s| < |r2|: exact)
        q = b.fdiv(c(-1.0), t)
        q = fma(q, self._madd(b, q, t_lo, fma(q, t, c(1.0))), q)   # -1 / (t + t_lo)
        odd = b.trunc(b.fptosi(j, like(I32, x)), like(I1, x))
        v = b.select(odd, q, t)
        v = b.select(self.sign_bit(b, x), b.fneg(v), v)
        return self._patch(b, big, v, lambda: self._libm(b, "tan", x))

    def erf(self, b, x):
        """erf x within an ulp, odd, +-1 at +-inf, NaN kept. float64 by fdlibm's ranges of
        |x| (_ERF_SMALL ...), every lane evaluating each range's numerator and denominator
        and dividing the pair it selects; from 1.25 on 1 - exp(-x^2 - 0.5625 + R) / |x|,
        x^2 taken in two parts (rounded, its error would be x^2 ulps of the exponential);
        1 from 6 on. float32: _erf32."""
        if elem(x.type) == F32:
            return self._erf32(b, x)
        return self._erf64(b, x)

    def _erf32(self, b, x):
        """float32 erf in float32 arithmetic by three polynomials (_ERF32_SMALL ...), every
        lane evaluating all three (no division; the float64 route computed four rational
        functions in double, slower than glibc's erff when all lanes share a range)."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        ax = self._intr(b, "llvm.fabs", ty, x)
        small = self._madd(b, ax, self._horner(b, _ERF32_SMALL, b.fmul(ax, ax)), ax)
        mid = b.fadd(self._horner(b, _ERF32_MID, b.fsub(ax, c(1.0))), c(_ERF1_F32))
        # 1 - exp(-x^2) R from 1.25 to 4: x^2 = z + z_lo exactly, exp(-z_lo) taken as
        # 1 - z_lo (a rounded x^2 would cost up to 16 ulps of the exponential at 4)
        a = b.select(b.fcmp_ordered(">", ax, c(4.0)), c(4.0), ax)     # (NaN stays NaN)
        z = b.fmul(a, a)
        z_lo = self._intr(b, "llvm.fma", ty, a, a, b.fneg(z))
        r = self._horner(b, _ERFC32_SCALED, self._madd(b, a, c(1 / 1.375), c(-2.625 / 1.375)))
        r = self._madd(b, b.fneg(r), z_lo, r)
        tail = self._madd(b, b.fneg(self.exp(b, b.fneg(z))), r, c(1.0))
        v = b.select(b.fcmp_ordered("<", ax, c(1.25)), mid, tail)
        v = b.select(b.fcmp_ordered("<", ax, c(0.84375)), small, v)
        return self._intr(b, "llvm.copysign", ty, v, x)

    def _erf64(self, b, x):
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        ax = self._intr(b, "llvm.fabs", ty, x)
        mid = b.fcmp_ordered(">=", ax, c(0.84375))
        tail = b.fcmp_ordered(">=", ax, c(1.25))
        far = b.fcmp_ordered(">=", ax, c(1 / 0.35))
        z = b.fmul(ax, ax)
        u = b.fdiv(c(1.0), ax)
        t, masks = b.fmul(u, u), (mid, tail, far)
        args = (z, b.fsub(ax, c(1.0)), t, t)
        ranges = (_ERF_SMALL, _ERF_MID, _ERFC_NEAR, _ERFC_FAR)
        p, q = (self._pick(b, masks, [self._horner(b, r[k], a) for r, a in zip(ranges, args)])
                for k in (0, 1))
        pq = b.fdiv(p, q)
        small = self._madd(b, ax, pq, ax)
        # erfc |x| = exp(-z - z_lo + (pq - 0.5625)) u, the exponent summed as e + e_lo
        z_lo = self._intr(b, "llvm.fma", ty, ax, ax, b.fneg(z))
        a = b.fsub(pq, c(0.5625))
        e = b.fsub(a, z)
        e_lo = b.fsub(b.fadd(b.fsub(b.fneg(z), e), a), z_lo)
        erfc = b.fmul(self._exp64(b, e, extra=e_lo), u)
        r = b.select(tail, b.fsub(c(1.0), erfc), b.select(mid, b.fadd(c(_ERX), pq), small))
        r = b.select(b.fcmp_ordered(">=", ax, c(6.0)), c(1.0), r)
        return self._intr(b, "llvm.copysign", ty, r, x)

    def _pick(self, b, masks, values):
        """values[k] in each lane, k the number of `masks` that hold there (each mask
        implying the one before)."""
        v = values[0]
        for mask, other in zip(masks, values[1:]):
            v = b.select(mask, other, v)
        return v

    def lanewise(self, name, ty):
        """An out-of-line function applying the C library's scalar function `name` to
        each lane of a vector of type ty (one per module and type), so that a rarely taken
        slow path is one call at each use, not a lane-by-lane sequence to compile."""
        fname = f"jitdl.lanes.{name}.{suffix(ty)}"
        fn = self.gen.module.globals.get(fname)
        if fn is not None:
            return fn
        fn = self.gen.new_function(fname, ty, [ty], internal=True)
        fn.attributes.add("noinline")
        scalar = self.gen.declare_libm(name, ty.element, [ty.element])
        fb = ir.IRBuilder(fn.append_basic_block("entry"))
        v, out = fn.args[0], ir.Constant(ty, ir.Undefined)
        for lane in range(ty.count):
            x = fb.extract_element(v, ir.Constant(I32, lane))
            out = fb.insert_element(out, fb.call(scalar, [x]), ir.Constant(I32, lane))
        fb.ret(out)
        return fn

    def float_mod(self, b, a, c):
        """NumPy's remainder: the sign of the divisor."""
        zero = const(a.type, 0.0)
        r = b.frem(a, c)
        fix = b.and_(b.fcmp_ordered("!=", r, zero),
                     b.xor(b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", c, zero)))
        return b.select(fix, b.fadd(r, c), r)

    def float_floordiv(self, b, a, c):
        """NumPy's floor_divide for floats (via fmod, as NumPy computes it)."""
        ty = a.type
        zero = const(ty, 0.0)
        mod = b.frem(a, c)
        div = b.fdiv(b.fsub(a, mod), c)
        adj = b.and_(b.fcmp_ordered("!=", mod, zero),
                     b.xor(b.fcmp_ordered("<", c, zero), b.fcmp_ordered("<", mod, zero)))
        div = b.select(adj, b.fsub(div, const(ty, 1.0)), div)
        fl = self._intr(b, "llvm.floor", ty, div)
        fl = b.select(b.fcmp_ordered(">", b.fsub(div, fl), const(ty, 0.5)),
                      b.fadd(fl, const(ty, 1.0)), fl)
        return b.select(b.fcmp_ordered("==", c, zero), b.fdiv(a, c), fl)

    def int_divmod(self, b, want_div, a, c, signed):
        """Floor division / modulo as NumPy: x // 0 == 0, x % 0 == 0, no trap."""
        ty = a.type
        shift = _power_of_two(c)
        if shift is not None and shift < elem(ty).width - signed:
            # a shift and a mask: floor division by a constant 2**k in two's complement,
            # where the general path converts vector lanes to double and back (the index
            # of a 3 x 3 x 3 conv3d's im2col over 8 x 8 x 8 flattened output positions,
            # o // 64, o // 8 % 8, o % 8: 280 -> 230 us on one Zen 4 core)
            if want_div:
                return (b.ashr if signed else b.lshr)(a, const(ty, shift))
            return b.and_(a, const(ty, (1 << shift) - 1))
        zero, one = const(ty, 0), const(ty, 1)
        is_zero = b.icmp_unsigned("==", c, zero)
        safe = b.select(is_zero, one, c)
        width = elem(ty).width
        if signed:
            minv = const(ty, 1 << (width - 1))
            overflow = b.and_(b.icmp_unsigned("==", a, minv),
                              b.icmp_signed("==", c, const(ty, -1)))
            safe = b.select(overflow, one, safe)
        if isinstance(ty, ir.VectorType) and width <= (32 if signed else 16):
            # x86 has no vector integer division (LLVM divides lane by lane): in double
            # the quotient of integers below 2**53 is exact after floor (the rounding
            # error, |a / c| * 2**-53, is less than 1 / |c|, the least distance from a
            # quotient that is not an integer to one), in float that of integers below
            # 2**24 (int16 and narrower: twice the lanes); it fits int32 (MIN // -1 is
            # MIN // 1 here, as above)
            to_f = b.sitofp if signed else b.uitofp
            fty = like(F64 if width > 16 else F32, a)
            q = self._intr(b, "llvm.floor", fty, b.fdiv(to_f(a, fty), to_f(safe, fty)))
            q = b.fptosi(q, like(I32, a))
            q = q if width == 32 else b.trunc(q, ty)        # (wraps as NumPy's MIN // -1)
            r = b.sub(a, b.mul(q, safe))
            return b.select(is_zero, zero, q if want_div else r)
        if isinstance(ty, ir.VectorType) and width == 64 and signed:
            return self._int64_divmod(b, want_div, a, safe, is_zero)
        return self._lanewise_divmod(b, want_div, a, safe, is_zero, signed)

    def _lanewise_divmod(self, b, want_div, a, safe, is_zero, signed):
        zero, one = const(a.type, 0), const(a.type, 1)
        if signed:
            q, r = b.sdiv(a, safe), b.srem(a, safe)
            fix = b.and_(b.icmp_unsigned("!=", r, zero),
                         b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", safe, zero)))
            q = b.select(fix, b.sub(q, one), q)
            r = b.select(fix, b.add(r, safe), r)
        else:
            q, r = b.udiv(a, safe), b.urem(a, safe)
        return b.select(is_zero, zero, q if want_div else r)

    def _int64_divmod(self, b, want_div, a, safe, is_zero):
        """int64 vector floor division / modulo (divisor `safe`: never 0, MIN // -1 made
        MIN // 1): where every lane's dividend is below 2**51 in magnitude, in double, as
        int_divmod does for int32 (the rounding error, below |a / c| * 2**-53, is less
        than 1 / |c|); a divisor beyond 2**51 is clamped to it, which keeps the quotient's
        floor (0 or -1: |a / c| < 1 either way). Conversions add the integer to the bits
        of 1.5 * 2**52, whose last 52 bits then hold it (AVX2 has no vector conversion of
        int64). Other vectors divide lane by lane (x86 has no vector integer division).
        |a| < 2**51 strictly: a = -2**51 over a clamped divisor -2**51 would give 1."""
        ty = a.type
        fty = like(F64, a)
        bits, big = 0x4338000000000000, 1.5 * 2.0 ** 52
        # (|a| < 2**51: a + 2**51 - 1 in [0, 2**52 - 1), as an unsigned comparison)
        small = b.icmp_unsigned("<", b.add(a, const(ty, (1 << 51) - 1)),
                                const(ty, (1 << 52) - 1))
        mask = ir.IntType(ty.count)
        every = b.icmp_unsigned("==", b.bitcast(small, mask), ir.Constant(mask, -1))
        with b.if_else(every) as (in_double, by_lanes):
            with in_double:
                lim = const(ty, 1 << 51)
                c = self._intr(b, "llvm.smax", ty, self._intr(b, "llvm.smin", ty, safe, lim),
                               b.neg(lim))
                to_f = lambda v: b.fsub(b.bitcast(b.add(v, const(ty, bits)),  # noqa: E731
                                                  fty), const(fty, big))
                q = self._intr(b, "llvm.floor", fty, b.fdiv(to_f(a), to_f(c)))
                q = b.sub(b.bitcast(b.fadd(q, const(fty, big)), ty), const(ty, bits))
                fast = b.select(is_zero, const(ty, 0),
                                q if want_div else b.sub(a, b.mul(q, safe)))
                fast_end = b.block
            with by_lanes:
                slow = self._lanewise_divmod(b, want_div, a, safe, is_zero, True)
                slow_end = b.block
        phi = b.phi(ty)
        phi.add_incoming(fast, fast_end)
        phi.add_incoming(slow, slow_end)
        return phi

    def ipow(self, ty, signed=True):
        """x ** e by squaring; a negative exponent gives 0 (NumPy's integer power), which
        an unsigned exponent never is (uint8 200 is not -56). On a vector type every lane
        squares together, and the loop runs until no lane has bits of its exponent left
        (the largest exponent's bit length), so the loop vectorises instead of running
        lane by lane."""
        name = f"jitdl.ipow.{'i' if signed else 'u'}{suffix(ty)}"
        fn = self.gen.module.globals.get(name)
        if fn is not None:
            return fn
        fn = ir.Function(self.gen.module, ir.FunctionType(ty, [ty, ty]), name=name)
        fn.linkage = "internal"
        base, exp = fn.args
        entry = fn.append_basic_block("entry")
        head = fn.append_basic_block("head")
        body = fn.append_basic_block("body")
        done = fn.append_basic_block("done")
        b = ir.IRBuilder(entry)
        zero, one = const(ty, 0), const(ty, 1)
        neg = b.icmp_signed("<", exp, zero) if signed else None
        if neg is not None:         # (a negative lane: no bits left, its result 0 below)
            exp = b.select(neg, zero, exp)
        b.branch(head)
        b.position_at_end(head)
        r, x, e = b.phi(ty), b.phi(ty), b.phi(ty)
        r.add_incoming(one, entry)
        x.add_incoming(base, entry)
        e.add_incoming(exp, entry)
        left = b.icmp_unsigned("!=", e, zero)
        if isinstance(ty, ir.VectorType):       # (any lane left: the mask as one integer)
            left = b.icmp_unsigned("!=", b.bitcast(left, ir.IntType(ty.count)),
                                   ir.Constant(ir.IntType(ty.count), 0))
        b.cbranch(left, body, done)
        b.position_at_end(body)
        odd = b.icmp_unsigned("!=", b.and_(e, one), zero)
        r.add_incoming(b.select(odd, b.mul(r, x), r), body)
        x.add_incoming(b.mul(x, x), body)
        e.add_incoming(b.lshr(e, one), body)
        b.branch(head)
        b.position_at_end(done)
        b.ret(r if neg is None else b.select(neg, zero, r))
        return fn


def _power_of_two(c):
    """k where integer constant c (a scalar, or the same value in every lane) is 2**k;
    else None."""
    if not isinstance(c, ir.Constant):
        return None
    v = c.constant
    if isinstance(v, list):
        if not v or not all(isinstance(x, ir.Constant) for x in v):
            return None
        vals = {x.constant for x in v}
        if len(vals) != 1:
            return None
        v = vals.pop()
    if not isinstance(v, int) or v <= 0 or v & (v - 1):
        return None
    return v.bit_length() - 1
