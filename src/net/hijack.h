// What Responder::Hijack hands over: the connection's stream, on Boost.Beast types (hence a header
// of its own, for the few servers that speak another protocol after an HTTP request).
#pragma once

#include <memory>
#include <optional>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "src/net/server.h"

namespace hyperslice::net {

struct HijackedConnection {
  // Keeps alive what the stream needs (the server's io_context and the TLS context the connection
  // started with). Declared first so that a moved-into owner outlives the streams below; whoever
  // takes the streams keeps this with them and destroys it after them.
  std::shared_ptr<const void> owner;
  // One of the two: the TLS stream of a TLS server, the TCP stream of a plain one. Its executor
  // is the connection's (a strand when the server runs several threads).
  std::optional<boost::beast::ssl_stream<boost::beast::tcp_stream>> tls;
  std::optional<boost::beast::tcp_stream> plain;
  // Bytes the server read past the request (e.g. frames a client sent right behind an upgrade).
  boost::beast::flat_buffer buffer;
};

}  // namespace hyperslice::net
