// The metadata server of the GCE VM this process runs on (`/computeMetadata/v1/...`): what a
// startup script reads with `curl -H 'Metadata-Flavor: Google'`, for programs booted on a VM
// (`hyperslice runner-agent --gce-metadata`).
//
// The server's address is GCE_METADATA_HOST when set (as Google's client libraries honour it;
// a path prefix is kept, which is how sim/gce names one simulated VM), else
// metadata.google.internal. Every request carries `Metadata-Flavor: Google` and the answer must
// carry it back (anything else is not a metadata server). Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "src/base/result.h"
#include "src/net/http.h"

namespace hyperslice::gce {

struct MetadataOptions {
  std::string host;  // "host[:port][/prefix]"; empty: $GCE_METADATA_HOST, else the default
  std::chrono::milliseconds timeout{5000};
};

class MetadataServer {
 public:
  static Result<std::unique_ptr<MetadataServer>> Create(const MetadataOptions& options);

  // GET /computeMetadata/v1/<path> ("instance/zone", "instance/attributes/foo"). kNotFound when
  // the server has no such entry; kUnavailable for a transport failure or an answer without the
  // Metadata-Flavor header.
  Result<std::string> Get(std::string_view path) const;
  // instance/attributes/<key>: an item of the instance's metadata.
  Result<std::string> Attribute(std::string_view key) const;
  // The last segment of instance/zone ("projects/123/zones/us-central2-b" → "us-central2-b").
  Result<std::string> Zone() const;

  const std::string& base_url() const { return base_; }

 private:
  MetadataServer(std::string base, std::shared_ptr<net::HttpClient> http,
                 std::chrono::milliseconds timeout)
      : base_(std::move(base)), http_(std::move(http)), timeout_(timeout) {}
  std::string base_;
  std::shared_ptr<net::HttpClient> http_;
  std::chrono::milliseconds timeout_;
};

}  // namespace hyperslice::gce
