// The webhook tests' environment on the binary's shared cluster, as deploy/ sets it up: the CRDs
// the webhook reads installed first (so that its informers sync at once), the webhook served
// in-process (LocalWebhook), and the admission configurations of one deploy/webhook/base file
// pointed at it. One instead of a copy per webhook test. Header-only, like local_webhook.h.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/kube/resource.h"
#include "src/webhook/webhook.h"
#include "test/testenv/crds.h"
#include "test/testenv/local_webhook.h"
#include "test/testenv/testenv.h"

namespace hyperslice::testenv {

class AdmissionEnv {
 public:
  // `name` names the serving pair's directory and CA (LocalWebhook); `crd_files` are installed
  // and `served` waited for; `configurations` is the deploy/webhook/base file to register. The
  // server's object source, when `server` sets none, is the informer cache (20 s to sync).
  AdmissionEnv(const std::string& name, const std::vector<std::string>& crd_files,
               const std::vector<kube::Resource>& served, const std::string& configurations,
               webhook::ServerOptions server = {}) {
    if (Status st = Start(name, crd_files, served, configurations, std::move(server)); !st.ok()) {
      error = st.error().ToString();
    }
  }

  std::shared_ptr<kube::Client> client;  // the shared cluster's admin
  std::unique_ptr<LocalWebhook> webhook;
  std::string error;  // why it could not start; "" when it did

 private:
  Status Start(const std::string& name, const std::vector<std::string>& crd_files,
               const std::vector<kube::Resource>& served, const std::string& configurations,
               webhook::ServerOptions server) {
    client = AdminClient();
    if (!client) return Error::Make(Error::Code::kInternal, "no admin client");
    if (Status st = InstallCrds(*client, crd_files, served); !st.ok()) {
      return Error::Make(st.error().code, "CRDs: " + st.error().message);
    }
    if (!server.source) {
      server.source = webhook::NewInformerObjectSource(client, std::chrono::seconds(20));
    }
    HS_ASSIGN_OR_RETURN(webhook, LocalWebhook::Start(name, std::move(server)));
    if (Status st = webhook->Register(*client, configurations); !st.ok()) {
      return Error::Make(st.error().code, "webhook configurations: " + st.error().message);
    }
    return OkStatus();
  }
};

}  // namespace hyperslice::testenv
