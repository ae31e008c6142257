#include "src/kube/resource.h"

namespace hyperslice::kube {

std::string Resource::GroupVersionPath() const {
  if (group.empty()) return "/api/" + version;
  return "/apis/" + group + "/" + version;
}

std::string Resource::CollectionPath(const std::string& ns) const {
  std::string path = GroupVersionPath();
  if (namespaced && !ns.empty()) path += "/namespaces/" + ns;
  path += "/" + resource;
  return path;
}

std::string Resource::ObjectPath(const std::string& ns, const std::string& name) const {
  return CollectionPath(ns) + "/" + name;
}

std::string Resource::String() const { return resource + "." + version + "." + group; }

namespace resources {

const Resource& Pods() {
  static const Resource r{"", "v1", "pods", "Pod", true};
  return r;
}
const Resource& Nodes() {
  static const Resource r{"", "v1", "nodes", "Node", false};
  return r;
}
const Resource& Namespaces() {
  static const Resource r{"", "v1", "namespaces", "Namespace", false};
  return r;
}
const Resource& Secrets() {
  static const Resource r{"", "v1", "secrets", "Secret", true};
  return r;
}
const Resource& ConfigMaps() {
  static const Resource r{"", "v1", "configmaps", "ConfigMap", true};
  return r;
}
const Resource& MutatingWebhookConfigurations() {
  static const Resource r{"admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                          "MutatingWebhookConfiguration", false};
  return r;
}
const Resource& ValidatingWebhookConfigurations() {
  static const Resource r{"admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                          "ValidatingWebhookConfiguration", false};
  return r;
}
const Resource& Events() {
  static const Resource r{"", "v1", "events", "Event", true};
  return r;
}
const Resource& Leases() {
  static const Resource r{"coordination.k8s.io", "v1", "leases", "Lease", true};
  return r;
}
const Resource& CustomResourceDefinitions() {
  static const Resource r{"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                          "CustomResourceDefinition", false};
  return r;
}
const Resource& DaemonSets() {
  static const Resource r{"apps", "v1", "daemonsets", "DaemonSet", true};
  return r;
}
const Resource& StatefulSets() {
  static const Resource r{"apps", "v1", "statefulsets", "StatefulSet", true};
  return r;
}
const Resource& Jobs() {
  static const Resource r{"batch", "v1", "jobs", "Job", true};
  return r;
}
const Resource& CertificateSigningRequests() {
  static const Resource r{"certificates.k8s.io", "v1", "certificatesigningrequests",
                          "CertificateSigningRequest", false};
  return r;
}
}  // namespace resources

const char* WatchEventTypeName(WatchEvent::Type t) {
  switch (t) {
    case WatchEvent::Type::kAdded:
      return "ADDED";
    case WatchEvent::Type::kModified:
      return "MODIFIED";
    case WatchEvent::Type::kDeleted:
      return "DELETED";
    case WatchEvent::Type::kBookmark:
      return "BOOKMARK";
    case WatchEvent::Type::kError:
      return "ERROR";
  }
  return "UNKNOWN";
}

}  // namespace hyperslice::kube
