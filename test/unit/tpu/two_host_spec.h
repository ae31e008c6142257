// The TPUNodeGroup the reconciler phase and readiness tests start from: two hosts of a 2x2x2
// tpu7x slice on SPOT in us-central1-c, group g in namespace ns with the given uid.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include <boost/json.hpp>

#include "src/tpu/api.h"

namespace hyperslice::tpu::internal {

inline NodeGroupSpec TwoHostSpec(const std::string& uid) {
  auto spec = ParseNodeGroup(boost::json::parse(R"({
    "metadata": {"name": "g", "namespace": "ns", "uid": ")" +
                                                uid + R"(", "generation": 1},
    "spec": {"project": "p", "nodeLocation": "us-central1-c", "nodeCount": 2,
             "topology": "2x2x2",
             "instanceConfig": {"machineType": "tpu7x-standard-4t", "provisioningModel": "SPOT"}}})")
                                 .as_object());
  EXPECT_TRUE(spec.ok()) << spec.error().message;
  return *spec;
}

}  // namespace hyperslice::tpu::internal
