// The key broker's HTTP resource endpoint (kbs.h).
#include <boost/json.hpp>

#include "src/base/log.h"
#include "src/runners/kbs/kbs.h"

namespace hyperslice::runners::kbs {
namespace {

namespace json = boost::json;
constexpr char kPrefix[] = "/kbs/v0/resource/";

void Answer(const std::shared_ptr<net::Responder>& r, int status, const std::string& reason,
            const std::string& message) {
  r->Send(status, json::serialize(json::object{{"error", reason}, {"message", message}}));
}

}  // namespace

net::Handler NewResourceHandler(std::function<Result<Secret>(const std::string& name)> lookup,
                                std::function<Verifier()> verifier) {
  return [lookup = std::move(lookup), verifier = std::move(verifier)](
             const net::ServerRequest& req, const std::shared_ptr<net::Responder>& r) {
    if (req.path.rfind(kPrefix, 0) != 0 || req.path.size() == sizeof(kPrefix) - 1) {
      return Answer(r, 404, "NotFound", "no resource at " + req.path);
    }
    if (req.method != "POST") return Answer(r, 405, "MethodNotAllowed", "use POST");
    const std::string name = req.path.substr(sizeof(kPrefix) - 1);
    std::string auth = req.Header("authorization");
    std::string token = auth.rfind("Bearer ", 0) == 0 ? auth.substr(7) : "";
    boost::system::error_code ec;
    json::value body = json::parse(req.body, ec);
    const json::value* key =
        !ec && body.is_object() ? body.as_object().if_contains("publicKey") : nullptr;
    if (key == nullptr || !key->is_string()) {
      return Answer(r, 400, "BadRequest", R"(the body must be {"publicKey": "<PEM>"})");
    }
    auto secret = lookup(name);
    if (!secret.ok()) {
      log::Info("kbs: resource refused", {{"resource", name}, {"reason", "NotFound"}});
      return Answer(r, 404, "NotFound", "no secret " + name);
    }
    auto sealed =
        Release({token, std::string(key->as_string())}, secret->policy, secret->value, verifier());
    if (!sealed.ok()) {
      int status = sealed.error().http_status ? sealed.error().http_status : 400;
      log::Info("kbs: resource refused",
                {{"resource", name}, {"status", status}, {"reason", sealed.error().reason}});
      return Answer(r, status, sealed.error().reason.empty() ? "BadRequest" : sealed.error().reason,
                    sealed.error().message);
    }
    log::Info("kbs: resource released", {{"resource", name}});
    r->Send(200, *sealed);
  };
}

}  // namespace hyperslice::runners::kbs
