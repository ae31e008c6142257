// libFuzzer target over the Paperspace client's response decoders
// (src/gpu/providers/paperspace/decode.h): machines, machine events, lists, startup scripts,
// error bodies and their classification, and the tags carried in startup-script names.
//
// Whatever Paperspace (or a broken proxy) answers, decoding must not crash or hit UB (ASan/UBSan)
// and must be deterministic; a decoded machine has an id, a page that says hasMore has a cursor,
// an error always has a message, and tags that decode re-encode to the same name.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "src/gpu/providers/paperspace/decode.h"
#include "test/fuzz/gpu_fuzz_check.h"

namespace {

namespace ps = hyperslice::gpu::providers::paperspace;

void Check(bool ok, const char* what) { hyperslice::gpu::fuzz::Check(ok, "gpu_paperspace", what); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);

  for (auto decode : {&ps::DecodeMachine, &ps::DecodeMachineEvent}) {
    auto m = decode(in);
    auto m2 = decode(in);
    Check(m.ok() == m2.ok(), "machine decoding not deterministic");
    if (m.ok()) {
      Check(!m->id.empty(), "a machine without an id");
      Check(m->id == m2->id && m->state == m2->state, "machine decoding not deterministic");
      (void)ps::StateFromPaperspace(m->state);
    } else {
      Check(!m.error().message.empty(), "a decoding error without a message");
    }
  }
  if (auto page = ps::DecodeMachineList(in); page.ok()) {
    Check(!page->has_more || !page->next_page.empty(), "hasMore without a cursor");
    for (const auto& m : page->items) Check(!m.id.empty(), "a listed machine without an id");
  }
  if (auto s = ps::DecodeStartupScript(in); s.ok()) {
    Check(!s->id.empty(), "a startup script without an id");
  }
  if (auto page = ps::DecodeStartupScriptList(in); page.ok()) {
    Check(!page->has_more || !page->next_page.empty(), "hasMore without a cursor");
  }
  for (int status : {400, 401, 404, 409, 429, 500}) {
    auto e = ps::DecodeError(status, in);
    Check(!e.message.empty(), "an API error without a message");
    auto c = ps::ClassifyError(status, in, status == 400);
    auto c2 = ps::ClassifyError(status, in, status == 400);
    Check(c.reason == c2.reason && c.message == c2.message, "classification not deterministic");
    Check(!c.reason.empty(), "an error without a kind");
  }
  // Tags: the input as a script name, and as a tag value.
  if (auto tags = ps::DecodeTags(in)) {
    auto again = ps::DecodeTags(ps::EncodeTags(*tags));
    Check(again.has_value() && *again == *tags, "tags do not round-trip");
  }
  std::map<std::string, std::string> tags{{"k", std::string(in)}, {std::string(in) + "x", "v"}};
  auto back = ps::DecodeTags(ps::EncodeTags(tags));
  Check(back.has_value() && *back == tags, "encoded tags do not decode");
  return 0;
}
