// Built when libtss2 is missing: the verifier side works, the prover says why it cannot.
#include "src/runners/attest/attest.h"

namespace hyperslice::runners::attest {

Result<std::unique_ptr<Prover>> Prover::Open(const ProverConfig&) {
  return Error::Make(Error::Code::kUnavailable,
                     "built without libtss2 (Debian libtss2-dev): no TPM prover", "NoTss");
}

}  // namespace hyperslice::runners::attest
