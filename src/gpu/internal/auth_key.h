// What the headscale and Tailscale wire formats (headscale_wire.h, tailscale_wire.h) share in
// decoding a created auth key.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "src/base/result.h"
#include "src/gpu/internal/api_caller.h"
#include "src/gpu/tailnet.h"
#include "src/kube/object_helpers.h"

namespace hyperslice::gpu::internal {

// The key from its fields in `api`'s answer to `what`. kInternal (BadAnswer) when the id or the
// key is empty, or `expires` (the answer's field `expires_field`) is not an RFC 3339 time.
inline Result<AuthKey> AuthKeyFrom(std::string_view api, std::string_view what, std::string id,
                                   std::string key, std::string_view expires,
                                   std::string_view expires_field) {
  if (id.empty() || key.empty()) return BadAnswer(api, what, "the key has no id or no key");
  auto at = kube::ParseTime(expires);
  if (!at) {
    return BadAnswer(api, what, "the key has no readable \"" + std::string(expires_field) + "\"");
  }
  return AuthKey{.id = std::move(id), .key = std::move(key), .expires = *at};
}

}  // namespace hyperslice::gpu::internal
