// The RunPod client: gpu::Provider over RunPod's GraphQL API (POST <endpoint>/graphql), the API
// runpod-python 1.12.0 and runpodctl use. README.md next to this file lists the calls, how tags
// are carried, how errors are classified and where each shape comes from.
//
// - Auth: `Authorization: Bearer <key>`, as runpod-python sends it since PR #394 ("GQL uses API
//   Key in Authorization Header"; the older `?api_key=` form is no longer recommended and would
//   put the key in URLs that proxies log).
// - Rate limit: RunPod publishes no request rate for /graphql (its "Rate limits" page covers only
//   the REST API v2, per-user minute/hour/day windows announced in RateLimit-Policy headers), so
//   the client defaults to 3 requests/s with a burst of 6 — one offer refresh (1 + one query per
//   data center) stays a few seconds even with 30+ data centers — and honours 429 Retry-After.
//   ProviderConfig.requests_per_second/burst override it.
// - GraphQL errors in a 200 answer are errors (decode.h ClassifyErrors); creates are never re-sent
//   (ApiCaller's ambiguity rule).
#include <cmath>

#include <boost/json.hpp>

#include "src/base/log.h"
#include "src/gpu/internal/api_caller.h"
#include "src/gpu/providers/clients.h"
#include "src/gpu/providers/runpod/decode.h"

namespace hyperslice::gpu::providers {

namespace {

namespace json = boost::json;
using internal::ApiCaller;
using runpod::GraphQLString;

constexpr double kDefaultRps = 3;
constexpr int kDefaultBurst = 6;

// The Pod fields the client reads (PodToInstance).
constexpr char kPodFields[] =
    "id name desiredStatus podType costPerHr gpuCount env "
    "runtime { ports { ip isIpPublic privatePort publicPort type } } "
    "machine { gpuTypeId dataCenterId }";

class RunPod final : public Provider {
 public:
  explicit RunPod(std::unique_ptr<ApiCaller> api) : api_(std::move(api)) {}

  const char* name() const override { return kRunPod; }
  Capabilities capabilities() const override {
    return {.spot = true,
            .price_api = true,
            .tags = false,  // carried in the pod env (HYPERSLICE_TAGS), see README.md
            .max_user_data_bytes = 0};
  }

  Status CheckCredentials() override {
    auto body = Call("myself", "query Myself { myself { id } }", true);
    if (!body.ok()) return body.error();
    auto s = runpod::DecodeMyself(*body);
    if (!s.ok()) api_->RecordError("myself", s.error());
    return s;
  }

  Result<std::vector<Offer>> ListOffers() override {
    auto body = Call("dataCenters", "query DataCenters { dataCenters { id location } }", true);
    if (!body.ok()) return body.error();
    auto dcs = runpod::DecodeDataCenters(*body);
    if (!dcs.ok()) return Recorded("dataCenters", dcs.error());
    std::vector<Offer> out;
    for (const auto& dc : *dcs) {
      // lowestPrice for one GPU in this data center: per-GPU prices, stock, and the GPU counts a
      // pod can have there now (availableGpuCounts). RunPod bills pods per GPU at one rate.
      std::string q =
          "query GpuTypes { gpuTypes { id displayName memoryInGb secureCloud communityCloud "
          "lowestPrice(input: {gpuCount: 1, dataCenterId: " +
          GraphQLString(dc.id) +
          "}) { uninterruptablePrice minimumBidPrice stockStatus availableGpuCounts minVcpu "
          "minMemory } } }";
      auto page = Call("gpuTypes", q, true);
      if (!page.ok()) return page.error();
      auto offers = runpod::DecodeOffers(*page, dc.id);
      if (!offers.ok()) return Recorded("gpuTypes", offers.error());
      for (auto& o : *offers) {
        if (!o.gpu_type_known || !o.region_known) {
          log::Debug("runpod offer with a name the tables do not know",
                     {{"gpu", o.provider_gpu_name}, {"dataCenter", o.provider_region}});
        }
        out.push_back(std::move(o));
      }
    }
    return out;
  }

  Result<Instance> Create(const LaunchRequest& r) override {
    if (!r.offer) return MakeError(ErrorKind::kInvalid, "runpod: create without an offer");
    const Offer& o = *r.offer;
    auto attr = [&](const char* k) {
      auto it = o.attributes.find(k);
      return it == o.attributes.end() ? std::string() : it->second;
    };
    std::string gpu_type = attr("gpuTypeId");
    std::string dc = attr("dataCenterId");
    if (gpu_type.empty()) gpu_type = o.provider_gpu_name;
    if (dc.empty()) dc = o.provider_region;
    if (gpu_type.empty() || o.gpu_count < 1) {
      return MakeError(ErrorKind::kInvalid, "runpod: offer " + o.id + " is not a RunPod offer");
    }
    const BootPayload& p = r.payload;
    if (p.image.empty()) {
      return MakeError(ErrorKind::kInvalid, "runpod: pods boot a container image; none given");
    }
    if (!p.user_data.empty() || !p.startup_script.empty()) {
      return MakeError(ErrorKind::kInvalid,
                       "runpod: pods take no user data or startup script (image, env, args only)");
    }
    if (p.env.count(runpod::kTagsEnv)) {
      return MakeError(ErrorKind::kInvalid,
                       std::string("runpod: env ") + runpod::kTagsEnv + " is reserved for tags");
    }
    std::string env = "[";
    auto add_env = [&](const std::string& k, const std::string& v) {
      if (env.size() > 1) env += ", ";
      env += "{key: " + GraphQLString(k) + ", value: " + GraphQLString(v) + "}";
    };
    for (const auto& [k, v] : p.env) add_env(k, v);
    auto tags = r.tags;
    if (!r.claim_uid.empty() && !tags.count("tgp.io/claim-uid"))
      tags["tgp.io/claim-uid"] = r.claim_uid;
    add_env(runpod::kTagsEnv, runpod::EncodeTags(tags));
    env += "]";
    std::string args;
    for (const auto& a : p.args) args += (args.empty() ? "" : " ") + a;
    // Published ports: runpod-python's `ports` ("8888/http,22/tcp", no spaces). A TCP port is
    // mapped on the pod's public IP (RUNPOD_PUBLIC_IP, RUNPOD_TCP_PORT_<port> in its env).
    std::string ports;
    for (int port : p.tcp_ports) {
      if (port < 1 || port > 65535) {
        return MakeError(ErrorKind::kInvalid,
                         "runpod: port " + std::to_string(port) + " cannot be published");
      }
      ports += (ports.empty() ? "" : ",") + std::to_string(port) + "/tcp";
    }

    std::string input =
        "name: " + GraphQLString(r.name) + ", imageName: " + GraphQLString(p.image) +
        ", gpuTypeId: " + GraphQLString(gpu_type) + ", gpuCount: " + std::to_string(o.gpu_count) +
        (dc.empty() ? "" : ", dataCenterId: " + GraphQLString(dc)) +
        ", cloudType: ALL, supportPublicIp: true, startSsh: false" +
        ", containerDiskInGb: 20, volumeInGb: 0, dockerArgs: " + GraphQLString(args) +
        (ports.empty() ? "" : ", ports: " + GraphQLString(ports)) + ", env: " + env;
    std::string method = "podFindAndDeployOnDemand";
    if (r.spot) {
      // bidPerGpu is required by podRentInterruptable; the bid covers the whole pod, rounded up
      // per GPU so the pod's bid is never below what the caller accepted.
      std::optional<MicroUsd> bid = r.bid ? r.bid : o.spot_price;
      if (!bid || *bid <= 0) {
        return MakeError(ErrorKind::kInvalid,
                         "runpod: spot create needs a bid (offer " + o.id + " has no minimum bid)");
      }
      MicroUsd per_gpu = (*bid + o.gpu_count - 1) / o.gpu_count;
      method = "podRentInterruptable";
      input = "bidPerGpu: " + runpod::GraphQLUsd(per_gpu) + ", " + input;
    }
    std::string q = "mutation { " + method + "(input: {" + input + "}) { " + kPodFields + " } }";
    auto body = Call(method, q, false);
    if (!body.ok()) return body.error();
    auto inst = runpod::DecodePod(*body, method);
    if (!inst.ok()) {
      // A null pod without errors: RunPod did not say what happened.
      return Recorded(
          method, KindOf(inst.error()) == ErrorKind::kNotFound
                      ? MakeError(ErrorKind::kAmbiguous, "runpod: " + method + " answered no pod")
                      : inst.error());
    }
    if (inst->tags.empty()) inst->tags = tags;
    log::Info("runpod pod created", {{"pod", inst->id},
                                     {"name", r.name},
                                     {"gpuType", gpu_type},
                                     {"dataCenter", dc},
                                     {"spot", r.spot}});
    return inst;
  }

  Result<Instance> Get(const std::string& id) override {
    auto body =
        Call("pod",
             "query Pod { pod(input: {podId: " + GraphQLString(id) + "}) { " + kPodFields + " } }",
             true);
    if (!body.ok()) return body.error();
    auto inst = runpod::DecodePod(*body, "pod");
    if (!inst.ok() && KindOf(inst.error()) != ErrorKind::kNotFound) {
      api_->RecordError("pod", inst.error());
    }
    return inst;
  }

  Result<std::vector<Instance>> List(const std::map<std::string, std::string>& tags) override {
    auto body =
        Call("pods", std::string("query Pods { myself { pods { ") + kPodFields + " } } }", true);
    if (!body.ok()) return body.error();
    auto pods = runpod::DecodePods(*body);
    if (!pods.ok()) return Recorded("pods", pods.error());
    std::vector<Instance> out;
    for (auto& i : *pods) {
      bool match = true;
      for (const auto& [k, v] : tags) {
        auto it = i.tags.find(k);
        if (it == i.tags.end() || it->second != v) match = false;
      }
      if (match) out.push_back(std::move(i));
    }
    return out;
  }

  Status Delete(const std::string& id) override {
    auto body = Call("podTerminate",
                     "mutation { podTerminate(input: {podId: " + GraphQLString(id) + "}) }", true);
    if (body.ok()) return {};
    ErrorKind kind = KindOf(body.error());
    if (kind != ErrorKind::kInternal && kind != ErrorKind::kInvalid) return body.error();
    // RunPod's answer for a pod that is already gone is not a documented code: ask for the pod,
    // and take "no such pod" as done (gone is success).
    auto pod = Get(id);
    if (!pod.ok() && KindOf(pod.error()) == ErrorKind::kNotFound) return {};
    if (pod.ok() && pod->state == InstanceState::kTerminated &&
        pod->provider_state == "TERMINATED") {
      return {};
    }
    return body.error();
  }

 private:
  Error Recorded(std::string_view method, Error e) {
    api_->RecordError(method, e);
    return e;
  }

  // One GraphQL request; a 200 with GraphQL errors is returned as the classified error.
  Result<std::string> Call(std::string_view method, const std::string& query, bool idempotent) {
    auto key = api_->credentials().Get();
    if (!key.ok()) return key.error();
    ApiCaller::Call call;
    call.method = method;
    call.idempotent = idempotent;
    call.request.method = "POST";
    call.request.target = "/graphql";
    call.request.headers = {{"content-type", "application/json"},
                            {"authorization", "Bearer " + *key}};
    call.request.body = json::serialize(json::object{{"query", query}});
    auto res = api_->Do(std::move(call), [](const net::Response& r) {
      return runpod::DecodeHttpError(r.status, r.body);
    });
    if (!res.ok()) return res.error();
    if (auto err = runpod::ErrorsIn(res->body)) return Recorded(method, *err);
    return std::move(res->body);
  }

  std::unique_ptr<ApiCaller> api_;
};

}  // namespace

Result<std::unique_ptr<Provider>> NewRunPod(const ProviderConfig& config) {
  auto api = ApiCaller::Create(config, kRunPodEndpoint, kDefaultRps, kDefaultBurst);
  if (!api.ok()) return api.error();
  return std::unique_ptr<Provider>(new RunPod(std::move(*api)));
}

}  // namespace hyperslice::gpu::providers
