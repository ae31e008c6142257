// A condition set on a status being built (a bare status object, not yet in its CR), for the
// TPU controllers' reconciles, which build the status first and write it once.
#pragma once

#include <optional>
#include <utility>

#include <boost/json/object.hpp>

#include "src/kube/object_helpers.h"

namespace hyperslice::tpu::internal {

// Sets `c` in status.conditions (kube::SetCondition's rules: lastTransitionTime moves only when
// the status does); returns the condition of that type as it was before.
inline std::optional<kube::Condition> SetStatusCondition(boost::json::object& status,
                                                         const kube::Condition& c) {
  kube::Object holder{{"status", std::move(status)}};
  auto before = kube::FindCondition(holder, c.type);
  kube::SetCondition(holder, c);
  status = std::move(holder.at("status").as_object());
  return before;
}

}  // namespace hyperslice::tpu::internal
