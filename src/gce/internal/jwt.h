// RS256 JSON Web Tokens for the OAuth2 jwt-bearer grant (RFC 7523), signed with OpenSSL EVP.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"
#include "src/gce/auth.h"

namespace hyperslice::gce::internal {

// header {"alg":"RS256","typ":"JWT","kid":key.private_key_id}
// claims {"iss":client_email,"scope":"<scopes space-separated>","aud":audience,"iat":iat,
//         "exp":iat+3600}
// Errors: kInvalidArgument when the private key cannot be read.
Result<std::string> MakeJwtAssertion(const ServiceAccountKey& key, std::string_view audience,
                                     const std::vector<std::string>& scopes, int64_t iat);

// A random UUID v4 ("xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx"), from OpenSSL's CSPRNG.
std::string NewRequestId();

}  // namespace hyperslice::gce::internal
