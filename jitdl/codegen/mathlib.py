"""Math routines emitted inline as LLVM IR: branch-free, so the loop vectoriser can widen
them (a libm call would stay scalar), and exact where NumPy is exact (integer floor
division and modulo, division by zero). Each takes scalars or vectors alike."""
from __future__ import annotations

import math

from llvmlite import ir

from jitdl.codegen.lltypes import F32, I1, I32, const, elem, like, suffix

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


class MathLib:
    def __init__(self, gen):
        self.gen = gen

    def _intr(self, b, name, ty, *args):
        fn = self.gen.declare(f"{name}.{suffix(ty)}", ty, [a.type for a in args])
        return b.call(fn, list(args))

    def _madd(self, b, x, y, z):
        """x * y + z, one fused multiply-add where the target has one (llvm.fmuladd)."""
        return self._intr(b, "llvm.fmuladd", x.type, x, y, z)

    def _horner(self, b, coefs, x):
        p = const(x.type, coefs[0])
        for coef in coefs[1:]:
            p = self._madd(b, p, x, const(x.type, coef))
        return p

    def exp(self, b, x):
        ty = x.type
        if elem(ty) != F32:
            return self._intr(b, "llvm.exp", ty, x)
        i32 = like(I32, x)
        c = lambda v: const(ty, v)  # noqa: E731
        hi, lo = 88.72283935546875, -103.97207708
        xc = self._intr(b, "llvm.minnum", ty, self._intr(b, "llvm.maxnum", ty, x, c(lo)), c(hi))
        n = self._intr(b, "llvm.roundeven", ty, b.fmul(xc, c(1.4426950408889634)))
        r = self._madd(b, n, c(-0.693359375), xc)
        r = self._madd(b, n, c(2.12194440e-4), r)
        p = self._horner(b, _EXP_P, r)
        y = b.fadd(self._madd(b, p, b.fmul(r, r), r), c(1.0))
        ni = b.fptosi(n, i32)
        n1 = b.ashr(ni, const(i32, 1))
        n2 = b.sub(ni, n1)

        def pow2(k):
            return b.bitcast(b.shl(b.add(k, const(i32, 127)), const(i32, 23)), ty)
        y = b.fmul(b.fmul(y, pow2(n1)), pow2(n2))
        y = b.select(b.fcmp_ordered(">", x, c(hi)), c(math.inf), y)
        y = b.select(b.fcmp_ordered("<", x, c(lo)), c(0.0), y)       # exp(-inf) = 0
        return b.select(b.fcmp_unordered("uno", x, x), x, y)

    def log(self, b, x):
        """Cephes logf for float32 (within 2 ulp): x = m * 2^e with m in [sqrt(1/2),
        sqrt(2)), log(m) by a degree-9 polynomial in m - 1; denormals are scaled first.
        Other types: llvm.log (libm)."""
        ty = x.type
        if elem(ty) != F32:
            return self._intr(b, "llvm.log", ty, x)
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
        r = self._madd(b, ef, c(0.693359375), b.fadd(m, y))
        r = b.select(b.fcmp_ordered("==", x, c(math.inf)), c(math.inf), r)
        r = b.select(b.fcmp_ordered("==", x, c(0.0)), c(-math.inf), r)
        r = b.select(b.fcmp_ordered("<", x, c(0.0)), c(math.nan), r)
        return b.select(b.fcmp_unordered("uno", x, x), x, r)

    def tanh(self, b, x):
        """Cephes tanhf (within 2 ulp) and tanh (double): an odd polynomial (a rational
        function in double) below |x| = 0.625, else 1 - 2 / (exp(2|x|) + 1) with the sign
        of x (exp overflows to inf: +-1). Every lane of a vector computes both; the
        double exp is the C library's, per lane, cheaper than its tanh."""
        ty = x.type
        c = lambda v: const(ty, v)  # noqa: E731
        ax = self._intr(b, "llvm.fabs", ty, x)
        e = self.exp(b, b.fmul(ax, c(2.0))) if elem(ty) == F32 else \
            self._intr(b, "llvm.exp", ty, b.fmul(ax, c(2.0)))
        big = b.fsub(c(1.0), b.fdiv(c(2.0), b.fadd(e, c(1.0))))
        z = b.fmul(x, x)
        if elem(ty) == F32:
            p = self._horner(b, _TANH_P, z)
        else:
            p = b.fdiv(self._horner(b, _TANH64_P, z), self._horner(b, _TANH64_Q, z))
        small = self._madd(b, b.fmul(p, z), x, x)
        r = b.select(b.fcmp_ordered(">", ax, c(0.625)), big, small)
        return self._intr(b, "llvm.copysign", ty, r, x)        # tanh(-0) = -0

    def sincos(self, b, x, cos, slow):
        """float32 sin (cos when `cos`) of a scalar or vector x, within 2 ulp: x = j pi/2
        + r with |r| <= pi/4 by three fused multiply-adds, then the quadrant j picks
        +-sin r or +-cos r, each a short polynomial. Lanes beyond 65536 (and inf, NaN) get
        slow() (libm), computed only when a lane needs it."""
        ty = x.type
        i32 = like(I32, x)
        c = lambda v: const(ty, v)  # noqa: E731
        ax = self._intr(b, "llvm.fabs", ty, x)
        big = b.fcmp_unordered(">", ax, c(_SINCOS_REDUCED))        # (NaN is big too)
        ax = b.select(big, c(0.0), ax)
        j = self._intr(b, "llvm.roundeven", ty, b.fmul(ax, c(0.6366197723675814)))
        nj = b.fneg(j)
        r = ax
        for part in _PIO2:
            r = self._intr(b, "llvm.fma", ty, nj, c(part), r)
        z = b.fmul(r, r)
        s = self._madd(b, b.fmul(r, z), self._horner(b, _SIN_P, z), r)
        co = self._madd(b, b.fmul(z, z), self._horner(b, _COS_P, z),
                        self._madd(b, z, c(-0.5), c(1.0)))
        q = b.fptosi(j, i32)
        odd = b.icmp_unsigned("!=", b.and_(q, const(i32, 1)), const(i32, 0))
        if cos:         # cos |x|: cos r, -sin r, -cos r, sin r by quadrant
            v = b.select(odd, s, co)
            flip = b.and_(b.add(q, const(i32, 1)), const(i32, 2))
        else:           # sin x = sign(x) sin |x|: sin r, cos r, -sin r, -cos r
            v = b.select(odd, co, s)
            flip = b.xor(b.and_(q, const(i32, 2)),
                         b.lshr(b.bitcast(x, i32), const(i32, 30)))
            flip = b.and_(flip, const(i32, 2))
        v = b.bitcast(b.xor(b.bitcast(v, i32), b.shl(flip, const(i32, 30))), ty)
        any_big = big
        if isinstance(ty, ir.VectorType):
            fn = self.gen.declare(f"llvm.vector.reduce.or.{suffix(big.type)}", I1, [big.type])
            any_big = b.call(fn, [big])
        fast_end = b.block
        with b.if_then(any_big, likely=False):
            mixed = b.select(big, slow(), v)
            slow_end = b.block
        out = b.phi(ty)
        out.add_incoming(v, fast_end)
        out.add_incoming(mixed, slow_end)
        return out

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
        zero, one = const(ty, 0), const(ty, 1)
        is_zero = b.icmp_unsigned("==", c, zero)
        safe = b.select(is_zero, one, c)
        if signed:
            minv = const(ty, 1 << (elem(ty).width - 1))
            overflow = b.and_(b.icmp_unsigned("==", a, minv),
                              b.icmp_signed("==", c, const(ty, -1)))
            safe = b.select(overflow, one, safe)
            q, r = b.sdiv(a, safe), b.srem(a, safe)
            fix = b.and_(b.icmp_unsigned("!=", r, zero),
                         b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", safe, zero)))
            q = b.select(fix, b.sub(q, one), q)
            r = b.select(fix, b.add(r, safe), r)
        else:
            q, r = b.udiv(a, safe), b.urem(a, safe)
        return b.select(is_zero, zero, q if want_div else r)

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
