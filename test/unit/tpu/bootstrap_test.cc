// CaCertHash against the openssl CLI's pipeline (kubeadm's documented way to compute
// --discovery-token-ca-cert-hash), and the rendered startup script (version, shellcheck).
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "src/tpu/internal/bootstrap.h"
#include "test/testenv/files.h"
#include "test/testenv/shell.h"

namespace hyperslice::tpu::internal {
namespace {

namespace fs = std::filesystem;

using testenv::Shell;

using testenv::ReadFile;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "hs-bootstrap-XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) != nullptr ? fs::path(tmpl) : fs::path();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Generates a self-signed certificate with `keyopts` and returns {pem, openssl's hash}.
std::pair<std::string, std::string> CertAndCliHash(const fs::path& dir,
                                                   const std::string& keyopts) {
  const std::string crt = (dir / "ca.crt").string();
  const std::string key = (dir / "ca.key").string();
  auto gen = Shell("openssl req -x509 -nodes -days 1 -subj /CN=hs-test-ca " + keyopts +
                   " -keyout " + key + " -out " + crt + " 2>&1");
  EXPECT_EQ(gen.first, 0) << gen.second;
  auto hash = Shell(
      "openssl x509 -in " + crt + " -pubkey -noout | openssl pkey -pubin -outform der | sha256sum",
      /*with_stderr=*/false);
  EXPECT_EQ(hash.first, 0) << hash.second;
  return {ReadFile(crt), "sha256:" + hash.second.substr(0, hash.second.find(' '))};
}

TEST(CaCertHash, MatchesOpensslPipelineForRsaCertificate) {
  TempDir dir;
  auto [pem, want] = CertAndCliHash(dir.path(), "-newkey rsa:2048");
  ASSERT_EQ(want.size(), 7u + 64u) << want;
  auto got = CaCertHash(pem);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(*got, want);
}

TEST(CaCertHash, MatchesOpensslPipelineForEcCertificate) {
  TempDir dir;
  auto [pem, want] = CertAndCliHash(dir.path(), "-newkey ec -pkeyopt ec_paramgen_curve:P-256");
  auto got = CaCertHash(pem);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(*got, want);
}

TEST(CaCertHash, UsesTheFirstCertificateOfABundle) {
  TempDir dir;
  auto [first, want] = CertAndCliHash(dir.path(), "-newkey ec -pkeyopt ec_paramgen_curve:P-256");
  TempDir other;
  auto [second, other_hash] = CertAndCliHash(other.path(), "-newkey rsa:2048");
  auto got = CaCertHash(first + second);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(*got, want);
  EXPECT_NE(*got, other_hash);
}

TEST(CaCertHash, RejectsWhatIsNotACertificate) {
  auto got =
      CaCertHash("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, Error::Code::kInvalidArgument);
  EXPECT_FALSE(CaCertHash("").ok());
}

TEST(StartupScript, CarriesTheVersionAndNoPlaceholder) {
  const std::string s = StartupScript("1.31");
  EXPECT_EQ(s.rfind("#!/usr/bin/env bash\n", 0), 0u);
  EXPECT_NE(s.find("HS_KUBERNETES_VERSION=\"${HS_KUBERNETES_VERSION:-1.31}\""), std::string::npos);
  EXPECT_EQ(s.find("@KUBERNETES_VERSION@"), std::string::npos);
  EXPECT_NE(s.find("set -euo pipefail"), std::string::npos);
}

TEST(StartupScript, DropsCharactersThatCouldLeaveTheShellWord) {
  const std::string s = StartupScript("1.31\"; rm -rf / #$(x)`y`");
  EXPECT_NE(s.find("HS_KUBERNETES_VERSION=\"${HS_KUBERNETES_VERSION:-1.31rm-rfxy}\""),
            std::string::npos);
}

// The script the operator hands to VMs (version substituted) passes shellcheck, and bash can
// parse it.
TEST(StartupScript, RenderedScriptPassesShellcheck) {
  TempDir dir;
  const fs::path script = dir.path() / "startup-script.sh";
  {
    std::ofstream out(script);
    out << StartupScript("1.31.2");
  }
  auto check = Shell("/usr/bin/shellcheck --severity=style " + script.string() + " 2>&1");
  EXPECT_EQ(check.first, 0) << check.second;
  auto parse = Shell("bash -n " + script.string() + " 2>&1");
  EXPECT_EQ(parse.first, 0) << parse.second;
}

// The version → package repository mapping, run by bash from the rendered script.
TEST(StartupScript, MinorVersionFunction) {
  TempDir dir;
  const fs::path script = dir.path() / "startup-script.sh";
  {
    std::ofstream out(script);
    out << StartupScript("1.31");
  }
  auto minor = [&](const std::string& v) {
    return Shell("bash -c 'source " + script.string() + " && hs_minor_version " + v + "' 2>&1");
  };
  EXPECT_EQ(minor("1.31"), (std::pair<int, std::string>{0, "v1.31"}));
  EXPECT_EQ(minor("v1.30.4"), (std::pair<int, std::string>{0, "v1.30"}));
  EXPECT_NE(minor("latest").first, 0);
  auto endpoint = [&](const std::string& a) {
    return Shell("bash -c 'source " + script.string() + " && hs_api_endpoint " + a + "' 2>&1")
        .second;
  };
  EXPECT_EQ(endpoint("10.128.0.2"), "10.128.0.2:6443");
  EXPECT_EQ(endpoint("10.128.0.2:443"), "10.128.0.2:443");
  EXPECT_EQ(endpoint("cp.example.internal"), "cp.example.internal:6443");
  EXPECT_EQ(endpoint("fd00::2"), "[fd00::2]:6443");
  EXPECT_EQ(endpoint("[fd00::2]:8443"), "[fd00::2]:8443");
}

}  // namespace
}  // namespace hyperslice::tpu::internal
