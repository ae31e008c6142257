// libFuzzer target over the decoding of GCE status objects (src/gce/compute.h):
// OperationFromJson, LastAttemptError and ManagedInstanceError on arbitrary JSON.
//
// Whatever GCE (or a broken proxy) answers, decoding must not crash or hit UB (ASan/UBSan), and
// must be deterministic; a decoded operation that is DONE with an error carries a non-empty
// message, and an operation that is not DONE carries no error.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "src/gce/compute.h"

namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "status fuzz: %s\n", what);
  std::abort();
}

bool SameError(const std::optional<hyperslice::Error>& a,
               const std::optional<hyperslice::Error>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->code == b->code && a->reason == b->reason && a->message == b->message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  boost::system::error_code ec;
  boost::json::value v =
      boost::json::parse(std::string_view(reinterpret_cast<const char*>(data), size), ec);
  if (ec || !v.is_object()) return 0;
  const boost::json::object& o = v.as_object();

  auto op = hyperslice::gce::OperationFromJson(o);
  auto op2 = hyperslice::gce::OperationFromJson(o);
  Check(op.ok() == op2.ok(), "OperationFromJson not deterministic");
  if (op.ok()) {
    Check(op->status == op2->status && SameError(op->error, op2->error),
          "OperationFromJson not deterministic");
    if (op->error) Check(!op->error->message.empty(), "an operation error without a message");
    if (!op->done()) Check(!op->error.has_value(), "an error on an operation that is not DONE");
    (void)boost::json::serialize(op->json);
  }
  auto last = hyperslice::gce::LastAttemptError(o);
  Check(SameError(last, hyperslice::gce::LastAttemptError(o)),
        "LastAttemptError not deterministic");
  auto item = hyperslice::gce::ManagedInstanceError(o);
  Check(SameError(item, hyperslice::gce::ManagedInstanceError(o)),
        "ManagedInstanceError not deterministic");
  return 0;
}
