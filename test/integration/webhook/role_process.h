// `hyperslice webhook` as a process for the role tests: a free port for it to serve on, and the
// admission configurations that send it the test namespace's requests (named by the test so that
// they sort first: the first mutating webhook to set a variable decides its value).
#pragma once

#include <string>

#include <boost/json.hpp>

#include "src/base/command.h"

namespace hyperslice::webhook_testing {

// A free loopback port, or 0 (the role's start then fails visibly).
inline int FreePort() {
  auto port = FreeLoopbackPort();
  return port.ok() ? *port : 0;
}

// A `kind` (Mutating/ValidatingWebhookConfiguration) `name` with one webhook `hook` calling `url`
// for `rules`, failing closed, for namespace `ns` only.
inline boost::json::object WebhookConfig(const std::string& kind, const std::string& name,
                                         const std::string& url, const std::string& ns,
                                         const std::string& hook, const boost::json::array& rules) {
  namespace json = boost::json;
  json::object selector{
      {"matchExpressions", json::array{json::object{{"key", "kubernetes.io/metadata.name"},
                                                    {"operator", "In"},
                                                    {"values", json::array{json::string(ns)}}}}}};
  return json::object{
      {"apiVersion", "admissionregistration.k8s.io/v1"},
      {"kind", kind},
      {"metadata", json::object{{"name", name}}},
      {"webhooks", json::array{json::object{{"name", hook},
                                            {"admissionReviewVersions", json::array{"v1"}},
                                            {"sideEffects", "None"},
                                            {"failurePolicy", "Fail"},
                                            {"timeoutSeconds", 5},
                                            {"clientConfig", json::object{{"url", url}}},
                                            {"namespaceSelector", selector},
                                            {"rules", rules}}}}};
}

// The rules of the two configurations: Pod creates (/mutate-pods) and TPUNodeGroup creates and
// updates (/validate-tpunodegroups).
inline boost::json::array PodCreateRules() {
  namespace json = boost::json;
  return json::array{json::object{{"apiGroups", json::array{""}},
                                  {"apiVersions", json::array{"v1"}},
                                  {"operations", json::array{"CREATE"}},
                                  {"resources", json::array{"pods"}}}};
}
inline boost::json::array TpuNodeGroupRules() {
  namespace json = boost::json;
  return json::array{json::object{{"apiGroups", json::array{"tpu.google.com"}},
                                  {"apiVersions", json::array{"v1alpha1"}},
                                  {"operations", json::array{"CREATE", "UPDATE"}},
                                  {"resources", json::array{"tpunodegroups"}}}};
}

}  // namespace hyperslice::webhook_testing
