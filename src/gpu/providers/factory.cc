#include <string>

#include "src/gpu/providers.h"
#include "src/gpu/providers/clients.h"

namespace hyperslice::gpu {

Result<std::unique_ptr<Provider>> NewProvider(const ProviderConfig& config) {
  if (!config.credentials) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "provider " + config.name + ": no credentials source");
  }
  if (config.name == kRunPod) return providers::NewRunPod(config);
  if (config.name == kLambda) return providers::NewLambda(config);
  if (config.name == kPaperspace) return providers::NewPaperspace(config);
  if (config.name == kVast) return providers::NewVast(config);
  return Error::Make(Error::Code::kInvalidArgument,
                     "unknown provider \"" + config.name +
                         "\": expected runpod, lambdalabs, paperspace or vastai");
}

}  // namespace hyperslice::gpu
