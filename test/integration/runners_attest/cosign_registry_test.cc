// Signatures made by the real cosign CLI (built from its Go module, pinned) and stored by it in a
// real registry (Debian docker-registry on loopback), read back over the registry API and verified
// with this module's code.
#include <gtest/gtest.h>

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/base/command.h"
#include "src/net/http.h"
#include "src/runners/attest/attest.h"
#include "test/integration/runners_attest/swtpm.h"
#include "test/testenv/files.h"

namespace hyperslice::runners::attest {
namespace {

namespace fs = std::filesystem;
using testing::Child;
using testing::Connects;
using testing::OnPath;
using testing::PortFree;
using testing::WaitFor;

constexpr char kCosignVersion[] = "2.6.5";  // cosign/go.mod pins the same

using testenv::ReadFile;

// The cosign binary: $HYPERSLICE_COSIGN_BIN, or a complete build-cosign.sh cache folder.
std::optional<std::string> FindCosign() {
  if (const char* bin = std::getenv("HYPERSLICE_COSIGN_BIN"); bin && *bin) return bin;
  const char* home = std::getenv("HOME");
  const char* cache = std::getenv("HYPERSLICE_CACHE");
  fs::path dir =
      cache && *cache ? fs::path(cache) : fs::path(home ? home : "/root") / ".cache" / "hyperslice";
  dir /= std::string("cosign-") + kCosignVersion;
  if (fs::exists(dir / ".complete") && fs::exists(dir / "bin" / "cosign")) {
    return (dir / "bin" / "cosign").string();
  }
  return std::nullopt;
}

class CosignRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!OnPath("docker-registry")) {
      GTEST_SKIP() << "docker-registry is not installed (Debian docker-registry; scripts/deps.sh)";
    }
    auto cosign = FindCosign();
    if (!cosign) {
      GTEST_SKIP() << "cosign " << kCosignVersion
                   << " is not built: run test/integration/runners_attest/cosign/build-cosign.sh "
                      "(or set HYPERSLICE_COSIGN_BIN)";
    }
    cosign_ = *cosign;
    dir_ = fs::temp_directory_path() / ("hs-cosign-" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "storage");
    fs::create_directories(dir_ / "home");
    for (int attempt = 0; attempt < 20 && !registry_; ++attempt) {
      int port = 20000 + static_cast<int>(::random() % 40000);
      if (!PortFree(port)) continue;
      std::ofstream(dir_ / "config.yml")
          << "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  "
             "filesystem:\n    rootdirectory: "
          << (dir_ / "storage").string() << "\nhttp:\n  addr: 127.0.0.1:" << port << "\n";
      registry_ = Child::Spawn({"docker-registry", "serve", (dir_ / "config.yml").string()});
      ASSERT_TRUE(registry_);
      if (WaitFor([&] { return registry_->Exited() || Connects(port); }) && !registry_->Exited()) {
        port_ = port;
      } else {
        registry_.reset();
      }
    }
    ASSERT_TRUE(registry_) << "docker-registry did not start";
    auto client =
        net::HttpClient::Create({.base_url = "http://127.0.0.1:" + std::to_string(port_)});
    ASSERT_TRUE(client.ok());
    http_ = *client;
    env_ = {"COSIGN_PASSWORD=", "HOME=" + (dir_ / "home").string(), "COSIGN_EXPERIMENTAL=0",
            "SIGSTORE_NO_CACHE=true", "TUF_ROOT=" + (dir_ / "home" / "tuf").string()};
  }

  void TearDown() override {
    registry_.reset();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  std::string Repo() const { return "127.0.0.1:" + std::to_string(port_) + "/models/serve"; }

  // Uploads a blob (monolithic upload) and returns its digest.
  std::string PushBlob(const std::string& bytes) {
    std::string digest = "sha256:" + Hex(Sha256(bytes));
    auto start = http_->Do({.method = "POST", .target = "/v2/models/serve/blobs/uploads/"});
    if (!start.ok()) {
      ADD_FAILURE() << start.error().ToString();
      return "";
    }
    EXPECT_EQ(start->status, 202);
    std::string location = start->Header("location");
    if (auto p = location.find("/v2/"); p != std::string::npos) location = location.substr(p);
    location += (location.find('?') == std::string::npos ? "?" : "&");
    location += "digest=" + digest;
    auto put = http_->Do({.method = "PUT",
                          .target = location,
                          .headers = {{"Content-Type", "application/octet-stream"}},
                          .body = bytes});
    if (!put.ok()) {
      ADD_FAILURE() << put.error().ToString();
      return "";
    }
    EXPECT_EQ(put->status, 201) << put->body;
    return digest;
  }

  // A minimal OCI image (one config, one layer) under `tag`; returns its manifest digest.
  std::string PushImage(const std::string& tag, const std::string& content) {
    std::string config = R"({"architecture":"amd64","os":"linux","rootfs":{"type":"layers",)"
                         R"("diff_ids":[]},"config":{"Cmd":[")" +
                         content + R"("]}})";
    const std::string& layer = content;
    std::string config_digest = PushBlob(config);
    std::string layer_digest = PushBlob(layer);
    std::string manifest =
        R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
        R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":)" +
        std::to_string(config.size()) + R"(,"digest":")" + config_digest +
        R"("},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","size":)" +
        std::to_string(layer.size()) + R"(,"digest":")" + layer_digest + R"("}]})";
    auto put =
        http_->Do({.method = "PUT",
                   .target = "/v2/models/serve/manifests/" + tag,
                   .headers = {{"Content-Type", "application/vnd.oci.image.manifest.v1+json"}},
                   .body = manifest});
    if (!put.ok()) {
      ADD_FAILURE() << put.error().ToString();
      return "";
    }
    EXPECT_EQ(put->status, 201) << put->body;
    return "sha256:" + Hex(Sha256(manifest));
  }

  // What the agent (or the webhook) does: fetch the .sig manifest and its layers.
  Result<std::vector<CosignSignature>> FetchSignatures(const std::string& digest) {
    HS_ASSIGN_OR_RETURN(auto tag, CosignSignatureTag(digest));
    HS_ASSIGN_OR_RETURN(
        auto m, http_->Do({.target = "/v2/models/serve/manifests/" + tag,
                           .headers = {{"Accept",
                                        "application/vnd.oci.image.manifest.v1+json, "
                                        "application/vnd.docker.distribution.manifest.v2+json"}}}));
    if (m.status == 404) return std::vector<CosignSignature>{};
    if (m.status != 200) return Error::Make(Error::Code::kUnavailable, "manifest " + m.body);
    std::map<std::string, std::string> blobs;
    boost::system::error_code ec;
    auto v = boost::json::parse(m.body, ec);
    if (ec || !v.is_object()) return Error::Make(Error::Code::kInvalidArgument, "manifest");
    if (const auto* layers = v.as_object().if_contains("layers"); layers && layers->is_array()) {
      for (const auto& l : layers->as_array()) {
        std::string d(l.as_object().at("digest").as_string());
        HS_ASSIGN_OR_RETURN(auto b, http_->Do({.target = "/v2/models/serve/blobs/" + d}));
        blobs[d] = b.body;
      }
    }
    return ExtractCosignSignatures(m.body, blobs);
  }

  CommandResult Cosign(std::vector<std::string> args) {
    args.insert(args.begin(), cosign_);
    return RunCommand(args, env_);
  }

  std::string cosign_;
  fs::path dir_;
  std::unique_ptr<Child> registry_;
  int port_ = 0;
  std::shared_ptr<net::HttpClient> http_;
  std::vector<std::string> env_;
};

TEST_F(CosignRegistryTest, CosignSignedImageVerifiesAndOthersAreRefused) {
  auto gen = Cosign({"generate-key-pair", "--output-key-prefix", (dir_ / "trusted").string()});
  ASSERT_EQ(gen.exit_code, 0) << gen.errors;
  gen = Cosign({"generate-key-pair", "--output-key-prefix", (dir_ / "untrusted").string()});
  ASSERT_EQ(gen.exit_code, 0) << gen.errors;
  std::string trusted = ReadFile(dir_ / "trusted.pub");
  std::string untrusted = ReadFile(dir_ / "untrusted.pub");

  std::string signed_digest = PushImage("v1", "serve-v1");
  std::string unsigned_digest = PushImage("v2", "serve-v2");
  std::string other_key_digest = PushImage("v3", "serve-v3");

  auto start = std::chrono::steady_clock::now();
  auto sign = Cosign({"sign", "--key", (dir_ / "trusted.key").string(), "--tlog-upload=false",
                      "--yes", Repo() + "@" + signed_digest});
  auto sign_time = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(sign.exit_code, 0) << sign.errors;
  std::printf("cosign sign (key, no tlog) took %lld ms\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(sign_time).count()));
  sign = Cosign({"sign", "--key", (dir_ / "untrusted.key").string(), "--tlog-upload=false", "--yes",
                 Repo() + "@" + other_key_digest});
  ASSERT_EQ(sign.exit_code, 0) << sign.errors;

  // Signed by the trusted key: accepted, and the payload is byte for byte what we would write.
  auto sigs = FetchSignatures(signed_digest);
  ASSERT_TRUE(sigs.ok()) << sigs.error().ToString();
  ASSERT_EQ(sigs->size(), 1u);
  auto parsed = ParseSimpleSigning((*sigs)[0].payload);
  ASSERT_TRUE(parsed.ok()) << parsed.error().ToString();
  EXPECT_EQ((*sigs)[0].payload, MakeSimpleSigning(parsed->docker_reference, signed_digest));
  auto ok = VerifyCosignSignatures(*sigs, {untrusted, trusted}, signed_digest);
  ASSERT_TRUE(ok.ok()) << ok.error().ToString();
  EXPECT_EQ(ok->key_index, 1u);

  // The same signature for another image (a pod naming v2's digest with v1's signature).
  auto wrong = VerifyCosignSignatures(*sigs, {trusted}, unsigned_digest);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().reason, "DigestMismatch");

  // Unsigned: no .sig manifest in the registry.
  auto none = FetchSignatures(unsigned_digest);
  ASSERT_TRUE(none.ok()) << none.error().ToString();
  auto unsigned_r = VerifyCosignSignatures(*none, {trusted}, unsigned_digest);
  ASSERT_FALSE(unsigned_r.ok());
  EXPECT_EQ(unsigned_r.error().reason, "Unsigned");

  // Signed, but by a key the policy does not trust.
  auto other = FetchSignatures(other_key_digest);
  ASSERT_TRUE(other.ok()) << other.error().ToString();
  auto untrusted_r = VerifyCosignSignatures(*other, {trusted}, other_key_digest);
  ASSERT_FALSE(untrusted_r.ok());
  EXPECT_EQ(untrusted_r.error().reason, "UntrustedSignature");
}

}  // namespace
}  // namespace hyperslice::runners::attest
