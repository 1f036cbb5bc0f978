"""Math routines emitted inline as LLVM IR: branch-free, so the loop vectoriser can widen
them (a libm call would stay scalar), and exact where NumPy is exact (integer floor
division and modulo, division by zero). Each takes scalars or vectors alike."""
from __future__ import annotations

import math

from llvmlite import ir

from jitdl.codegen.lltypes import F32, I1, I32, const, elem, is_vector, like, per_lane, suffix

# Cephes-style single-precision exp: x = n*ln2 + r, |r| <= ln2/2, e^r by a degree-6
# polynomial, 2^n built from exponent bits in two halves (so denormal results work).
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1)


class MathLib:
    def __init__(self, gen):
        self.gen = gen

    def _intr(self, b, name, ty, *args):
        fn = self.gen.declare(f"{name}.{suffix(ty)}", ty, [a.type for a in args])
        return b.call(fn, list(args))

    def exp(self, b, x):
        ty = x.type
        if elem(ty) != F32:
            return self._intr(b, "llvm.exp", ty, x)
        i32 = like(I32, x)
        c = lambda v: const(ty, v)  # noqa: E731
        hi, lo = 88.72283935546875, -103.97207708
        xc = self._intr(b, "llvm.minnum", ty, self._intr(b, "llvm.maxnum", ty, x, c(lo)), c(hi))
        n = self._intr(b, "llvm.roundeven", ty, b.fmul(xc, c(1.4426950408889634)))
        r = b.fsub(xc, b.fmul(n, c(0.693359375)))
        r = b.fsub(r, b.fmul(n, c(-2.12194440e-4)))
        p = c(_EXP_P[0])
        for coef in _EXP_P[1:]:
            p = b.fadd(b.fmul(p, r), c(coef))
        y = b.fadd(b.fadd(b.fmul(p, b.fmul(r, r)), r), c(1.0))
        ni = b.fptosi(n, i32)
        n1 = b.ashr(ni, const(i32, 1))
        n2 = b.sub(ni, n1)

        def pow2(k):
            return b.bitcast(b.shl(b.add(k, const(i32, 127)), const(i32, 23)), ty)
        y = b.fmul(b.fmul(y, pow2(n1)), pow2(n2))
        y = b.select(b.fcmp_ordered(">", x, c(hi)), c(math.inf), y)
        return b.select(b.fcmp_unordered("uno", x, x), x, y)

    def log(self, b, x):
        return self._intr(b, "llvm.log", x.type, x)

    def tanh(self, b, x):
        fn = self.gen.declare("tanhf", F32, [F32])
        if is_vector(x):
            return per_lane(b, lambda v: b.call(fn, [v]), x)
        return b.call(fn, [x])

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

    def ipow(self, ty):
        name = f"jitdl.ipow.i{ty.width}"
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
        neg = b.icmp_signed("<", exp, ir.Constant(ty, 0))
        b.cbranch(neg, done, head)
        b.position_at_end(head)
        r = b.phi(ty)
        x = b.phi(ty)
        e = b.phi(ty)
        r.add_incoming(ir.Constant(ty, 1), entry)
        x.add_incoming(base, entry)
        e.add_incoming(exp, entry)
        b.cbranch(b.icmp_signed(">", e, ir.Constant(ty, 0)), body, done)
        b.position_at_end(body)
        odd = b.trunc(e, I1)
        r2 = b.select(odd, b.mul(r, x), r)
        x2 = b.mul(x, x)
        e2 = b.ashr(e, ir.Constant(ty, 1))
        r.add_incoming(r2, body)
        x.add_incoming(x2, body)
        e.add_incoming(e2, body)
        b.branch(head)
        b.position_at_end(done)
        out = b.phi(ty)
        out.add_incoming(ir.Constant(ty, 0), entry)
        out.add_incoming(r, head)
        b.ret(out)
        return fn
