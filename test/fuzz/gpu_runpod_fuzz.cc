// libFuzzer target over the RunPod client's response decoders
// (src/gpu/providers/runpod/decode.h): data centers, GPU types with lowestPrice, pods, the pod
// list, myself, and the GraphQL/HTTP error classification, on arbitrary bytes.
//
// Whatever RunPod (or a broken proxy) answers, decoding must not crash or hit UB (ASan/UBSan) and
// must be deterministic; offers are RunPod container offers with positive GPU counts and
// non-negative prices (spot and on-demand are whole-pod multiples of the per-GPU price); an
// instance has an id; a classified error carries a provider kind and a message.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "src/gpu/providers/runpod/decode.h"
#include "test/fuzz/gpu_fuzz_check.h"

namespace {

namespace rp = hyperslice::gpu::providers::runpod;
using hyperslice::gpu::ErrorKind;

void Check(bool ok, const char* what) { hyperslice::gpu::fuzz::Check(ok, "gpu_runpod", what); }

bool SameError(const hyperslice::Error& a, const hyperslice::Error& b) {
  return a.code == b.code && a.reason == b.reason && a.message == b.message &&
         a.http_status == b.http_status;
}

template <typename R>
bool SameStatus(const R& a, const R& b) {
  if (a.ok() != b.ok()) return false;
  return a.ok() || SameError(a.error(), b.error());
}

bool SameInstance(const hyperslice::gpu::Instance& a, const hyperslice::gpu::Instance& b) {
  return a.id == b.id && a.name == b.name && a.state == b.state && a.tags == b.tags &&
         a.spot == b.spot && a.reclaimed == b.reclaimed && a.price == b.price &&
         a.offer_id == b.offer_id && a.public_ip == b.public_ip;
}

void CheckInstance(const hyperslice::gpu::Instance& i) {
  Check(!i.id.empty(), "an instance without an id");
  Check(i.provider == hyperslice::gpu::kRunPod, "an instance of another provider");
  Check(!i.reclaimed || i.spot, "a reclaimed on-demand pod");
  Check(!i.price || *i.price >= 0, "a negative pod price");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);

  auto dcs = rp::DecodeDataCenters(body);
  Check(SameStatus(dcs, rp::DecodeDataCenters(body)), "DecodeDataCenters not deterministic");
  if (dcs.ok()) {
    for (const auto& d : *dcs) Check(!d.id.empty(), "a data center without an id");
  }

  auto offers = rp::DecodeOffers(body, "US-CA-2");
  auto offers2 = rp::DecodeOffers(body, "US-CA-2");
  Check(SameStatus(offers, offers2), "DecodeOffers not deterministic");
  if (offers.ok()) {
    Check(hyperslice::gpu::fuzz::SameOffers(*offers, *offers2), "DecodeOffers not deterministic");
    for (const auto& o : *offers) {
      Check(o.gpu_count >= 1 && o.gpu_count <= 64, "an offer with a bad GPU count");
      Check(o.boot == hyperslice::gpu::BootKind::kContainer,
            "a RunPod offer that is not a container");
      Check(o.on_demand_price || o.spot_price, "an offer without any price");
      if (o.on_demand_price) {
        Check(*o.on_demand_price > 0 && *o.on_demand_price % o.gpu_count == 0,
              "an on-demand price that is not a whole-pod multiple");
      }
      if (o.spot_price) {
        Check(*o.spot_price > 0 && *o.spot_price % o.gpu_count == 0,
              "a spot price that is not a whole-pod multiple");
      }
      Check(o.provider_region == "US-CA-2" && o.attributes.at("dataCenterId") == "US-CA-2",
            "an offer in another data center");
      Check(!o.gpu_type.empty(), "an offer without a GPU type");
    }
  }

  for (std::string_view field : {"pod", "podFindAndDeployOnDemand", "podRentInterruptable"}) {
    auto pod = rp::DecodePod(body, field);
    auto pod2 = rp::DecodePod(body, field);
    Check(SameStatus(pod, pod2), "DecodePod not deterministic");
    if (pod.ok()) {
      Check(SameInstance(*pod, *pod2), "DecodePod not deterministic");
      CheckInstance(*pod);
    }
  }

  auto pods = rp::DecodePods(body);
  auto pods2 = rp::DecodePods(body);
  Check(SameStatus(pods, pods2), "DecodePods not deterministic");
  if (pods.ok()) {
    Check(pods->size() == pods2->size(), "DecodePods not deterministic");
    for (size_t k = 0; k < pods->size(); ++k) {
      Check(SameInstance((*pods)[k], (*pods2)[k]), "DecodePods not deterministic");
      CheckInstance((*pods)[k]);
    }
  }

  Check(SameStatus(rp::DecodeMyself(body), rp::DecodeMyself(body)),
        "DecodeMyself not deterministic");

  for (int status : {200, 400, 401, 429, 503}) {
    auto e = rp::DecodeHttpError(status, body);
    Check(SameError(e, rp::DecodeHttpError(status, body)), "DecodeHttpError not deterministic");
    Check(!e.message.empty(), "an error without a message");
    Check(e.http_status == status, "an error without its HTTP status");
    auto kind = hyperslice::gpu::KindOf(e);
    if (status == 401) Check(kind == ErrorKind::kUnauthorized, "401 not unauthorized");
    if (status == 429) Check(kind == ErrorKind::kRateLimited, "429 not rate limited");
    if (status == 503) Check(kind == ErrorKind::kTransient, "503 not transient");
    if (status == 400) {
      Check(kind != ErrorKind::kInternal && kind != ErrorKind::kTransient &&
                kind != ErrorKind::kAmbiguous,
            "400 classified as a server-side failure");
    }
  }
  auto in = rp::ErrorsIn(body);
  auto in2 = rp::ErrorsIn(body);
  Check(in.has_value() == in2.has_value() && (!in || SameError(*in, *in2)),
        "ErrorsIn not deterministic");

  // Tags survive their own encoding whatever the pod env held.
  auto tags = rp::DecodeTags(body);
  Check(rp::DecodeTags(rp::EncodeTags(tags)) == tags, "tags do not round-trip");
  return 0;
}
