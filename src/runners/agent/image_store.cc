// Pulling images by digest over the registry HTTP API v2 with the project's HTTP client.
#include "src/runners/agent/image_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "src/base/log.h"

namespace hyperslice::runners::agent {
namespace fs = std::filesystem;
namespace json = boost::json;
namespace {

constexpr char kOciManifest[] = "application/vnd.oci.image.manifest.v1+json";
constexpr char kOciIndex[] = "application/vnd.oci.image.index.v1+json";
constexpr char kDockerManifest[] = "application/vnd.docker.distribution.manifest.v2+json";
constexpr char kDockerList[] = "application/vnd.docker.distribution.manifest.list.v2+json";

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::string_view d) { EVP_DigestUpdate(ctx_, d.data(), d.size()); }
  std::string Digest() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_, md, &n);
    std::string out = "sha256:";
    char hex[3];
    for (unsigned int i = 0; i < n; ++i) {
      std::snprintf(hex, sizeof(hex), "%02x", md[i]);
      out += hex;
    }
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

std::string Sha256Of(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.Digest();
}

Error Mismatch(const std::string& what, const std::string& want, const std::string& got) {
  return Error::Make(Error::Code::kConflict,
                     what + " does not match its digest: expected " + want + ", got " + got,
                     "DigestMismatch");
}

std::vector<std::string> Strings(const json::value* v) {
  std::vector<std::string> out;
  if (v == nullptr || !v->is_array()) return out;
  for (const auto& s : v->as_array()) {
    if (s.is_string()) out.emplace_back(s.as_string());
  }
  return out;
}

Result<json::object> ParseObject(const std::string& body, const std::string& what) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) {
    return Error::Make(Error::Code::kInvalidArgument, what + " is not a JSON object");
  }
  return v.as_object();
}

std::string Hex(const std::string& digest) { return digest.substr(digest.find(':') + 1); }

Status WriteFileAtomic(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << data;
    if (!out) return Error::Make(Error::Code::kInternal, "cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Error::Make(Error::Code::kInternal, "cannot rename " + tmp);
  }
  return OkStatus();
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::Make(Error::Code::kNotFound, "cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<Image> ImageFromConfig(const std::string& config_json, Image img) {
  HS_ASSIGN_OR_RETURN(auto obj, ParseObject(config_json, "image config"));
  const json::value* cfg = obj.if_contains("config");
  if (cfg != nullptr && cfg->is_object()) {
    const auto& c = cfg->as_object();
    img.entrypoint = Strings(c.if_contains("Entrypoint"));
    img.cmd = Strings(c.if_contains("Cmd"));
    img.env = Strings(c.if_contains("Env"));
    if (const auto* w = c.if_contains("WorkingDir"); w && w->is_string()) {
      img.working_dir = std::string(w->as_string());
    }
    if (const auto* u = c.if_contains("User"); u && u->is_string()) {
      img.user = std::string(u->as_string());
    }
  }
  return img;
}

}  // namespace

ImageStore::ImageStore(std::string dir, RegistryOptions options)
    : dir_(std::move(dir)), options_(std::move(options)) {
  std::error_code ec;
  fs::create_directories(dir_ + "/blobs/sha256", ec);
  fs::create_directories(dir_ + "/rootfs", ec);
  fs::create_directories(dir_ + "/refs", ec);
}

std::mutex& ImageStore::LockFor(const std::string& key) {
  std::lock_guard lock(mu_);
  auto& m = locks_[key];
  if (!m) m = std::make_unique<std::mutex>();
  return *m;
}

Result<Image> ImageStore::Pull(const std::string& image) {
  HS_ASSIGN_OR_RETURN(ImageRef ref, ParseImageRef(image));
  {
    std::lock_guard lock(mu_);
    if (auto it = cache_.find(image); it != cache_.end()) return it->second;
  }
  std::lock_guard pull_lock(LockFor(image));
  {
    std::lock_guard lock(mu_);
    if (auto it = cache_.find(image); it != cache_.end()) return it->second;
  }
  HS_ASSIGN_OR_RETURN(Image img, PullLocked(ref));
  std::lock_guard lock(mu_);
  cache_[image] = img;
  return img;
}

Result<Image> ImageStore::PullLocked(const ImageRef& ref) {
  // A digest-pinned image already unpacked (by this or an earlier agent process) needs no
  // network: refs/<manifest hex> names its config blob.
  if (!ref.digest.empty()) {
    auto cfg_digest = ReadFile(dir_ + "/refs/" + Hex(ref.digest));
    if (cfg_digest.ok() && fs::exists(dir_ + "/rootfs/" + Hex(ref.digest))) {
      auto cfg = ReadFile(dir_ + "/blobs/sha256/" + Hex(*cfg_digest));
      if (cfg.ok() && Sha256Of(*cfg) == *cfg_digest) {
        Image img;
        img.manifest_digest = ref.digest;
        img.config_digest = *cfg_digest;
        img.rootfs = dir_ + "/rootfs/" + Hex(ref.digest);
        return ImageFromConfig(*cfg, img);
      }
    }
  }
  registry::Client reg(ref, options_);
  const std::string base = "/v2/" + ref.repository;
  const std::string accept =
      std::string(kOciManifest) + ", " + kDockerManifest + ", " + kOciIndex + ", " + kDockerList;
  HS_ASSIGN_OR_RETURN(auto resp, reg.Get(base + "/manifests/" + ref.Reference(), accept));
  std::string manifest_digest = Sha256Of(resp.body);
  if (!ref.digest.empty() && manifest_digest != ref.digest) {
    return Mismatch("manifest of " + ref.repository, ref.digest, manifest_digest);
  }
  HS_ASSIGN_OR_RETURN(auto manifest, ParseObject(resp.body, "manifest"));
  std::string media = resp.Header("content-type");
  if (const auto* mt = manifest.if_contains("mediaType"); mt && mt->is_string()) {
    media = std::string(mt->as_string());
  }
  if (media == kOciIndex || media == kDockerList || manifest.contains("manifests")) {
    std::string chosen;
    if (const auto* list = manifest.if_contains("manifests"); list && list->is_array()) {
      for (const auto& m : list->as_array()) {
        const auto* p = m.as_object().if_contains("platform");
        if (p == nullptr || !p->is_object()) continue;
        const auto* os = p->as_object().if_contains("os");
        const auto* arch = p->as_object().if_contains("architecture");
        if (os && arch && os->is_string() && arch->is_string() && os->as_string() == "linux" &&
            arch->as_string() == "amd64") {
          chosen = std::string(m.as_object().at("digest").as_string());
          break;
        }
      }
    }
    if (!registry::ValidDigest(chosen)) {
      return Error::Make(Error::Code::kNotFound,
                         ref.repository + " has no linux/amd64 image in its index", "NoPlatform");
    }
    HS_ASSIGN_OR_RETURN(resp, reg.Get(base + "/manifests/" + chosen, accept));
    if (Sha256Of(resp.body) != chosen) {
      return Mismatch("linux/amd64 manifest of " + ref.repository, chosen, Sha256Of(resp.body));
    }
    HS_ASSIGN_OR_RETURN(manifest, ParseObject(resp.body, "manifest"));
  }
  const auto* config = manifest.if_contains("config");
  const auto* layers = manifest.if_contains("layers");
  if (config == nullptr || !config->is_object() || layers == nullptr || !layers->is_array()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "manifest of " + ref.repository + " has no config or layers");
  }
  std::string config_digest(config->as_object().at("digest").as_string());
  if (!registry::ValidDigest(config_digest)) {
    return Error::Make(Error::Code::kInvalidArgument, "image config digest is not sha256");
  }
  HS_ASSIGN_OR_RETURN(auto cfg_resp, reg.Get(base + "/blobs/" + config_digest, ""));
  if (Sha256Of(cfg_resp.body) != config_digest) {
    return Mismatch("image config", config_digest, Sha256Of(cfg_resp.body));
  }
  HS_RETURN_IF_ERROR(WriteFileAtomic(dir_ + "/blobs/sha256/" + Hex(config_digest), cfg_resp.body));

  std::string rootfs = dir_ + "/rootfs/" + Hex(manifest_digest);
  if (!fs::exists(rootfs)) {
    std::string tmp = rootfs + ".tmp";
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    for (const auto& layer : layers->as_array()) {
      std::string d(layer.as_object().at("digest").as_string());
      if (!registry::ValidDigest(d)) {
        return Error::Make(Error::Code::kInvalidArgument, "layer digest is not sha256");
      }
      std::string blob = dir_ + "/blobs/sha256/" + Hex(d);
      if (!fs::exists(blob)) {
        // Layers are held in memory once (the HTTP client's body); fine for the workloads'
        // images a runner pulls, and verified before they touch the disk.
        HS_ASSIGN_OR_RETURN(auto lr, reg.Get(base + "/blobs/" + d, ""));
        std::string got = Sha256Of(lr.body);
        if (got != d) return Mismatch("layer", d, got);
        HS_RETURN_IF_ERROR(WriteFileAtomic(blob, lr.body));
      }
      HS_RETURN_IF_ERROR(ApplyLayer(blob, tmp));
    }
    fs::rename(tmp, rootfs, ec);
    if (ec) return Error::Make(Error::Code::kInternal, "cannot rename " + tmp);
  }
  HS_RETURN_IF_ERROR(WriteFileAtomic(dir_ + "/refs/" + Hex(manifest_digest), config_digest));
  log::Info("image pulled",
            {{"image", ref.registry + "/" + ref.repository}, {"digest", manifest_digest}});
  Image img;
  img.manifest_digest = manifest_digest;
  img.config_digest = config_digest;
  img.rootfs = rootfs;
  return ImageFromConfig(cfg_resp.body, img);
}

}  // namespace hyperslice::runners::agent
