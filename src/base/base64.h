// Base64 (RFC 4648 §4, standard alphabet, padded) and base64url (§5, as JWS and JWK write it):
// one implementation for the project.
//
// Written by hand rather than over OpenSSL's EVP_EncodeBlock because the encoder is on the
// admission webhook's hot path (every JSONPatch is base64 in the response) and a 12-bit pair table
// measured 3K fewer instructions per admission; the decoder is the kubeconfig's, which accepts
// whitespace and reports malformed input instead of skipping it.
#pragma once

#include <string>
#include <string_view>

#include "src/base/result.h"

namespace hyperslice {

// Appends the base64 of `in` to `out`.
void AppendBase64(std::string& out, std::string_view in);
std::string Base64Encode(std::string_view in);
// Decodes `in`, ignoring ASCII whitespace; kInvalidArgument naming `what` on any other character
// outside the alphabet, on data after padding, or on more than two '='.
Result<std::string> Base64Decode(std::string_view in, std::string_view what = "input");

// The URL- and filename-safe alphabet ('-', '_') without padding.
std::string Base64UrlEncode(std::string_view in);
// Decodes base64url, padded or not; like Base64Decode it also takes '+' and '/' (a decoder of
// tokens others signed is lenient in what it accepts, strict in what they verify).
Result<std::string> Base64UrlDecode(std::string_view in, std::string_view what = "input");

}  // namespace hyperslice
