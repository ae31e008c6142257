#include "src/gpu/credentials.h"

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/strings.h"
#include "src/gpu/provider.h"
#include "src/kube/client.h"
#include "src/kube/resource.h"

namespace hyperslice::gpu {

namespace {

class Static final : public CredentialSource {
 public:
  explicit Static(std::string v) : v_(std::move(v)) {}
  Result<std::string> Get() override {
    if (v_.empty()) return MakeError(ErrorKind::kUnauthorized, "empty API key");
    return v_;
  }

 private:
  std::string v_;
};

class FromSecret final : public CredentialSource {
 public:
  FromSecret(std::shared_ptr<kube::Client> client, SecretRef ref, std::string default_ns,
             std::chrono::seconds ttl, Clock* clock)
      : client_(std::move(client)), ref_(std::move(ref)), ttl_(ttl), clock_(clock) {
    if (ref_.ns.empty()) ref_.ns = std::move(default_ns);
  }

  Result<std::string> Get() override {
    std::lock_guard lock(mu_);
    auto now = clock_->Now();
    if (cached_ && now < fetched_ + ttl_) return *cached_;
    std::string where = "Secret " + ref_.ns + "/" + ref_.name + " key \"" + ref_.key + "\"";
    auto secret = client_->Get(kube::resources::Secrets(), ref_.ns, ref_.name);
    if (!secret.ok()) {
      if (secret.error().code == Error::Code::kNotFound) {
        return MakeError(ErrorKind::kUnauthorized, where + ": the Secret does not exist");
      }
      return MakeError(ErrorKind::kTransient, where + ": " + secret.error().message);
    }
    const auto* data = secret->if_contains("data");
    const boost::json::value* v = nullptr;
    if (data && data->is_object()) v = data->get_object().if_contains(ref_.key);
    if (!v || !v->is_string()) {
      return MakeError(ErrorKind::kUnauthorized, where + ": no such key in the Secret");
    }
    auto decoded = Base64Decode(std::string_view(v->get_string()), "the Secret value");
    if (!decoded.ok()) {
      return MakeError(ErrorKind::kUnauthorized, where + ": the value is not base64");
    }
    // `kubectl create secret --from-file` keeps the file's newline.
    std::string value = TrimSpace(*decoded);
    if (value.empty()) return MakeError(ErrorKind::kUnauthorized, where + ": the value is empty");
    cached_ = value;
    fetched_ = now;
    return value;
  }

  void Invalidate() override {
    std::lock_guard lock(mu_);
    cached_.reset();
  }

 private:
  std::shared_ptr<kube::Client> client_;
  SecretRef ref_;
  std::chrono::seconds ttl_;
  Clock* clock_;
  std::mutex mu_;
  std::optional<std::string> cached_;
  Clock::TimePoint fetched_{};
};

}  // namespace

std::shared_ptr<CredentialSource> StaticCredential(std::string value) {
  return std::make_shared<Static>(std::move(value));
}

std::shared_ptr<CredentialSource> SecretCredential(std::shared_ptr<kube::Client> client,
                                                   SecretRef ref, std::string default_namespace,
                                                   std::chrono::seconds ttl, Clock* clock) {
  return std::make_shared<FromSecret>(std::move(client), std::move(ref),
                                      std::move(default_namespace), ttl, clock);
}

}  // namespace hyperslice::gpu
