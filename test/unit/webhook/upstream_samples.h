// What a user migrating from gke-tpu-env-injector (seed 001) keeps: the two sample workloads its
// integration test applies (samples/no_extra_env_vars.yaml, samples/with_extra_env_vars.yaml: a
// headless Service `nginx` and a StatefulSet `web` of 3 replicas, labelled for injection on the
// StatefulSet and on its pod template, one with FOO=BAR already set) and the
// MutatingWebhookConfiguration its chart ships (chart/templates/mutatingwebhook.yaml: path /mutate,
// StatefulSets on CREATE/UPDATE and Pods on CREATE, the same label as objectSelector, review
// versions [v1beta1, v1], no failurePolicy so the apiserver's default Fail applies). Shared by the
// unit and integration tests.
#pragma once

#include <string>

namespace hyperslice::webhook::upstream {

// Upstream's integration test reads web-0's container 0 by position:
//   no extra env:   env[0] is TPU_WORKER_HOSTNAMES = "web-0.nginx,web-1.nginx,web-2.nginx"
//   with FOO=BAR:   env[0] is FOO, env[1] is TPU_WORKER_HOSTNAMES with the same value
inline constexpr char kHostnames[] = "web-0.nginx,web-1.nginx,web-2.nginx";

inline std::string Sample(bool with_extra_env) {
  std::string yaml = R"(apiVersion: v1
kind: Service
metadata:
  name: nginx
  labels:
    app: nginx
spec:
  ports:
  - port: 80
    name: web
  clusterIP: None
  selector:
    app: nginx
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
  labels:
    gke-tpu-env-injector.aaronbatilo.dev/inject: enabled
spec:
  selector:
    matchLabels:
      app: nginx
  serviceName: "nginx"
  replicas: 3
  template:
    metadata:
      labels:
        app: nginx
        gke-tpu-env-injector.aaronbatilo.dev/inject: enabled
    spec:
      containers:
      - name: nginx
        image: nginx:latest
        ports:
        - containerPort: 80
          name: web
)";
  if (with_extra_env) {
    yaml += R"(        env:
        - name: FOO
          value: BAR
)";
  }
  return yaml;
}

// The chart's configuration with the release name `gke-tpu-env-injector`; clientConfig.service is
// what the chart sets (tests replace it with a URL to the server under test).
inline std::string WebhookConfiguration() {
  return R"(apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: gke-tpu-env-injector-webhook-cfg
  annotations:
    cert-manager.io/inject-ca-from: default/gke-tpu-env-injector-ca
webhooks:
  - name: gke-tpu-env-injector.aaronbatilo.dev
    admissionReviewVersions: [v1beta1, v1]
    sideEffects: NoneOnDryRun
    clientConfig:
      service:
        name: gke-tpu-env-injector
        namespace: default
        path: "/mutate"
    rules:
      - operations: ["CREATE", "UPDATE"]
        apiGroups: ["apps"]
        apiVersions: ["v1"]
        resources: ["statefulsets"]
      - operations: ["CREATE"]
        apiGroups: [""]
        apiVersions: ["v1"]
        resources: ["pods"]
    objectSelector:
      matchLabels:
        gke-tpu-env-injector.aaronbatilo.dev/inject: enabled
)";
}

}  // namespace hyperslice::webhook::upstream
