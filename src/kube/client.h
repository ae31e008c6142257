// Client: the REST verbs of the Kubernetes API on untyped objects, with typed errors.
//
// Errors map the apiserver's metav1.Status: reason NotFound → Error::Code::kNotFound,
// AlreadyExists → kAlreadyExists, Conflict → kConflict, Expired/Gone (410) → kGone,
// Invalid (422) → kInvalidArgument, TooManyRequests (429, with retry_after) → kTooManyRequests,
// 401 → kUnauthorized, 403 → kForbidden, 5xx/transport → kUnavailable. Error::reason holds the
// Status reason, Error::message its message.
//
// Thread-safe: one Client is shared by every informer and controller of a process.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "src/base/result.h"
#include "src/kube/config.h"
#include "src/kube/resource.h"
#include "src/net/http.h"

namespace hyperslice::kube {

// A watch response body, decoded event by event.
class WatchStream {
 public:
  virtual ~WatchStream() = default;
  // Next event; std::nullopt when the server ended the stream cleanly (timeoutSeconds elapsed).
  // Errors: kCancelled after Cancel(), kUnavailable on a cut connection, kInvalidArgument on a
  // malformed stream. A kError event (e.g. 410 Gone) is returned as an event, not an error.
  virtual Result<std::optional<WatchEvent>> Next() = 0;
  virtual void Cancel() = 0;  // any thread
};

class Client {
 public:
  virtual ~Client() = default;

  static Result<std::shared_ptr<Client>> Create(const Config& config);

  virtual Result<Object> Get(const Resource& r, const std::string& ns, const std::string& name,
                             const std::string& subresource = "") = 0;
  // One page (honours limit/continue).
  virtual Result<ObjectList> List(const Resource& r, const std::string& ns,
                                  const ListOptions& opts = {}) = 0;
  // Every page, following continue tokens; resource_version is the first page's.
  virtual Result<ObjectList> ListAll(const Resource& r, const std::string& ns,
                                     ListOptions opts = {}) = 0;
  virtual Result<Object> Create(const Resource& r, const std::string& ns, const Object& obj) = 0;
  // PUT; obj must carry metadata.resourceVersion for optimistic concurrency.
  virtual Result<Object> Update(const Resource& r, const std::string& ns, const Object& obj,
                                const std::string& subresource = "") = 0;
  virtual Result<Object> Patch(const Resource& r, const std::string& ns, const std::string& name,
                               PatchType type, const std::string& body,
                               const PatchOptions& opts = {}) = 0;
  virtual Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                        const DeleteOptions& opts = {}) = 0;
  virtual Result<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                                     const ListOptions& opts) = 0;

  // Escape hatch for non-resource paths (/readyz, /version, discovery).
  virtual Result<net::Response> Raw(const std::string& method, const std::string& path,
                                    const std::string& body = "",
                                    const std::string& content_type = "application/json") = 0;

  virtual const Config& config() const = 0;
};

// Maps a non-2xx apiserver response (its metav1.Status body when present) to an Error.
Error ErrorFromResponse(const net::Response& resp);

}  // namespace hyperslice::kube
