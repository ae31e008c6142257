// RegisterConfigurations (webhook.h): deploy/'s admission configurations pointed at a URL.

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/files.h"
#include "src/kube/client.h"
#include "src/kube/yaml.h"
#include "src/webhook/webhook.h"

namespace hyperslice::webhook {

namespace json = boost::json;

Status RegisterConfigurations(kube::Client& client, const std::string& file,
                              const std::string& base_url, const std::string& ca_pem) {
  HS_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  auto docs = kube::ObjectsFromYaml(text);
  if (!docs.ok())
    return Error::Make(Error::Code::kInvalidArgument, file + ": " + docs.error().message);
  int registered = 0;
  for (json::object& doc : *docs) {
    const json::value* kind = doc.if_contains("kind");
    if (kind == nullptr || !kind->is_string()) continue;
    const kube::Resource* r = nullptr;
    if (kind->as_string() == "MutatingWebhookConfiguration")
      r = &kube::resources::MutatingWebhookConfigurations();
    if (kind->as_string() == "ValidatingWebhookConfiguration")
      r = &kube::resources::ValidatingWebhookConfigurations();
    json::value* hooks = doc.if_contains("webhooks");
    if (r == nullptr || hooks == nullptr || !hooks->is_array()) continue;
    for (json::value& h : hooks->as_array()) {
      if (!h.is_object()) continue;
      std::string path;
      if (auto* cc = h.as_object().if_contains("clientConfig"); cc && cc->is_object())
        if (auto* svc = cc->as_object().if_contains("service"); svc && svc->is_object())
          if (auto* p = svc->as_object().if_contains("path"); p && p->is_string())
            path = std::string(p->as_string());
      h.as_object()["clientConfig"] =
          json::object{{"url", base_url + path}, {"caBundle", Base64Encode(ca_pem)}};
    }
    std::string name;
    if (auto* m = doc.if_contains("metadata"); m && m->is_object())
      if (auto* n = m->as_object().if_contains("name"); n && n->is_string())
        name = std::string(n->as_string());
    kube::PatchOptions opts;
    opts.field_manager = "hyperslice-webhook-registration";
    opts.force = true;
    auto applied = client.Patch(*r, "", name, kube::PatchType::kApply, json::serialize(doc), opts);
    if (!applied.ok()) return applied.error();
    ++registered;
  }
  if (registered == 0)
    return Error::Make(Error::Code::kNotFound, "no webhook configuration in " + file);
  return OkStatus();
}

}  // namespace hyperslice::webhook
