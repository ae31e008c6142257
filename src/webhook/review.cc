// AdmissionReview v1 envelope: parse the request, dispatch by path, wrap the decision.
#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parser.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/webhook/internal.h"
#include "src/webhook/webhook.h"

namespace hyperslice::webhook {
namespace json = boost::json;

namespace internal {

namespace {

// Index of the first byte at or after `i` that JSON must escape (control, '"', '\\'), or s.size().
// Sixteen bytes per step where SSE2 is available (every x86-64): most strings need no escape.
size_t NextEscape(std::string_view s, size_t i) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i control_max = _mm_set1_epi8(0x1f);
  for (; i + 16 <= s.size(); i += 16) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.data() + i));
    __m128i control = _mm_cmpeq_epi8(_mm_max_epu8(v, control_max), control_max);  // v <= 0x1f
    __m128i hit =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)), control);
    if (int mask = _mm_movemask_epi8(hit); mask != 0) return i + __builtin_ctz(mask);
  }
#endif
  for (; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == '"' || c == '\\') return i;
  }
  return s.size();
}

}  // namespace

void AppendJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  size_t plain = 0;  // start of the run of bytes copied as they are
  for (size_t i = NextEscape(s, 0); i < s.size(); i = NextEscape(s, i + 1)) {
    auto c = static_cast<unsigned char>(s[i]);
    out.append(s.data() + plain, i - plain);
    plain = i + 1;
    out += '\\';
    switch (c) {
      case '"':
        out += '"';
        break;
      case '\\':
        out += '\\';
        break;
      case '\b':
        out += 'b';
        break;
      case '\f':
        out += 'f';
        break;
      case '\n':
        out += 'n';
        break;
      case '\r':
        out += 'r';
        break;
      case '\t':
        out += 't';
        break;
      default:
        out += "u00";
        out += kHex[c >> 4];
        out += kHex[c & 15];
    }
  }
  out.append(s.data() + plain, s.size() - plain);
  out += '"';
}

}  // namespace internal

const kube::Resource& TPUNodeGroups() {
  static const kube::Resource r{"tpu.google.com", "v1alpha1", "tpunodegroups", "TPUNodeGroup",
                                true};
  return r;
}

Result<OwnerUnreadable> ParseOwnerUnreadable(const std::string& s) {
  if (s == "deny") return OwnerUnreadable::kDeny;
  if (s == "allow") return OwnerUnreadable::kAllow;
  return Error::Make(Error::Code::kInvalidArgument,
                     "--owner-unreadable must be deny or allow; got \"" + s + "\"");
}

void StaticObjectSource::Put(const kube::Resource& r, json::object obj) {
  std::string key =
      r.String() + "/" +
      std::string(jsonfield::StringField(jsonfield::ObjectField(&obj, "metadata"), "namespace")) +
      "/" + std::string(jsonfield::StringField(jsonfield::ObjectField(&obj, "metadata"), "name"));
  objects_[key] = std::make_shared<const json::object>(std::move(obj));
}

Result<std::vector<ObjectPtr>> ObjectSource::List(const kube::Resource& r, Mode mode) {
  if (mode == Mode::kCachedOnly) {
    return Error::Make(Error::Code::kUnavailable, "no cache of " + r.String(), kNotCached);
  }
  return Error::Make(Error::Code::kInternal, "this source cannot list " + r.String());
}

Result<std::vector<ObjectPtr>> StaticObjectSource::List(const kube::Resource& r, Mode) {
  std::string prefix = r.String() + "/";
  std::vector<ObjectPtr> out;
  for (auto it = objects_.lower_bound(prefix);
       it != objects_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    out.push_back(it->second);
  }
  return out;
}

Result<ObjectPtr> StaticObjectSource::Get(const kube::Resource& r, const std::string& ns,
                                          const std::string& name, Mode) {
  auto it = objects_.find(r.String() + "/" + ns + "/" + name);
  if (it == objects_.end()) {
    return Error::Make(Error::Code::kNotFound, r.kind + " " + ns + "/" + name + " not found",
                       "NotFound", 404);
  }
  return it->second;
}

namespace {

class ApiObjectSource : public ObjectSource {
 public:
  explicit ApiObjectSource(std::shared_ptr<kube::Client> client) : client_(std::move(client)) {}
  Result<ObjectPtr> Get(const kube::Resource& r, const std::string& ns, const std::string& name,
                        Mode mode) override {
    if (mode == Mode::kCachedOnly) {
      return Error::Make(Error::Code::kUnavailable, "no cache", kNotCached);
    }
    HS_ASSIGN_OR_RETURN(kube::Object obj, client_->Get(r, ns, name));
    return std::make_shared<const json::object>(std::move(obj));
  }
  Result<std::vector<ObjectPtr>> List(const kube::Resource& r, Mode mode) override {
    if (mode == Mode::kCachedOnly) {
      return Error::Make(Error::Code::kUnavailable, "no cache", kNotCached);
    }
    HS_ASSIGN_OR_RETURN(kube::ObjectList list, client_->ListAll(r, ""));
    std::vector<ObjectPtr> out;
    out.reserve(list.items.size());
    for (kube::Object& o : list.items) {
      out.push_back(std::make_shared<const json::object>(std::move(o)));
    }
    return out;
  }

 private:
  std::shared_ptr<kube::Client> client_;
};

// One line per admission, only at debug level (--verbose, as upstream logs each review): the hot
// path writes no log line otherwise.
void LogDecision(const std::string& path, const json::object& request,
                 const internal::Decision& d) {
  const json::object* object = jsonfield::ObjectField(&request, "object");
  std::string_view name = jsonfield::StringField(&request, "name");
  if (name.empty())
    name = jsonfield::StringField(jsonfield::ObjectField(object, "metadata"), "name");
  log::Debug("admission",
             {{"path", path},
              {"kind", jsonfield::StringField(jsonfield::ObjectField(&request, "kind"), "kind")},
              {"operation", jsonfield::StringField(&request, "operation")},
              {"namespace", jsonfield::StringField(&request, "namespace")},
              {"name", name},
              {"allowed", json::value(d.allowed)},
              {"patched", json::value(!d.patch.empty())},
              {"reason", d.reason}});
}

ReviewResult PlainError(int status, std::string message) {
  ReviewResult r;
  r.http_status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(message);
  r.body += "\n";
  r.allowed = false;
  r.reason = status == 400 ? "BadRequest" : "Error";
  return r;
}

}  // namespace

std::shared_ptr<ObjectSource> NewApiObjectSource(std::shared_ptr<kube::Client> client) {
  return std::make_shared<ApiObjectSource>(std::move(client));
}

ReviewResult Review(const std::string& path, std::string_view body, ObjectSource& source,
                    const AdmissionOptions& options, bool allow_live) {
  // The parsed tree lives only for this call: a monotonic arena on the stack (most reviews fit;
  // bigger ones continue on the heap) freed at once on return. The parser itself, with the stack it
  // grows while parsing, is kept per thread so a review costs no parser set-up.
  alignas(16) std::array<unsigned char, 32768> buffer;
  json::monotonic_resource mr(buffer.data(), buffer.size());
  static thread_local json::parser parser = [] {
    json::parse_options popts;
    popts.max_depth = 128;
    return json::parser(json::storage_ptr(), popts);
  }();
  boost::system::error_code ec;
  parser.reset(&mr);
  parser.write(body.data(), body.size(), ec);
  if (ec) {
    parser.reset();
    return PlainError(400, "malformed AdmissionReview: body is not JSON (" + ec.message() + ")");
  }
  json::value root = parser.release();
  const json::object* review = root.if_object();
  if (review == nullptr) return PlainError(400, "malformed AdmissionReview: not a JSON object");
  // v1beta1 too: the apiserver sends the first version of a configuration's
  // admissionReviewVersions it knows, and gke-tpu-env-injector's chart lists [v1beta1, v1]
  // (k8s.io/apiserver pkg/admission/plugin/webhook/request/admissionreview.go,
  // CreateAdmissionObjects). The answer must be in the version asked; both have the same fields.
  std::string_view api_version = jsonfield::StringField(review, "apiVersion");
  if ((api_version != "admission.k8s.io/v1" && api_version != "admission.k8s.io/v1beta1") ||
      jsonfield::StringField(review, "kind") != "AdmissionReview") {
    return PlainError(400,
                      "malformed AdmissionReview: expected apiVersion admission.k8s.io/v1 (or "
                      "v1beta1) and kind AdmissionReview");
  }
  const json::object* request = jsonfield::ObjectField(review, "request");
  std::string_view uid = jsonfield::StringField(request, "uid");
  if (request == nullptr || uid.empty()) {
    return PlainError(400, "malformed AdmissionReview: request.uid is missing");
  }

  internal::Decision d;
  if (path == kMutatePodsPath) {
    d = internal::MutatePod(*request, source, options, allow_live);
  } else if (path == kMutatePath) {
    // Upstream's one path for both kinds (seed 001); anything else is admitted unchanged.
    std::string_view kind = jsonfield::StringField(jsonfield::ObjectField(request, "kind"), "kind");
    if (kind == "StatefulSet") {
      d = internal::MutateStatefulSet(*request, options);
    } else if (kind == "Pod") {
      d = internal::MutatePod(*request, source, options, allow_live);
    }
  } else if (path == kValidateNodeGroupsPath) {
    d = internal::ValidateNodeGroup(*request);
  } else if (path == kValidateTgpPath) {
    d = internal::ValidateTgp(*request, source, allow_live);
  } else if (path == kValidateSealedPodsPath) {
    d = internal::ValidateSealedPod(*request, source, options, allow_live);
  } else {
    return PlainError(404, "no admission webhook at " + path);
  }
  ReviewResult result;
  if (d.needs_live) {
    result.needs_live = true;
    return result;
  }
  if (log::GetLevel() <= log::Level::kDebug) LogDecision(path, *request, d);

  // The response has a fixed shape: written directly (strings escaped as boost::json::serialize
  // escapes them) instead of building a tree to serialize.
  std::string& out = result.body;
  out.reserve(192 + uid.size() + d.patch.size() / 3 * 4 + d.message.size());
  out += R"({"apiVersion":")";
  out += api_version;
  out += R"(","kind":"AdmissionReview","response":{"uid":)";
  internal::AppendJsonString(out, uid);
  if (!d.allowed) {
    out += R"(,"allowed":false,"status":{"code":)";
    out += std::to_string(d.code != 0 ? d.code : 403);
    out += R"(,"reason":)";
    internal::AppendJsonString(out, d.reason);
    out += R"(,"message":)";
    internal::AppendJsonString(out, d.message);
    out += '}';
    result.allowed = false;
    result.reason = d.reason.empty() ? "Denied" : d.reason;
  } else {
    out += R"(,"allowed":true)";
    if (!d.patch.empty()) {
      out += R"(,"patchType":"JSONPatch","patch":")";
      internal::AppendBase64(out, d.patch);
      out += '"';
      result.patched = true;
    }
  }
  if (!d.warnings.empty()) {
    out += R"(,"warnings":[)";
    for (size_t i = 0; i < d.warnings.size(); ++i) {
      if (i > 0) out += ',';
      internal::AppendJsonString(out, d.warnings[i]);
    }
    out += ']';
  }
  out += "}}";
  return result;
}

}  // namespace hyperslice::webhook
