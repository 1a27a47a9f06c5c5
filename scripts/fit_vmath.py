#!/usr/bin/env python3
"""Fits the polynomials of kernels/vmath.h and prints them as C++ constants.

Each polynomial is fitted in f64 to near-minimax weighted error (least squares on a dense grid, then
Lawson's reweighting), and its coefficients rounded to float. The bound that matters is the one the
float code reaches: tests/kernels/test_vmath.cpp measures it in ULPs against the f64 functions over
the float range. Run by hand: /usr/bin/python3 scripts/fit_vmath.py (numpy only).
"""
import argparse
import math

import numpy as np

# (no arguments: a flag given is refused rather than ignored by a run of minutes)
argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()


def lawson(V, target, weight, iters=60):
    """c minimising max |weight * (V c - target)| (least squares, then Lawson's reweighting)."""
    lam = np.ones(len(target)) / len(target)
    for _ in range(iters):
        w = np.sqrt(lam) * weight
        c, *_ = np.linalg.lstsq(V * w[:, None], target * w, rcond=None)
        lam = lam * np.abs(weight * (V @ c - target))
        lam /= lam.sum()
    return c


def fit(name, x, target, weight, degree):
    """Coefficients c[0..degree] of sum c_k x^k, rounded to float one at a time from c[0]: each is
    rounded with the ones before it fixed and the rest refitted to absorb its rounding error."""
    V = np.vander(x, degree + 1, increasing=True)
    c64 = lawson(V, target, weight)
    fixed = []
    for k in range(degree + 1):
        rest = target - V[:, :k] @ np.array(fixed) if fixed else target
        c = lawson(V[:, k:], rest, weight)
        fixed.append(float(np.float32(c[0])))
    c32 = np.array(fixed)
    err64 = np.max(np.abs(weight * (V @ c64 - target)))
    err32 = np.max(np.abs(weight * (V @ c32 - target)))
    print(f"// {name}: degree {degree}, weighted max error {err64:.3g} (f64), {err32:.3g} (float coefficients)")
    return c32


def emit(name, c):
    body = ", ".join("%.9gf" % v for v in c)  # 9 significant digits name a float exactly
    print(f"constexpr float {name}[] = {{{body}}};")


def cheb(a, b, n=20001):
    t = np.cos(np.pi * (np.arange(n) + 0.5) / n)
    return np.sort(0.5 * (a + b) + 0.5 * (b - a) * t)


# exp: e^r = 1 + r + r^2 P(r) on |r| <= ln2/2; the error of e^r is r^2 dP, relative to e^r.
r = cheb(-math.log(2) / 2, math.log(2) / 2)
r = r[np.abs(r) > 1e-6]
emit("kExpP", fit("exp", r, (np.expm1(r) - r) / r**2, r**2 / np.exp(r), 4))

# log: m = 1 + f in [sqrt(1/2), sqrt(2)), s = f / (2 + f), z = s^2; log(1 + f) = 2s + s R(z) with
# R(z) = 2 atanh(s) / s - 2 = z P(z); an error in R moves log(1 + f) by s dR, relative to 2s: half of it.
smax = (math.sqrt(2) - 1) / (math.sqrt(2) + 1)
s = cheb(1e-4, smax)
z = s * s
R = 2 * np.arctanh(s) / s - 2
emit("kLogP", fit("log", z, R / z, 0.5 * z, 3))

# erf, |x| <= 1: erf(x) = x + x (S(x^2) - 1), the polynomial fitted to S - 1 so that the leading 2/sqrt(pi)
# is not a rounded float; relative error.
u = cheb(0, 1)
x = np.sqrt(u)
xs = np.where(x > 0, x, 1)
S = np.where(x > 0, np.array([math.erf(v) for v in xs]) / xs, 2 / math.sqrt(math.pi))
emit("kErfSmall", fit("erf |x| <= 1", u, S - 1, 1 / S, 6))

# erf, 1 < |x| < 4: erf(|x|) = 1 - P(|x| - 2.5), P fitted to erfc itself (no exponential, no division).
# erfc is at most 0.157 there, so P's rounding errors stay small beside 1's last place and the final
# 1 - P rounds once; P's error is erf's, weighted by 1 / erf(x) (relative error).
a = cheb(1, 4)
erfc = np.array([math.erfc(v) for v in a])
emit("kErfcMid", fit("erfc(x) on [1, 4], in |x| - 2.5", a - 2.5, erfc, 1 / (1 - erfc), 14))

# tanh, |x| <= 0.625: tanh(x) = x + x u P(u), u = x^2; relative error is u dP / (tanh(x) / x).
u = cheb(1e-8, 0.625**2)
x = np.sqrt(u)
T = np.tanh(x) / x
emit("kTanhP", fit("tanh |x| <= 0.625", u, (T - 1) / u, u / T, 4))

# GELU's derivative G(x) = Phi(x) + x phi(x), with no erf and no exp: G = 1/2 + x P(x^2) for |x| <= 1.5
# (G - 1/2 is odd; the result fma(x, P, 1/2) rounds once), and G(|x|) - 1 = D(y) on [1.5, 6] in
# y = |x| k - m, which maps the range onto [-1, 1] (one fma, rounded once); G(a) = 1 + D, G(-a) = 1 - G(a)
# = -D (exact, so the negative tail keeps D's own accuracy, not 1's last place). Absolute error: G is a
# factor of the gradient, between -0.13 and 1.13.
def gelu_grad(v):
    cdf = 0.5 + 0.5 * np.array([math.erf(t / math.sqrt(2)) for t in v])
    return cdf + v * np.exp(-0.5 * v * v) / math.sqrt(2 * math.pi)


GELU_GRAD_SPLIT, GELU_GRAD_TOP = 1.5, 6.0
u = cheb(0, GELU_GRAD_SPLIT**2)
x = np.sqrt(u)
xs = np.where(x > 0, x, 1)
P = np.where(x > 0, (gelu_grad(xs) - 0.5) / xs, 2 / math.sqrt(2 * math.pi))
emit("kGeluGradSmall", fit("GELU' |x| <= 1.5, (G - 1/2) / x in x^2", u, P, x, 6))
k = float(np.float32(2 / (GELU_GRAD_TOP - GELU_GRAD_SPLIT)))
m = float(np.float32((GELU_GRAD_TOP + GELU_GRAD_SPLIT) / (GELU_GRAD_TOP - GELU_GRAD_SPLIT)))
print(f"// GELU' on [1.5, 6]: y = |x| {k!r} - {m!r}")
a = cheb(GELU_GRAD_SPLIT, GELU_GRAD_TOP)
y = (a * k - m).astype(np.float32).astype(np.float64)
emit("kGeluGradMid", fit("GELU' - 1 on [1.5, 6], in y", y, gelu_grad(a) - 1, np.ones_like(a), 16))
