"""Writes csrc/common/log_table.h: the reduction table of log_sum (csrc/common/log_sum.h).

Entry i of 128 covers mantissas m in [1 + i/128, 1 + (i+1)/128): c_i, the double nearest 1 / (1 + i/128), the cell's
lower edge, so that r = m * c_i - 1 lies in [-2^-53, 2^-7) (c_i may round low) and log(m) = -log(c_i) + log1p(r) adds two
terms that never cancel (-log(c_i) >= 2^-7 but for c_0) (c_0 = 1: r = m - 1 exactly, log(m) keeps its relative precision near 1); and -log(c_i) as a
double-double (hi, lo), from Python's decimal at 60 digits.

    python3 csrc/common/generate_log_table.py > csrc/common/log_table.h
"""
from decimal import Decimal, getcontext

from generated_header import print_header

getcontext().prec = 60
ENTRIES = 128
LN2 = Decimal(2).ln()
LN2_HI = float(int(LN2 * 2**40) / Decimal(2**40))  # 40 significant bits: exact, and e * LN2_HI too
LN2_LO = float(LN2 - Decimal(LN2_HI))


def main():
    rows = []
    for i in range(ENTRIES):
        c = float(1 / (Decimal(1) + Decimal(i) / ENTRIES))
        neg_log = -Decimal(c).ln()
        hi = float(neg_log)
        lo = float(neg_log - Decimal(hi))
        rows.append(f"    {{{c.hex()}, {hi.hex()}, {lo.hex()}}},  // {i}")
    body = [
        f"constexpr int kLogTableEntries = {ENTRIES};",
        "// log(2) as hi + lo, hi with its low 13 bits zero so that e * hi is exact for |e| < 2^13",
        f"constexpr double kLn2Hi = {LN2_HI.hex()};",
        f"constexpr double kLn2Lo = {LN2_LO.hex()};",
        "FAE_CONSTANT_TABLE const double kLogTable[kLogTableEntries][3] = {",
        *rows,
        "};",
    ]
    print_header("generate_log_table.py",
                 ["The reduction table of log_sum (log_sum.h). Each entry: c_i (1 / the lower edge of mantissas",
                  "[1 + i/128, 1 + (i+1)/128)), -log(c_i) hi and lo."], body)

if __name__ == "__main__":
    main()
