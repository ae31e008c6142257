// libFuzzer target over the Lambda Cloud client's response decoders
// (src/gpu/providers/lambda/decode.h): instance types, instances, launch answers, error bodies
// and tag keys, on arbitrary bytes.
//
// Whatever Lambda (or a proxy in front of it) answers, decoding must not crash or hit UB
// (ASan/UBSan) and must be deterministic. Invariants: every offer is a Lambda offer with an id, a
// region, at least one GPU, a non-negative on-demand price and no spot price; every instance has
// an id and a provider state; a launch answer has at least one non-empty id; every decoded error
// has a message and keeps the HTTP status, and a 429 is always kRateLimited, a 5xx never
// kCapacity/kInvalid/kNotFound; a tag key that encodes decodes back to itself.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "src/gpu/providers/lambda/decode.h"
#include "test/fuzz/gpu_fuzz_check.h"

namespace {

namespace lc = hyperslice::gpu::providers::lambda;
using hyperslice::gpu::ErrorKind;
using hyperslice::gpu::KindOf;

void Check(bool ok, const char* what) { hyperslice::gpu::fuzz::Check(ok, "gpu_lambda", what); }

template <typename T>
void SameOutcome(const hyperslice::Result<T>& a, const hyperslice::Result<T>& b, const char* what) {
  Check(a.ok() == b.ok(), what);
  if (!a.ok()) Check(a.error().message == b.error().message, what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);

  auto offers = lc::DecodeInstanceTypes(body);
  SameOutcome(offers, lc::DecodeInstanceTypes(body), "DecodeInstanceTypes not deterministic");
  if (offers.ok()) {
    Check(offers->size() == lc::DecodeInstanceTypes(body)->size(),
          "DecodeInstanceTypes not deterministic");
    for (const auto& o : *offers) {
      Check(o.provider == hyperslice::gpu::kLambda, "an offer of another provider");
      Check(!o.id.empty() && !o.provider_region.empty() && !o.region.empty(),
            "an offer without an id or region");
      Check(o.gpu_count > 0, "an offer without GPUs");
      Check(o.on_demand_price && *o.on_demand_price >= 0, "an offer without a price");
      Check(!o.spot_price, "a spot price on Lambda");
      Check(o.available == 1, "an offer whose availability Lambda did not give");
      Check(!o.gpu_type.empty() || o.provider_gpu_name.empty(), "a GPU name dropped");
    }
  } else {
    Check(!offers.error().message.empty(), "an error without a message");
  }

  auto inst = lc::DecodeInstance(body);
  SameOutcome(inst, lc::DecodeInstance(body), "DecodeInstance not deterministic");
  if (inst.ok()) {
    Check(!inst->id.empty() && !inst->provider_state.empty(), "an instance without id or state");
    Check(inst->ProviderId() == "lambdalabs://" + inst->id, "a provider id of another provider");
  }
  auto list = lc::DecodeInstances(body);
  SameOutcome(list, lc::DecodeInstances(body), "DecodeInstances not deterministic");
  if (list.ok()) {
    for (const auto& i : *list) Check(!i.id.empty(), "a listed instance without an id");
  }
  auto ids = lc::DecodeLaunch(body);
  SameOutcome(ids, lc::DecodeLaunch(body), "DecodeLaunch not deterministic");
  if (ids.ok()) {
    Check(!ids->empty(), "a launch answer without ids");
    for (const auto& id : *ids) Check(!id.empty(), "an empty instance id");
  }

  // The same bytes as an error body under a status chosen by the first byte.
  static constexpr int kStatuses[] = {400, 401, 403, 404, 409, 429, 500, 502, 503};
  hyperslice::net::Response r;
  r.status = size > 0 ? kStatuses[data[0] % (sizeof(kStatuses) / sizeof(kStatuses[0]))] : 400;
  r.body = std::string(body);
  auto e = lc::DecodeError(r);
  auto e2 = lc::DecodeError(r);
  Check(e.message == e2.message && e.reason == e2.reason, "DecodeError not deterministic");
  Check(!e.message.empty(), "an error without a message");
  Check(e.http_status == r.status, "DecodeError lost the status");
  auto kind = KindOf(e);
  if (r.status == 429) Check(kind == ErrorKind::kRateLimited, "a 429 that is not rate limited");
  if (r.status >= 500) Check(kind == ErrorKind::kTransient, "a 5xx that is not transient");

  // Tag keys: whatever encodes comes back unchanged.
  std::string_view key = body.substr(0, std::min<size_t>(body.size(), 64));
  auto wire = lc::EncodeTagKey(key);
  if (wire.ok()) {
    Check(wire->size() <= lc::kMaxTagKeyBytes, "an encoded key over Lambda's limit");
    Check(lc::DecodeTagKey(*wire) == key, "a tag key that does not round-trip");
  }
  (void)lc::DecodeTagKey(key);
  return 0;
}
