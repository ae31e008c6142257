// The admission webhook (src/webhook) of a test served in-process on 127.0.0.1, as the test's
// kube-apiserver calls it by URL: a serving pair from a fresh CA in a directory of its own, the
// server, and deploy/'s admission configurations pointed at it. One instead of a copy per webhook
// test. Header-only: the tests that use it link hs_webhook; hs_testenv does not.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <boost/json.hpp>

#include "src/base/files.h"
#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/kube/yaml.h"
#include "src/webhook/webhook.h"
#include "test/testenv/serving_pair.h"

namespace hyperslice::testenv {

class LocalWebhook {
 public:
  // Serves with `options`, whose TLS files become the pair written to <temp>/hs-<name>-<pid>;
  // `name` also names the CA (<name>-ca).
  static Result<std::unique_ptr<LocalWebhook>> Start(const std::string& name,
                                                     webhook::ServerOptions options) {
    std::unique_ptr<LocalWebhook> w(new LocalWebhook());
    w->dir_ =
        std::filesystem::temp_directory_path() / ("hs-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::create_directories(w->dir_);
    HS_ASSIGN_OR_RETURN(net::pki::KeyPair ca, WriteLoopbackServingPair(w->dir_, name + "-ca"));
    w->ca_pem_ = ca.cert_pem;
    options.tls_cert_file = (w->dir_ / "tls.crt").string();
    options.tls_key_file = (w->dir_ / "tls.key").string();
    HS_ASSIGN_OR_RETURN(w->server_, webhook::Server::Start(std::move(options)));
    return w;
  }
  LocalWebhook(const LocalWebhook&) = delete;
  LocalWebhook& operator=(const LocalWebhook&) = delete;
  ~LocalWebhook() {
    Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Stops serving (and the server's informers). A test binary whose environment lives until
  // exit calls it after its last test: a reflector still retrying while the statics it uses are
  // destroyed crashes the process.
  void Stop() { server_.reset(); }

  // "https://127.0.0.1:<port>".
  std::string url() const { return "https://127.0.0.1:" + std::to_string(server_->port()); }
  // The CA that issued the serving certificate (the configurations' caBundle, as PEM).
  const std::string& ca_pem() const { return ca_pem_; }

  // The admission configurations of `file` (deploy/webhook/base/webhooks.yaml) registered with
  // `client`'s apiserver, pointed at this server (webhook::RegisterConfigurations).
  Status Register(kube::Client& client, const std::string& file) const {
    return webhook::RegisterConfigurations(client, file, url(), ca_pem_);
  }
  // Only the configurations of `kind` in `file` (ValidatingWebhookConfiguration: a test that
  // wants the checks but not the mutations), registered as Register does: the documents are
  // written as JSON, which is YAML, to this server's directory and registered from there.
  Status Register(kube::Client& client, const std::string& file, std::string_view kind) const {
    HS_ASSIGN_OR_RETURN(std::string text, ::hyperslice::ReadFile(file));  // a Result, not files.h
    HS_ASSIGN_OR_RETURN(auto docs, kube::ObjectsFromYaml(text));
    std::string only;
    for (const boost::json::object& doc : docs) {
      const boost::json::value* k = doc.if_contains("kind");
      if (k != nullptr && k->is_string() && k->as_string() == kind) {
        only += boost::json::serialize(doc) + "\n---\n";
      }
    }
    const std::filesystem::path path = dir_ / (std::string(kind) + ".yaml");
    std::ofstream(path) << only;
    return Register(client, path.string());
  }

 private:
  LocalWebhook() = default;

  std::filesystem::path dir_;
  std::string ca_pem_;
  std::unique_ptr<webhook::Server> server_;
};

}  // namespace hyperslice::testenv
