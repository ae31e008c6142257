#include "src/kube/quantity.h"

#include <limits>
#include <string>

namespace hyperslice::kube {

namespace {

using i128 = __int128;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

int64_t Saturate(i128 v) {
  if (v > kMax) return kMax;
  if (v < -kMax) return -kMax;
  return static_cast<int64_t>(v);
}

}  // namespace

Result<Quantity> Quantity::Parse(std::string_view text) {
  auto bad = [&] {
    return Error::Make(Error::Code::kInvalidArgument,
                       "\"" + std::string(text) + "\" is not a quantity (e.g. 500m, 2, 16Gi)");
  };
  std::string_view s = text;
  if (s.empty() || s.size() > 64) return bad();
  bool neg = false;
  if (s[0] == '+' || s[0] == '-') {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  // Mantissa as an integer plus the count of fraction digits.
  i128 mantissa = 0;
  int frac_digits = 0;
  bool digits = false, dot = false;
  size_t i = 0;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c >= '0' && c <= '9') {
      digits = true;
      if (mantissa < (i128(1) << 100)) {
        mantissa = mantissa * 10 + (c - '0');
        if (dot) frac_digits++;
      } else if (!dot) {
        return bad();  // absurdly large
      }
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!digits) return bad();
  std::string_view suffix = s.substr(i);
  // value = mantissa * 10^-frac * (2^bin or 10^dec); result in milli-units.
  int dec = 3;  // milli
  int bin = 0;
  if (suffix.empty()) {
  } else if (suffix == "Ki") {
    bin = 10;
  } else if (suffix == "Mi") {
    bin = 20;
  } else if (suffix == "Gi") {
    bin = 30;
  } else if (suffix == "Ti") {
    bin = 40;
  } else if (suffix == "Pi") {
    bin = 50;
  } else if (suffix == "Ei") {
    bin = 60;
  } else if (suffix == "n") {
    dec -= 9;
  } else if (suffix == "u") {
    dec -= 6;
  } else if (suffix == "m") {
    dec -= 3;
  } else if (suffix == "k") {
    dec += 3;
  } else if (suffix == "M") {
    dec += 6;
  } else if (suffix == "G") {
    dec += 9;
  } else if (suffix == "T") {
    dec += 12;
  } else if (suffix == "P") {
    dec += 15;
  } else if (suffix == "E") {
    dec += 18;
  } else if (suffix[0] == 'e' || suffix[0] == 'E') {
    std::string_view e = suffix.substr(1);
    bool eneg = false;
    if (!e.empty() && (e[0] == '+' || e[0] == '-')) {
      eneg = e[0] == '-';
      e.remove_prefix(1);
    }
    if (e.empty() || e.size() > 3) return bad();
    int exp = 0;
    for (char c : e) {
      if (c < '0' || c > '9') return bad();
      exp = exp * 10 + (c - '0');
    }
    dec += eneg ? -exp : exp;
  } else {
    return bad();
  }
  dec -= frac_digits;
  i128 v = mantissa;
  for (int k = 0; k < bin; ++k) {
    v *= 2;
    if (v > (i128(1) << 120)) break;
  }
  if (dec >= 0) {
    for (int k = 0; k < dec && v < (i128(1) << 120); ++k) v *= 10;
  } else {
    // Below a milli-unit: round up, as Quantity.MilliValue() does (ceil toward +inf).
    i128 div = 1;
    for (int k = 0; k < -dec && div < (i128(1) << 120); ++k) div *= 10;
    v = (v + div - 1) / div;
  }
  return Quantity(Saturate(neg ? -v : v));
}

int64_t Quantity::Value() const {
  if (milli_ >= 0) return milli_ / 1000 + (milli_ % 1000 != 0 ? 1 : 0);
  return milli_ / 1000;
}

}  // namespace hyperslice::kube
