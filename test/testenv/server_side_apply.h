// `kubectl apply --server-side -f` as it reaches the apiserver, for tests that send a user's YAML
// unchanged: an apply patch (application/apply-patch+yaml) as field manager "kubectl", with
// fieldValidation=Strict, taking over conflicting fields. Header-only.
#pragma once

#include <string>

#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/kube/resource.h"

namespace hyperslice::testenv {

// The apiserver's answer (any status) to applying `yaml` as r's object `name` in `ns`; a dry run
// (dryRun=All) stores nothing.
inline Result<net::Response> ServerSideApply(kube::Client& client, const kube::Resource& r,
                                             const std::string& ns, const std::string& name,
                                             const std::string& yaml, bool dry_run = false) {
  std::string path =
      r.ObjectPath(ns, name) + "?fieldManager=kubectl&fieldValidation=Strict&force=true";
  if (dry_run) path += "&dryRun=All";
  return client.Raw("PATCH", path, yaml, "application/apply-patch+yaml");
}

}  // namespace hyperslice::testenv
