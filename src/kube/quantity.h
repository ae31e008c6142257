// Kubernetes resource quantities ("500m", "16Gi", "1.5", "2e3"), as k8s.io/apimachinery's
// resource.Quantity parses them: an optional sign, a decimal number, then a binary-SI suffix
// (Ki Mi Gi Ti Pi Ei), a decimal-SI suffix (n u m "" k M G T P E) or a decimal exponent (e3, E-2).
// Values are kept exactly in thousandths (milli-units), saturating at ±2^63; Value() rounds up, as
// Quantity.Value() does.
#pragma once

#include <cstdint>
#include <string_view>

#include "src/base/result.h"

namespace hyperslice::kube {

class Quantity {
 public:
  // Errors: kInvalidArgument naming the text.
  static Result<Quantity> Parse(std::string_view text);
  static Quantity FromMilli(int64_t milli) { return Quantity(milli); }

  int64_t MilliValue() const { return milli_; }
  int64_t Value() const;  // whole units, rounded up ("500m" -> 1)
  bool operator==(const Quantity&) const = default;
  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy flags the defaulted <=>'s synthesized 0
  auto operator<=>(const Quantity&) const = default;

 private:
  explicit Quantity(int64_t milli) : milli_(milli) {}
  int64_t milli_ = 0;
};

}  // namespace hyperslice::kube
