"""Writes csrc/common/exp_poly.h: the constants of exp_sum_term (csrc/common/exp_sum.h).

exp(r) on |r| <= log(2) / 2 as 1 + r + r^2 q(r), q a degree-9 Chebyshev fit of (exp(r) - 1 - r) / r^2 (mpmath, 200
bits; its error, ~1e-16, is scaled by r^2 <= 0.12), and log(2) as hi + lo, hi with 21 significant bits, all in its
upper 32-bit word (an immediate of the fp64 FMA) and k * hi exact for |k| < 2^32.

    python3 csrc/common/generate_exp_poly.py > csrc/common/exp_poly.h   (needs mpmath, which torch's sympy brings)
"""
import mpmath as mp
from generated_header import print_header

mp.mp.prec = 200
DEGREE = 9


def q_target(r):
    if abs(r) < mp.mpf(2) ** -40:  # the quotient cancels there: its series, exact to far past double
        return mp.mpf(1) / 2 + r / 6 + r**2 / 24 + r**3 / 120
    return (mp.exp(r) - 1 - r) / r**2


def main():
    half_ln2 = mp.log(2) / 2
    coefficients, err = mp.chebyfit(q_target, [-half_ln2, half_ln2], DEGREE + 1, error=True)  # highest degree first
    ln2 = mp.log(2)
    ln2_hi = float(mp.floor(ln2 * 2**21) / 2**21)
    ln2_lo = float(ln2 - mp.mpf(ln2_hi))
    body = [
        f"constexpr int kExpPolyDegree = {DEGREE};",
        "// log(2) as hi + lo, hi with 21 significant bits (its low 32-bit word zero)",
        f"constexpr double kExpLn2Hi = {ln2_hi.hex()};",
        "// log2(e), log(2) - kExpLn2Hi, and the coefficients of q(r) ~ (exp(r) - 1 - r) / r^2, highest degree first",
        f"// (fit error {float(err):.2e})",
        "FAE_CONSTANT_TABLE const double kExpConstants[kExpPolyDegree + 3] = {",
        f"    {float(1 / ln2).hex()},  // log2(e)",
        f"    {ln2_lo.hex()},  // log(2) - kExpLn2Hi",
        *(f"    {float(c).hex()},  // r^{DEGREE - i}" for i, c in enumerate(coefficients)),
        "};",
    ]
    print_header("generate_exp_poly.py",
                 ["The constants of exp_sum_term (exp_sum.h); nvcc folds their known values into the code."], body)

if __name__ == "__main__":
    main()
