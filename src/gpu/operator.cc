#include "src/gpu/operator.h"

#include <utility>

#include "src/gpu/boot_payload.h"
#include "src/gpu/bootstrap_token.h"
#include "src/gpu/claim_controller.h"
#include "src/gpu/class_controller.h"
#include "src/gpu/controller_deps.h"
#include "src/gpu/cost_controller.h"
#include "src/gpu/disruption_controller.h"
#include "src/gpu/offer_cache.h"
#include "src/gpu/provisioner.h"
#include "src/gpu/tailnet_credentials.h"
#include "src/gpu/unavailable_offers.h"
#include "src/kube/client.h"
#include "src/kube/events.h"
#include "src/kube/object_helpers.h"
#include "src/kube/store.h"

namespace hyperslice::gpu {

Status RegisterOperator(kube::Manager& mgr, OperatorOptions o) {
  if (!o.client) {
    return Error::Make(Error::Code::kInvalidArgument, "gpu operator: client is required");
  }
  const std::shared_ptr<kube::Client>& client = o.client;
  std::string cluster_id = o.cluster_id;
  if (cluster_id.empty()) {
    auto ns = client->Get(kube::resources::Namespaces(), "", "kube-system");
    if (!ns.ok()) return ns.error();
    cluster_id = std::string(kube::MetaString(*ns, "uid"));
  }
  auto cache = std::make_shared<OfferCache>();
  auto unavailable = std::make_shared<UnavailableOffers>();
  kube::EventRecorderOptions eo;
  eo.component = "hyperslice-gpu";
  // What every controller shares: one client, one recorder, one clock.
  const ControllerDeps deps{.client = client,
                            .events = std::make_shared<kube::EventRecorder>(client, eo),
                            .clock = o.clock};

  ClassControllerOptions co{deps};
  co.cache = cache;
  co.credentials_namespace = o.credentials_namespace;
  if (o.offer_refresh_interval) co.offer_refresh_interval = *o.offer_refresh_interval;
  if (o.credentials_check_interval) co.credentials_check_interval = *o.credentials_check_interval;
  co.default_endpoints = o.default_endpoints;
  co.provider_qps = o.provider_qps;
  co.skip_container_offers = o.skip_container_offers;
  co.workers = o.workers;
  HS_RETURN_IF_ERROR(RegisterClassController(mgr, std::move(co)));

  ClaimControllerOptions cl{deps};
  cl.cache = cache;
  cl.unavailable = unavailable;
  cl.cluster_id = cluster_id;
  if (o.launch_timeout) cl.launch_timeout = *o.launch_timeout;
  if (o.registration_timeout) cl.registration_timeout = *o.registration_timeout;
  if (o.gc_interval) cl.gc_interval = *o.gc_interval;
  if (o.gc_grace) cl.gc_grace = *o.gc_grace;
  cl.workers = o.workers;
  if (o.tailnet) {
    auto ts = o.default_endpoints.find(kTailscale);
    cl.tailnet = std::make_shared<TailnetCredentials>(TailnetCredentialsOptions{
        .client = client,
        .credentials_namespace = o.credentials_namespace,
        .tailscale_api_endpoint = ts != o.default_endpoints.end() ? ts->second : std::string(),
        .clock = o.clock});
  }
  // Boot payloads: a join script (cloud-init / startup script) or a Talos config with a
  // per-machine bootstrap token, deleted once the Node registered or the claim goes.
  PayloadBuilderOptions pb;
  pb.client = client;
  pb.control_plane_endpoint = o.control_plane_endpoint;
  pb.cluster_ca_pem = o.cluster_ca_pem;
  pb.default_ssh_key_names = o.default_ssh_key_names;
  pb.token_ttl =
      std::chrono::duration_cast<std::chrono::seconds>(cl.launch_timeout + cl.registration_timeout);
  cl.payload = NewPayloadBuilder(std::move(pb));
  cl.release_credentials = [client](const kube::Object& claim) -> Status {
    auto deleted = DeleteBootstrapTokens(*client, std::string(kube::MetaString(claim, "uid")));
    if (!deleted.ok()) return deleted.error();
    return OkStatus();
  };
  HS_RETURN_IF_ERROR(RegisterClaimController(mgr, std::move(cl)));

  ProvisionerOptions po{deps};
  po.cache = cache;
  po.unavailable = unavailable;
  if (o.batch_idle) po.batch_idle = *o.batch_idle;
  if (o.batch_max) po.batch_max = *o.batch_max;
  HS_RETURN_IF_ERROR(RegisterProvisioner(mgr, std::move(po)));

  // Empty/idle/expired machines back, within the pools' budgets, drained first.
  DisruptionControllerOptions dc{deps};
  if (o.disruption_budget_retry) dc.budget_retry = *o.disruption_budget_retry;
  HS_RETURN_IF_ERROR(RegisterDisruptionController(mgr, std::move(dc)));

  // What the machines cost now and have cost so far, as metrics (and spend in pool statuses).
  CostControllerOptions cc{deps};
  return RegisterCostController(mgr, std::move(cc));
}

}  // namespace hyperslice::gpu
