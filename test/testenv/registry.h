// The runner tests' local OCI registry and test images: src/localregistry, under the names the
// tests use.
#pragma once

#include "src/localregistry/localregistry.h"

namespace hyperslice::testenv {

using LocalRegistry = localregistry::Registry;
using localregistry::RunnerToolsMissing;

}  // namespace hyperslice::testenv
