// libFuzzer target over the Vast.ai client's response decoders (src/gpu/providers/vast/decode.h):
// search offers, show instance, a v1 instances page, the create answer, error bodies for every
// call, and the label that carries our name and tags.
//
// Whatever Vast (or a broken proxy) answers, decoding must not crash or hit UB (ASan/UBSan), must
// be deterministic, must keep every offer that has an id, and must classify every error answer
// with a message. A label we encode must decode to the same name and tags.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "src/gpu/providers/vast/decode.h"
#include "test/fuzz/gpu_fuzz_check.h"

namespace {

namespace vast = hyperslice::gpu::providers::vast;
using hyperslice::gpu::ErrorKind;
using hyperslice::gpu::KindOf;

void Check(bool ok, const char* what) { hyperslice::gpu::fuzz::Check(ok, "gpu_vast", what); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);

  auto offers = vast::DecodeOffers(in);
  auto offers2 = vast::DecodeOffers(in);
  Check(offers.ok() == offers2.ok(), "DecodeOffers not deterministic");
  if (offers.ok()) {
    Check(hyperslice::gpu::fuzz::SameOffers(*offers, *offers2), "DecodeOffers not deterministic");
    for (const auto& o : *offers) {
      Check(!o.id.empty(), "an offer without an id");
      Check(o.gpu_count >= 0 && o.vcpus >= 0 && o.gpu_memory_gib >= 0 && o.memory_gib >= 0,
            "negative offer sizes");
      Check(!o.on_demand_price || *o.on_demand_price > 0, "a non-positive on-demand price");
      Check(o.gpu_type_known || o.gpu_type == o.provider_gpu_name,
            "an unknown GPU name not kept as the provider spells it");
    }
  } else {
    Check(!offers.error().message.empty(), "a decode error without a message");
  }

  auto inst = vast::DecodeInstance(in);
  if (inst.ok() && inst->has_value()) Check(!(*inst)->id.empty(), "an instance without an id");
  auto page = vast::DecodeInstancePage(in);
  if (page.ok()) {
    for (const auto& i : page->instances) Check(!i.id.empty(), "a listed instance without an id");
  }
  auto created = vast::DecodeCreate(in);
  if (created.ok()) Check(!created->empty(), "a create without an instance id");

  hyperslice::net::Response r;
  r.status = 400 + static_cast<int>(size % 200);
  r.body = std::string(in);
  r.headers = {{"retry-after", std::string(in.substr(0, 8))}};
  for (auto call : {vast::Call::kOffers, vast::Call::kCreate, vast::Call::kGet, vast::Call::kList,
                    vast::Call::kDelete, vast::Call::kUser}) {
    auto e = vast::DecodeError(call, r);
    Check(!e.message.empty(), "an error without a message");
    Check(e.http_status == r.status, "an error without its status");
    if (r.status == 429) Check(KindOf(e) == ErrorKind::kRateLimited, "429 not rate limited");
    if (e.retry_after) Check(e.retry_after->count() >= 0, "a negative retry-after");
  }

  // Labels: anything decodes; what we encode comes back.
  std::string name;
  std::map<std::string, std::string> tags;
  vast::DecodeLabel(in, &name, &tags);
  size_t cut = size / 2;
  std::map<std::string, std::string> want = {{std::string(in.substr(0, cut)), "v"},
                                             {"k", std::string(in.substr(cut))}};
  if (want.begin()->first.empty()) want.erase(want.begin());
  std::string label = vast::EncodeLabel(in.substr(cut), want);
  vast::DecodeLabel(label, &name, &tags);
  if (cut < size) {
    Check(name == in.substr(cut), "label name does not round-trip");
    Check(tags == want, "label tags do not round-trip");
  }
  return 0;
}
