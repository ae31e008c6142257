// The Pod the webhook role tests send through the apiserver: a StatefulSet `name` (2 replicas,
// governing Service "svc") created in `ns`, and its worker 1 as the StatefulSet controller would
// create it, opted in to the TPU environment injection, with `annotations` (none when empty).
#pragma once

#include <string>

#include <boost/json.hpp>

#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/kube/resource.h"

namespace hyperslice::webhook_testing {

inline Result<boost::json::object> CreateStatefulSetWorker(kube::Client& client,
                                                           const std::string& ns,
                                                           const std::string& name,
                                                           const boost::json::object& annotations) {
  namespace json = boost::json;
  json::object labels{{"app", name}};
  json::object sts{
      {"apiVersion", "apps/v1"},
      {"kind", "StatefulSet"},
      {"metadata", json::object{{"name", name}}},
      {"spec",
       json::object{
           {"serviceName", "svc"},
           {"replicas", 2},
           {"selector", json::object{{"matchLabels", labels}}},
           {"template",
            json::object{{"metadata", json::object{{"labels", labels}}},
                         {"spec", json::object{{"containers", json::array{json::object{
                                                                  {"name", "main"},
                                                                  {"image", "busybox"}}}}}}}}}}};
  auto created = client.Create(kube::resources::StatefulSets(), ns, sts);
  if (!created.ok()) return created.error();
  json::object metadata{
      {"name", name + "-1"},
      {"labels", json::object{{"app", name},
                              {"apps.kubernetes.io/pod-index", "1"},
                              {"gke-tpu-env-injector.aaronbatilo.dev/inject", "enabled"}}},
      {"ownerReferences", json::array{json::object{{"apiVersion", "apps/v1"},
                                                   {"kind", "StatefulSet"},
                                                   {"name", name},
                                                   {"uid", created->at("metadata").at("uid")},
                                                   {"controller", true}}}}};
  if (!annotations.empty()) metadata["annotations"] = annotations;
  return json::object{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", metadata},
      {"spec", json::object{{"containers",
                             json::array{json::object{{"name", "main"}, {"image", "busybox"}}}}}}};
}

}  // namespace hyperslice::webhook_testing
