#include "src/gce/metadata.h"

#include <cstdlib>

#include "src/gce/auth.h"

namespace hyperslice::gce {

Result<std::unique_ptr<MetadataServer>> MetadataServer::Create(const MetadataOptions& options) {
  std::string host = options.host;
  if (host.empty()) {
    const char* env = std::getenv("GCE_METADATA_HOST");
    host = (env != nullptr && *env != '\0') ? env : kDefaultMetadataHost;
  }
  std::string base = host.find("://") == std::string::npos ? "http://" + host : host;
  while (!base.empty() && base.back() == '/') base.pop_back();
  net::HttpClient::Options ho;
  ho.base_url = base;
  ho.connect_timeout = options.timeout;
  ho.max_idle_connections = 1;
  HS_ASSIGN_OR_RETURN(auto http, net::HttpClient::Create(ho));
  return std::unique_ptr<MetadataServer>(
      new MetadataServer(std::move(base), std::move(http), options.timeout));
}

Result<std::string> MetadataServer::Get(std::string_view path) const {
  net::Request req;
  req.target = "/computeMetadata/v1/" + std::string(path);
  req.headers = {{"Metadata-Flavor", "Google"}};
  req.timeout = timeout_;
  HS_ASSIGN_OR_RETURN(auto resp, http_->Do(req));
  if (resp.Header("Metadata-Flavor") != "Google") {
    return Error::Make(Error::Code::kUnavailable,
                       base_ + " did not answer as a GCE metadata server (no Metadata-Flavor)");
  }
  if (resp.status == 404) {
    return Error::Make(Error::Code::kNotFound, "metadata " + std::string(path) + " is not set");
  }
  if (resp.status != 200) {
    return Error::Make(Error::Code::kUnavailable,
                       "metadata " + std::string(path) + ": HTTP " + std::to_string(resp.status));
  }
  return std::move(resp.body);
}

Result<std::string> MetadataServer::Attribute(std::string_view key) const {
  return Get("instance/attributes/" + net::UrlEncode(key));
}

Result<std::string> MetadataServer::Zone() const {
  HS_ASSIGN_OR_RETURN(std::string zone, Get("instance/zone"));
  auto slash = zone.rfind('/');
  return slash == std::string::npos ? zone : zone.substr(slash + 1);
}

}  // namespace hyperslice::gce
