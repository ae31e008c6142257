// A GPUNodeClass's providers[] as the controllers read them: the GPUNodeClass controller builds
// its clients from them, and the runners' marketplace provisioner (src/runners) rents container
// machines through the same providers and credentials.
#pragma once

#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "src/gpu/credentials.h"
#include "src/gpu/selection.h"

namespace hyperslice::gpu {

// One providers[] entry of a class spec.
struct ClassProvider {
  std::string name;
  bool enabled = true;
  int priority = 100;
  std::vector<std::string> regions;
  std::string endpoint;
  SecretRef credentials;
  // What a client is built from: a change rebuilds it.
  std::string Fingerprint() const {
    return endpoint + "|" + credentials.ns + "/" + credentials.name + "#" + credentials.key;
  }
};

// The entries of `spec.providers` (a class's spec object), disabled ones included.
std::vector<ClassProvider> ReadClassProviders(const boost::json::object& spec);

// `base` narrowed by the class's spec.instanceRequirements (gpuTypes, regions, spotAllowed,
// minVCPU, minMemoryGiB, minGPUMemoryGiB); `cls` is the GPUNodeClass object.
void ApplyInstanceRequirements(const boost::json::object& cls, OfferRequirements& base);

}  // namespace hyperslice::gpu
