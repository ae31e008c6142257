#include "src/localregistry/localregistry.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "src/base/command.h"
#include "src/base/strings.h"
#include "src/net/http.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX leaves it undeclared

namespace hyperslice::localregistry {
namespace fs = std::filesystem;
namespace {

bool OnPath(const std::string& tool) {
  return RunCommand({"sh", "-c", "command -v " + tool}).exit_code == 0;
}

bool Answers(int port) {
  auto r = RunCommand({"bash", "-c",
                       "exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(port) +
                           " && printf 'GET /v2/ HTTP/1.0\\r\\n\\r\\n' >&3 && head -c 12 <&3"});
  return r.output.find("200") != std::string::npos;
}

Error Failed(const std::string& what, const CommandResult& r) {
  return Error::Make(Error::Code::kInternal, what + " failed: " + r.errors + r.output);
}

}  // namespace

std::string RunnerToolsMissing() {
  if (::geteuid() != 0) return "needs root (runc, mounts, network namespaces)";
  for (const char* tool : {"runc", "umoci", "skopeo", "docker-registry", "cc", "ip"}) {
    if (!OnPath(tool)) return std::string(tool) + " is not installed (scripts/deps.sh)";
  }
  return "";
}

Result<std::unique_ptr<Registry>> Registry::Start(const std::string& parent_dir) {
  std::unique_ptr<Registry> reg(new Registry());
  std::string tmpl = parent_dir + "/hs-registry-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return Error::Make(Error::Code::kInternal, "mkdtemp in " + parent_dir);
  }
  reg->dir_ = tmpl;
  // docker-registry cannot listen on port 0 and say which port it got: pick one, retry on a
  // collision.
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto port = FreeLoopbackPort();
    if (!port.ok()) return port.error();
    reg->port_ = *port;
    std::ofstream(reg->dir_ + "/config.yml")
        << "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: "
        << reg->dir_
        << "/data\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:" << reg->port_ << "\n";
    std::string cfg = reg->dir_ + "/config.yml", logf = reg->dir_ + "/registry.log";
    // Its own process group and a clean signal mask (StartBackground): the owner may block
    // SIGINT/SIGTERM to sigwait them and stops the registry last.
    auto pid = StartBackground({"docker-registry", "serve", cfg}, logf);
    if (!pid.ok()) return pid.error();
    reg->pid_ = *pid;
    for (int i = 0; i < 100; ++i) {
      if (Answers(reg->port_)) return reg;
      int status = 0;
      if (::waitpid(reg->pid_, &status, WNOHANG) == reg->pid_) {
        reg->pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (reg->pid_ > 0) {
      ::kill(reg->pid_, SIGKILL);
      ::waitpid(reg->pid_, nullptr, 0);
      reg->pid_ = -1;
    }
  }
  return Error::Make(Error::Code::kUnavailable, "docker-registry did not start; see " + reg->dir_);
}

Registry::~Registry() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

Result<std::string> Registry::PushTestImage(const std::string& repo, const std::string& tag,
                                            const std::string& marker) {
  std::string bin = dir_ + "/hstest";
  if (!fs::exists(bin)) {
    auto r = RunCommand(
        {"cc", "-static", "-O2", "-o", bin, std::string(HS_LOCALREGISTRY_DIR) + "/hstest.c"});
    if (r.exit_code != 0) return Failed("compiling hstest", r);
  }
  return PushImage(repo, tag, bin,
                   {"--config.cmd", "print:default", "--config.env", "GREETING=hello"}, marker);
}

Result<std::string> Registry::PushProgramImage(const std::string& repo, const std::string& tag,
                                               const std::string& program) {
  return PushImage(repo, tag, program, {}, "");
}

Result<std::string> Registry::PushImage(const std::string& repo, const std::string& tag,
                                        const std::string& bin,
                                        const std::vector<std::string>& config,
                                        const std::string& marker) {
  std::string work = dir_ + "/build-" + repo.substr(repo.rfind('/') + 1) + "-" + tag;
  std::error_code ec;
  fs::remove_all(work, ec);
  fs::create_directories(work, ec);
  const std::string entry = "/" + fs::path(bin).filename().string();
  const std::string layout = work + "/oci";
  std::string image = layout;  // oci:<layout>:<tag>
  image += ":" + tag;
  const std::string bundle = work + "/bundle";
  std::string dest = "docker://" + host();
  dest += "/" + repo;
  dest += ":" + tag;
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"umoci", "init", "--layout", layout},
                                             {"umoci", "new", "--image", image},
                                             {"umoci", "unpack", "--image", image, bundle}}) {
    auto r = RunCommand(args);
    if (r.exit_code != 0) return Failed(args[0] + " " + args[1], r);
  }
  fs::copy_file(bin, work + "/bundle/rootfs" + entry, fs::copy_options::overwrite_existing, ec);
  if (ec) return Error::Make(Error::Code::kInternal, "copying " + bin + ": " + ec.message());
  fs::create_directories(work + "/bundle/rootfs/etc", ec);
  fs::create_directories(work + "/bundle/rootfs/tmp", ec);
  if (!marker.empty()) std::ofstream(work + "/bundle/rootfs/marker") << marker << "\n";
  std::vector<std::string> configure = {
      "umoci", "config", "--image", image, "--config.entrypoint", entry, "--config.workingdir",
      "/"};
  configure.insert(configure.end(), config.begin(), config.end());
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"umoci", "repack", "--image", image, bundle},
           configure,
           {"skopeo", "copy", "--dest-tls-verify=false", "oci:" + image, dest}}) {
    auto r = RunCommand(args);
    if (r.exit_code != 0) return Failed(args[0] + " " + args[1], r);
  }
  auto r = RunCommand({"skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}", dest});
  if (r.exit_code != 0) return Failed("skopeo inspect", r);
  std::string digest = TrimSpace(r.output);
  return host() + "/" + repo + "@" + digest;
}

namespace {

std::string Sha256Digest(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  std::string out = "sha256:";
  static const char* hex = "0123456789abcdef";
  for (unsigned int i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

Error Unexpected(const std::string& what, const Result<net::Response>& r) {
  return Error::Make(
      Error::Code::kUnavailable,
      what + ": " + (r.ok() ? std::to_string(r->status) + " " + r->body : r.error().message));
}

// Monolithic upload (POST, then PUT with the digest); returns the digest.
Result<std::string> PushBlob(net::HttpClient& http, const std::string& repo,
                             const std::string& bytes) {
  std::string digest = Sha256Digest(bytes);
  auto start = http.Do({.method = "POST", .target = "/v2/" + repo + "/blobs/uploads/"});
  if (!start.ok() || start->status != 202) return Unexpected("blob upload start", start);
  std::string location = start->Header("location");
  if (auto p = location.find("/v2/"); p != std::string::npos) location = location.substr(p);
  location += (location.find('?') == std::string::npos ? "?" : "&");
  location += "digest=" + digest;
  auto put = http.Do({.method = "PUT",
                      .target = location,
                      .headers = {{"Content-Type", "application/octet-stream"}},
                      .body = bytes});
  if (!put.ok() || put->status != 201) return Unexpected("blob upload", put);
  return digest;
}

}  // namespace

Status Registry::PushCosignSignature(const std::string& image_ref, const std::string& payload,
                                     const std::string& signature_b64) {
  const std::string prefix = host() + "/";
  auto at = image_ref.find("@sha256:");
  if (image_ref.rfind(prefix, 0) != 0 || at == std::string::npos) {
    return Error::Make(Error::Code::kInvalidArgument,
                       image_ref + " is not an image of this registry by digest");
  }
  const std::string repo = image_ref.substr(prefix.size(), at - prefix.size());
  const std::string tag = "sha256-" + image_ref.substr(at + 8) + ".sig";
  net::HttpClient::Options o;
  o.base_url = "http://" + host();
  HS_ASSIGN_OR_RETURN(auto http, net::HttpClient::Create(o));
  const std::string config = "{}";
  HS_ASSIGN_OR_RETURN(std::string config_digest, PushBlob(*http, repo, config));
  HS_ASSIGN_OR_RETURN(std::string layer_digest, PushBlob(*http, repo, payload));
  boost::json::object manifest{
      {"schemaVersion", 2},
      {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
      {"config", boost::json::object{{"mediaType", "application/vnd.oci.image.config.v1+json"},
                                     {"size", config.size()},
                                     {"digest", config_digest}}},
      {"layers", boost::json::array{boost::json::object{
                     {"mediaType", "application/vnd.dev.cosign.simplesigning.v1+json"},
                     {"size", payload.size()},
                     {"digest", layer_digest},
                     {"annotations", boost::json::object{{"dev.cosignproject.cosign/signature",
                                                          signature_b64}}}}}}};
  auto put = http->Do({.method = "PUT",
                       .target = "/v2/" + repo + "/manifests/" + tag,
                       .headers = {{"Content-Type", "application/vnd.oci.image.manifest.v1+json"}},
                       .body = boost::json::serialize(manifest)});
  if (!put.ok() || put->status != 201) return Unexpected("signature manifest", put);
  return OkStatus();
}

std::string Registry::BlobDataPath(const std::string& digest) const {
  std::string hex = digest.substr(digest.find(':') + 1);
  return dir_ + "/data/docker/registry/v2/blobs/sha256/" + hex.substr(0, 2) + "/" + hex + "/data";
}

Result<std::vector<std::string>> Registry::LayerDigests(const std::string& image_ref) const {
  auto r = RunCommand({"skopeo", "inspect", "--tls-verify=false", "docker://" + image_ref});
  if (r.exit_code != 0) return Failed("skopeo inspect", r);
  boost::system::error_code ec;
  auto v = boost::json::parse(r.output, ec);
  std::vector<std::string> out;
  if (ec || !v.is_object()) return out;
  if (const auto* layers = v.as_object().if_contains("Layers"); layers && layers->is_array()) {
    for (const auto& l : layers->as_array()) out.emplace_back(l.as_string());
  }
  return out;
}

}  // namespace hyperslice::localregistry
