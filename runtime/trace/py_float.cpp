// round(x, 6) and repr(x) as CPython computes them (see py_float.hpp). Both are
// exact: rounding works on x's integer mantissa times 10^6 in 128-bit arithmetic,
// repr takes the shortest round-trip digits from std::to_chars and lays them out
// by Python's rule (fixed notation while the decimal exponent is in -4..15).
#include "trace/py_float.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace rl::trace {

namespace {

// q / 10^6 correctly rounded, for a q too wide to be an exact double.
double decimal_micro(unsigned __int128 q) {
  char digits[48];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + static_cast<int>(q % 10));
    q /= 10;
  } while (q > 0);
  char text[64];
  int k = 0;
  for (int i = n - 1; i >= 0; --i) text[k++] = digits[i];
  text[k++] = 'e', text[k++] = '-', text[k++] = '6', text[k] = '\0';
  return std::strtod(text, nullptr);  // correctly rounded decimal -> double
}

}  // namespace

double py_round6(double x) {
  if (!std::isfinite(x) || x == 0) return x;
  int e2 = 0;
  const double m = std::frexp(std::fabs(x), &e2);            // |x| = m * 2^e2, m in [0.5, 1)
  const auto mant = static_cast<uint64_t>(std::ldexp(m, 53));  // |x| = mant * 2^(e2 - 53), exact
  const int shift = 53 - e2;
  if (shift <= 0) return x;                     // an integer: nothing below the point
  if (shift > 74) return std::copysign(0.0, x);  // |x| * 10^6 < 2^73 / 2^74: under half a unit
  const unsigned __int128 scaled = static_cast<unsigned __int128>(mant) * 1000000u;  // < 2^73
  unsigned __int128 q = scaled >> shift;
  const unsigned __int128 rem = scaled - (q << shift), half = static_cast<unsigned __int128>(1) << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;  // half to even on an exact tie
  // q and 10^6 are exact doubles while q <= 2^53, so one IEEE division rounds correctly.
  const double r = q <= (static_cast<unsigned __int128>(1) << 53) ? static_cast<double>(static_cast<uint64_t>(q)) / 1e6
                                                                   : decimal_micro(q);
  return std::copysign(r, x);
}

void py_float_repr(double x, std::string& out) {
  if (std::isnan(x)) { out += "nan"; return; }
  if (std::isinf(x)) { out += x < 0 ? "-inf" : "inf"; return; }
  if (x == 0) { out += std::signbit(x) ? "-0.0" : "0.0"; return; }
  char buf[40];
  const auto r = std::to_chars(buf, buf + sizeof buf - 1, x, std::chars_format::scientific);  // [-]d[.ddd]e[+-]XX
  *r.ptr = '\0';
  const char* p = buf;
  if (*p == '-') out.push_back('-'), ++p;
  char digits[24];
  int n = 0;
  for (; p < r.ptr && *p != 'e'; ++p)
    if (*p != '.') digits[n++] = *p;
  const int exp10 = std::atoi(p + 1);  // value = d.ddd * 10^exp10
  const int decpt = exp10 + 1;         // value = 0.dddd * 10^decpt, as dtoa reports it
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out.append(digits, n);
    } else if (decpt >= n) {
      out.append(digits, n);
      out.append(static_cast<size_t>(decpt - n), '0');
      out += ".0";
    } else {
      out.append(digits, decpt);
      out.push_back('.');
      out.append(digits + decpt, n - decpt);
    }
    return;
  }
  out.push_back(digits[0]);
  if (n > 1) {
    out.push_back('.');
    out.append(digits + 1, n - 1);
  }
  const int e = decpt - 1;
  char eb[8];
  const int en = std::snprintf(eb, sizeof eb, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
  out.append(eb, en);
}

}  // namespace rl::trace
