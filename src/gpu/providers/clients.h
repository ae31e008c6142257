// The four clients' constructors, for the factory (providers.h). Each client's header comment is
// at the top of its client.cc.
#pragma once

#include <memory>

#include "src/gpu/providers.h"

namespace hyperslice::gpu::providers {

Result<std::unique_ptr<Provider>> NewRunPod(const ProviderConfig& config);
Result<std::unique_ptr<Provider>> NewLambda(const ProviderConfig& config);
Result<std::unique_ptr<Provider>> NewPaperspace(const ProviderConfig& config);
Result<std::unique_ptr<Provider>> NewVast(const ProviderConfig& config);

}  // namespace hyperslice::gpu::providers
