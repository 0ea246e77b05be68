#pragma once
// For the host programs of tests/host_program.py that measure a function's error against a long double reference.
#include <cmath>

// |got - ref| in units in the last place of ref rounded to double; |got| itself where ref is 0.
inline double ulp_distance(double got, long double ref) {
  const double r = static_cast<double>(ref);
  if (ref == 0) return std::fabs(got);
  const double ulp = std::nextafter(r, INFINITY) - r;
  return static_cast<double>(std::fabs(static_cast<long double>(got) - ref) / ulp);
}

// The largest error `Error` gives over the arguments taken, and where.
template <double (*Error)(double)> struct Worst {
  double err = 0, at = 0;
  void take(double x) {
    const double e = Error(x);
    if (e > err) err = e, at = x;
  }
};
