#include "sim/market/simulator.h"

#include <utility>

#include "src/base/log.h"

namespace hyperslice::sim::market {

namespace {

class Server final : public MarketSimulator {
 public:
  Result<bool> Start(ServerOptions options, const ApiFactory& make_api) {
    market_ = std::make_unique<Market>(std::move(options.market));
    api_ = make_api(*market_);
    if (!api_) {
      return Error::Make(Error::Code::kInternal,
                         market_->options().provider + " simulator: no API handler");
    }
    net::HttpServer::Options o;
    o.address = options.address;
    o.threads = options.threads;
    o.port = options.api_port;
    auto api = net::HttpServer::Start(
        o, [this](const net::ServerRequest& r, std::shared_ptr<net::Responder> out) {
          api_->Handle(r, std::move(out));
        });
    if (!api.ok()) return api.error();
    api_server_ = std::move(*api);
    o.port = options.control_port;
    o.threads = 1;
    auto control = net::HttpServer::Start(
        o, [this](const net::ServerRequest& r, std::shared_ptr<net::Responder> out) {
          auto res = HandleControl(*market_, r.method, r.path, r.body);
          if (!res) {
            out->Send(404, R"({"error":"not a control route"})");
            return;
          }
          out->Send(res->status, std::move(res->body));
        });
    if (!control.ok()) return control.error();
    control_server_ = std::move(*control);
    address_ = options.address;
    return true;
  }

  ~Server() override { Stop(); }

  std::string api_endpoint() const override {
    return "http://" + address_ + ":" + std::to_string(api_server_->port());
  }
  std::string control_endpoint() const override {
    return "http://" + address_ + ":" + std::to_string(control_server_->port());
  }
  Market& market() override { return *market_; }
  void Stop() override {
    if (api_server_) api_server_->Stop(std::chrono::milliseconds(1000));
    if (control_server_) control_server_->Stop(std::chrono::milliseconds(1000));
  }

 private:
  std::unique_ptr<Market> market_;
  std::unique_ptr<ProviderApi> api_;
  std::unique_ptr<net::HttpServer> api_server_, control_server_;
  std::string address_;
};

}  // namespace

Result<std::unique_ptr<MarketSimulator>> StartMarketSimulator(ServerOptions options,
                                                              ApiFactory make_api) {
  auto s = std::make_unique<Server>();
  auto ok = s->Start(std::move(options), make_api);
  if (!ok.ok()) return ok.error();
  return std::unique_ptr<MarketSimulator>(std::move(s));
}

}  // namespace hyperslice::sim::market
