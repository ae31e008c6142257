// What the client's responses and the server's requests share about received headers; for this
// module and its tests only.
#pragma once

#include <string>
#include <string_view>

#include "src/net/http.h"

namespace hyperslice::net::internal {

// The value of the first header named `name` (any case) among received headers, whose names are
// stored lower-cased; "" when there is none.
std::string HeaderValue(const Headers& headers, std::string_view name);

}  // namespace hyperslice::net::internal
