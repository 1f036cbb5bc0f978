"""Fits the polynomials of jitdl's float32 erf (jitdl/codegen/mathlib.py: _ERF32_SMALL,
_ERF32_MID, _ERFC32_SCALED) and checks, in a float32 emulation, that the routine built
from them is within an ulp of erf rounded to float32. Needs scipy (for erf in float64).

    python tools/fit_erf32.py            # prints the coefficient tuples, highest power first

Each fit is weighted least squares on Chebyshev nodes, reweighted by the error (Lawson's
iteration) until it is close to minimax; the coefficients are then rounded to float32.
"""
import numpy as np
from scipy.special import erf, erfc

F32 = np.float32
SMALL, MID, TAIL = 0.84375, 1.25, 4.0          # the ranges' upper ends
CENTRE, HALF = (MID + TAIL) / 2, (TAIL - MID) / 2


def nodes(lo, hi, n=6000):
    return np.cos(np.pi * (np.arange(n) + 0.5) / n) * (hi - lo) / 2 + (hi + lo) / 2


def near_minimax(var, want, weight, degree, rounds=80):
    """Coefficients (lowest first) of the polynomial in var closest to want, the error
    measured as |p - want| * weight."""
    basis = np.vander(var, degree + 1, increasing=True)
    w = np.ones_like(var)
    for _ in range(rounds):
        scale = weight * np.sqrt(w)
        coefs = np.linalg.lstsq(basis * scale[:, None], want * scale, rcond=None)[0]
        err = np.abs(basis @ coefs - want) * weight
        w = w * err + 1e-300
        w /= w.sum()
    return [float(F32(c)) for c in coefs], err.max()


def fit():
    t = nodes(1e-4, SMALL)              # erf x = x + x P(x^2), P's error relative to erf
    small = near_minimax(t * t, erf(t) / t - 1, t / erf(t), 6)
    t = nodes(SMALL, MID)               # erf x = erf(1) + M(x - 1)
    mid = near_minimax(t - 1, erf(t) - float(F32(erf(1.0))), np.ones_like(t), 7)
    t = nodes(MID, TAIL)                # erf x = 1 - exp(-x^2) R(v), R relatively
    r = erfc(t) * np.exp(t * t)
    tail = near_minimax((t - CENTRE) / HALF, r, 1 / r, 11)
    return small, mid, tail


def emulate(x, small, mid, tail):
    """The routine in float32 arithmetic (a fused multiply-add as a float64 product and
    sum rounded once; exp correctly rounded, where jitdl's is within an ulp)."""
    def fma(a, b, c):
        return (np.float64(a) * np.float64(b) + np.float64(c)).astype(F32)

    def horner(coefs, v):
        p = np.full_like(v, F32(coefs[-1]))
        for c in coefs[-2::-1]:
            p = fma(p, v, F32(c))
        return p

    ax = np.abs(x)
    lo = fma(ax, horner(small, ax * ax), ax)
    md = horner(mid, ax - F32(1)) + F32(erf(1.0))
    a = np.minimum(ax, F32(TAIL))
    z = a * a
    z_lo = (np.float64(a) ** 2 - z).astype(F32)
    r = horner(tail, fma(a, F32(1 / HALF), F32(-CENTRE / HALF)))
    r = fma(-r, z_lo, r)
    hi = fma(-np.exp(-np.float64(z)).astype(F32), r, F32(1))
    return np.copysign(np.where(ax < SMALL, lo, np.where(ax < MID, md, hi)), x)


def main():
    fits = fit()
    for name, (coefs, err) in zip(("_ERF32_SMALL", "_ERF32_MID", "_ERFC32_SCALED"), fits):
        print(f"{name} = ({', '.join('%.9g' % c for c in reversed(coefs))})  # error {err:.2g}")
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(0, 4.5, 4_000_000), rng.standard_normal(2_000_000),
                        10 ** rng.uniform(-40, 0.7, 1_000_000)]).astype(F32)
    want = erf(x.astype(np.float64)).astype(F32)
    got = emulate(x, *(c for c, _ in fits))
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32))
    print(f"emulated on {x.size} values: at most {ulps.max()} ulp, "
          f"{(ulps > 0).mean():.1%} an ulp off")


if __name__ == "__main__":
    main()
