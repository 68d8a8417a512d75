// Python's float semantics where the viewer cache must match slime's bytes:
// round(x, 6) (correctly rounded on the exact binary value, ties to even) and
// repr(x) as json.dump writes floats (shortest round trip, "0.0", "1e-07", "1e+16").
#pragma once

#include <string>

namespace rl::trace {

// round(x, 6): the double nearest to x rounded to 6 decimals exactly (x's binary
// value, half to even); -0.0 for a negative x that rounds to zero; x itself when
// integral or not finite.
double py_round6(double x);

// Appends repr(x): shortest digits that read back as x, fixed notation for
// 1e-4 <= |x| < 1e16 (with ".0" when integral), otherwise d.ddde+XX / e-XX.
// NaN and infinities as Python spells them ("nan", "inf", "-inf").
void py_float_repr(double x, std::string& out);

}  // namespace rl::trace
