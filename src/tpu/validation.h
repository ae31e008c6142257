// TPUNodeGroup validation shared by the operator (which refuses to act on an invalid group) and the
// validating webhook (which refuses it at admission): the rules the CRD's schema and CEL cannot
// express — topology x machine type x nodeCount, BULK for multi-host slices, the instance
// template's shape and project — and the few the CRD also checks, so a group that bypassed
// admission is still caught. Each problem is one sentence that says what to change.
//
// Thread-safe: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

namespace hyperslice::tpu {

// Everything wrong with a TPUNodeGroup spec; empty when it is valid.
std::vector<std::string> NodeGroupSpecProblems(const boost::json::object& spec);

// The project an instance template URI names ("" when it names none):
// ".../projects/P/global/instanceTemplates/T", "projects/P/regions/R/instanceTemplates/T".
std::string ProjectOfTemplateUri(std::string_view uri);
// Whether `uri` has the shape of an instance template reference (full URL, partial
// "projects/P/global/instanceTemplates/T" or "projects/P/regions/R/instanceTemplates/T", or
// "global/instanceTemplates/T") with a valid GCE name.
bool IsInstanceTemplateUri(std::string_view uri);

}  // namespace hyperslice::tpu
