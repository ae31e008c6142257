// MarketSimulator: one GPU marketplace simulator as a server — the provider's API on one loopback
// listener (its paths, bodies and errors, by the provider's ProviderApi) and the shared /control
// endpoint (market.h) on another — over one Market.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "sim/market/market.h"
#include "src/base/result.h"
#include "src/net/server.h"

namespace hyperslice::sim::market {

// A provider's wire API over the market. Handle() runs on a server thread; it may block for the
// injected latency (the server has several threads).
class ProviderApi {
 public:
  virtual ~ProviderApi() = default;
  virtual void Handle(const net::ServerRequest& request, std::shared_ptr<net::Responder> out) = 0;
};

struct ServerOptions {
  Options market;
  std::string address = "127.0.0.1";
  uint16_t api_port = 0, control_port = 0;  // 0: a free port
  int threads = 4;
};

class MarketSimulator {
 public:
  virtual ~MarketSimulator() = default;
  virtual std::string api_endpoint() const = 0;      // "http://127.0.0.1:<port>"
  virtual std::string control_endpoint() const = 0;  // "http://127.0.0.1:<port>"
  virtual Market& market() = 0;
  virtual void Stop() = 0;
};

using ApiFactory = std::function<std::unique_ptr<ProviderApi>(Market&)>;
Result<std::unique_ptr<MarketSimulator>> StartMarketSimulator(ServerOptions options,
                                                              ApiFactory make_api);

}  // namespace hyperslice::sim::market
