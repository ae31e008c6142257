// Lambda Cloud client: gpu::Provider over the Lambda Cloud API /api/v1, as Lambda's published
// OpenAPI document 1.8.3 defines it (see README.md in this folder for the calls, tags, errors,
// limits and sources).
//
// - Auth: "Authorization: Bearer <API key>" (the document's recommended form; HTTP Basic with the
//   key as user name is the other accepted form).
// - Rate limits (OpenAPI 1.8.3 info.description): "Requests to the API are generally limited to
//   one request per second. Requests to the /instance-operations/launch endpoint are limited to
//   one request per 12 seconds, or five requests per minute." Two token buckets: 1/s for every
//   call but launch, 1/12 s for launch (burst 1 each). ProviderConfig::requests_per_second/burst
//   replace both when set.
// - No spot market: Capabilities::spot is false and a spot LaunchRequest is refused.
#include <boost/json.hpp>

#include "src/gpu/internal/api_caller.h"
#include "src/gpu/normalize.h"
#include "src/gpu/providers/clients.h"
#include "src/gpu/providers/lambda/decode.h"

namespace hyperslice::gpu::providers {

namespace {

namespace json = boost::json;
namespace lc = lambda;
using internal::ApiCaller;

constexpr double kRps = 1.0;             // every call but launch
constexpr double kLaunchRps = 1.0 / 12;  // launch: one per 12 seconds
constexpr char kApi[] = "/api/v1";

Error Refuse(std::string message) {
  return MakeError(ErrorKind::kInvalid, std::string(kLambda) + ": " + std::move(message));
}

// An image id is a UUID ("43336648-096d-4cba-9aa2-f9bb7727639d"); anything else is a family
// ("ubuntu-lts"), the two ImageSpecification forms of InstanceLaunchRequest.image.
bool IsUuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (s[i] == '-')) return false;
    if (!dash && !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

class LambdaProvider final : public Provider {
 public:
  LambdaProvider(std::unique_ptr<ApiCaller> api, std::unique_ptr<ApiCaller> launch)
      : api_(std::move(api)), launch_(std::move(launch)) {}

  const char* name() const override { return kLambda; }

  Capabilities capabilities() const override {
    return {.spot = false,
            .price_api = true,
            .tags = true,
            .max_user_data_bytes = lc::kMaxUserDataBytes};
  }

  Status CheckCredentials() override {
    // The cheapest authenticated read: the account's SSH keys (a short list).
    auto r = Call(*api_, "ssh-keys.list", "GET", "/ssh-keys", "");
    if (!r.ok()) return r.error();
    return OkStatus();
  }

  Result<std::vector<Offer>> ListOffers() override {
    auto r = Call(*api_, "instance-types.list", "GET", "/instance-types", "");
    if (!r.ok()) return r.error();
    return Decoded("instance-types.list", lc::DecodeInstanceTypes(r->body));
  }

  Result<Instance> Create(const LaunchRequest& request) override {
    auto body = LaunchBody(request);
    if (!body.ok()) return body.error();
    auto r = Call(*launch_, "launch", "POST", "/instance-operations/launch", *body,
                  /*idempotent=*/false);
    if (!r.ok()) {
      // On launch, "does not exist" names something the request referred to (the SSH key, the
      // instance type): the request is wrong, not an instance missing.
      if (KindOf(r.error()) == ErrorKind::kNotFound) {
        return MakeError(ErrorKind::kInvalid, r.error().message, r.error().http_status);
      }
      return r.error();
    }
    auto ids = Decoded("launch", lc::DecodeLaunch(r->body));
    if (!ids.ok()) {
      // Lambda answered 2xx, so the machine may exist: the caller must look before relaunching.
      return MakeError(ErrorKind::kAmbiguous, ids.error().message);
    }
    // Built from the request rather than read back: a Get would spend another second of the
    // account's rate limit, and the next Get shows the provider's view anyway.
    const Offer& offer = *request.offer;
    Instance inst;
    inst.provider = kLambda;
    inst.id = ids->front();
    inst.name = request.name;
    inst.state = InstanceState::kPending;
    inst.provider_state = "booting";
    inst.tags = request.tags;
    inst.offer_id = offer.id;
    inst.gpu_type = offer.gpu_type;
    inst.gpu_count = offer.gpu_count;
    inst.region = offer.region;
    inst.price = offer.on_demand_price;
    return inst;
  }

  Result<Instance> Get(const std::string& id) override {
    if (id.empty()) return Refuse("an instance id is required");
    auto r = Call(*api_, "instances.get", "GET", "/instances/" + net::UrlEncode(id), "");
    if (!r.ok()) return r.error();
    return Decoded("instances.get", lc::DecodeInstance(r->body));
  }

  Result<std::vector<Instance>> List(const std::map<std::string, std::string>& tags) override {
    auto r = Call(*api_, "instances.list", "GET", "/instances", "");
    if (!r.ok()) return r.error();
    auto all = Decoded("instances.list", lc::DecodeInstances(r->body));
    if (!all.ok()) return all.error();
    std::vector<Instance> out;
    for (auto& inst : *all) {
      bool match = true;
      for (const auto& [k, v] : tags) {
        auto it = inst.tags.find(k);
        if (it == inst.tags.end() || it->second != v) {
          match = false;
          break;
        }
      }
      if (match) out.push_back(std::move(inst));
    }
    return out;
  }

  Status Delete(const std::string& id) override {
    if (id.empty()) return Refuse("an instance id is required");
    json::object body{{"instance_ids", json::array{json::value(id)}}};
    // Terminating twice is harmless, so the call is retried like a read.
    auto r =
        Call(*api_, "terminate", "POST", "/instance-operations/terminate", json::serialize(body));
    if (!r.ok()) {
      // 404 global/object-does-not-exist: already gone, which is what was asked.
      if (KindOf(r.error()) == ErrorKind::kNotFound) return OkStatus();
      return r.error();
    }
    return OkStatus();
  }

 private:
  Result<net::Response> Call(ApiCaller& caller, std::string_view method, const char* verb,
                             const std::string& path, std::string body, bool idempotent = true) {
    auto key = caller.credentials().Get();
    if (!key.ok()) return key.error();
    return caller.Do(ApiCaller::BearerJson(method, verb, std::string(kApi) + path, *key,
                                           std::move(body), idempotent),
                     lc::DecodeError);
  }

  // A 2xx whose body is not the documented shape is counted as an error of that method.
  template <typename T>
  Result<T> Decoded(std::string_view method, Result<T> r) {
    if (!r.ok()) api_->RecordError(method, r.error());
    return r;
  }

  // InstanceLaunchRequest (OpenAPI 1.8.3): region_name, instance_type_name, ssh_key_names
  // (required; "exactly one"), name, image, user_data, tags[{key,value}]. `quantity`, in older
  // versions of the document, is not part of 1.8.3 and is not sent.
  static Result<std::string> LaunchBody(const LaunchRequest& request) {
    if (request.offer == nullptr) return Refuse("a launch needs an offer");
    const Offer& offer = *request.offer;
    if (offer.provider != kLambda) {
      return Refuse("offer " + offer.id + " is from provider " + offer.provider);
    }
    if (offer.id.empty() || offer.provider_region.empty()) {
      return Refuse("the offer names no instance type or region");
    }
    if (request.spot) return Refuse("Lambda Cloud sells no spot or interruptible instances");
    const BootPayload& p = request.payload;
    if (p.ssh_key_names.size() != 1 || p.ssh_key_names.front().empty()) {
      return Refuse(
          "a launch needs exactly one SSH key name (BootPayload.ssh_key_names): the "
          "API requires exactly one, and it must exist in the account");
    }
    if (p.user_data.size() > lc::kMaxUserDataBytes) {
      return Refuse("user data is " + std::to_string(p.user_data.size()) +
                    " bytes; Lambda takes at most " + std::to_string(lc::kMaxUserDataBytes));
    }
    if (!p.startup_script.empty() || !p.env.empty() || !p.args.empty()) {
      return Refuse(
          "Lambda instances boot from cloud-init user data only; a startup script, "
          "container env or args cannot be carried");
    }
    if (request.name.size() > lc::kMaxNameBytes) {
      return Refuse("instance name \"" + request.name + "\" is longer than " +
                    std::to_string(lc::kMaxNameBytes) + " characters");
    }
    json::object o;
    o["region_name"] = offer.provider_region;
    o["instance_type_name"] = offer.id;
    o["ssh_key_names"] = json::array{json::value(p.ssh_key_names.front())};
    if (!request.name.empty()) o["name"] = request.name;
    if (!p.image.empty()) {
      o["image"] =
          IsUuid(p.image) ? json::object{{"id", p.image}} : json::object{{"family", p.image}};
    }
    if (!p.user_data.empty()) o["user_data"] = p.user_data;
    json::array tags;
    for (const auto& [k, v] : request.tags) {
      auto key = lc::EncodeTagKey(k);
      if (!key.ok()) return key.error();
      if (v.size() > lc::kMaxTagValueBytes) {
        return Refuse("tag " + k + ": value longer than " + std::to_string(lc::kMaxTagValueBytes) +
                      " characters");
      }
      tags.push_back(json::object{{"key", *key}, {"value", v}});
    }
    if (!tags.empty()) o["tags"] = std::move(tags);
    return json::serialize(o);
  }

  std::unique_ptr<ApiCaller> api_;
  std::unique_ptr<ApiCaller> launch_;
};

}  // namespace

Result<std::unique_ptr<Provider>> NewLambda(const ProviderConfig& config) {
  auto api = ApiCaller::Create(config, kLambdaEndpoint, kRps, 1);
  if (!api.ok()) return api.error();
  auto launch = ApiCaller::Create(config, kLambdaEndpoint, kLaunchRps, 1);
  if (!launch.ok()) return launch.error();
  return std::unique_ptr<Provider>(new LambdaProvider(std::move(*api), std::move(*launch)));
}

}  // namespace hyperslice::gpu::providers
