// Placeholder until the paperspace client is written.
#include "src/gpu/providers/clients.h"

namespace hyperslice::gpu::providers {

Result<std::unique_ptr<Provider>> NewPaperspace(const ProviderConfig& config) {
  return Error::Make(Error::Code::kUnknown, "provider " + config.name + ": not available yet");
}

}  // namespace hyperslice::gpu::providers
