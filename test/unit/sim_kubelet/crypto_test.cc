#include "sim/kubelet/internal/crypto.h"
#include "src/base/base64.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "src/net/pki.h"

namespace hyperslice::sim::kubelet::internal {
namespace {

// Vectors of k8s.io/cluster-bootstrap/token/jws (what kube-controller-manager's bootstrapsigner
// writes into cluster-info): HS256, kid = token id, key = token secret, payload detached.
constexpr char kContent[] = "Hello from the other side. I must have called a thousand times.";
constexpr char kSecret[] = "my voice is my passcode";
constexpr char kId[] = "joshua";
constexpr char kSig[] =
    "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8";
constexpr char kEmptySig[] =
    "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..7Ui1ALizW4jXphVUB7xUqC9vLYLL9RZeOFfVLoB7Tgk";

TEST(DetachedJws, SignsLikeTheBootstrapSigner) {
  EXPECT_EQ(SignDetachedJws(kContent, kId, kSecret), kSig);
  EXPECT_EQ(SignDetachedJws("", kId, kSecret), kEmptySig);
}

TEST(DetachedJws, VerifiesTheBootstrapSignersSignature) {
  EXPECT_TRUE(VerifyDetachedJws(kSig, kContent, kId, kSecret).ok());
  EXPECT_TRUE(VerifyDetachedJws(kEmptySig, "", kId, kSecret).ok());
}

TEST(DetachedJws, RejectsWhatTheTokenDidNotSign) {
  auto reason = [](const Status& s) { return s.ok() ? std::string("ok") : s.error().reason; };
  EXPECT_EQ(reason(VerifyDetachedJws(kSig, std::string(kContent) + " ", kId, kSecret)),
            "JWSInvalid");  // another payload (a swapped kubeconfig)
  EXPECT_EQ(reason(VerifyDetachedJws(kSig, kContent, kId, "my voice is not my passcode")),
            "JWSInvalid");  // another secret
  EXPECT_EQ(reason(VerifyDetachedJws(kSig, kContent, "joshub", kSecret)), "JWSInvalid");  // kid
  // alg "none" with an empty signature.
  std::string none = Base64UrlEncode(R"({"alg":"none","kid":"joshua"})") + "..";
  EXPECT_EQ(reason(VerifyDetachedJws(none, kContent, kId, kSecret)), "JWSInvalid");
  // Not detached (payload in the middle), truncated, garbage.
  std::string sig(kSig);
  std::string attached = sig.substr(0, sig.find("..")) + "." + Base64UrlEncode(kContent) +
                         sig.substr(sig.find("..") + 1);
  EXPECT_EQ(reason(VerifyDetachedJws(attached, kContent, kId, kSecret)), "JWSInvalid");
  EXPECT_EQ(reason(VerifyDetachedJws(sig.substr(0, sig.size() - 2), kContent, kId, kSecret)),
            "JWSInvalid");
  EXPECT_EQ(reason(VerifyDetachedJws("!!..!!", kContent, kId, kSecret)), "JWSInvalid");
  EXPECT_EQ(reason(VerifyDetachedJws("", kContent, kId, kSecret)), "JWSInvalid");
}

TEST(Base64, RoundTripsEveryLength) {
  std::string data;
  for (int i = 0; i < 70; ++i) {
    data.push_back(static_cast<char>(i * 37));
    EXPECT_EQ(Base64Decode(Base64Encode(data)).value(), data);
    EXPECT_EQ(Base64UrlDecode(Base64UrlEncode(data)).value(), data);
    EXPECT_EQ(Base64UrlEncode(data).find_first_of("+/="), std::string::npos);
  }
  EXPECT_EQ(Base64Encode("ab"), "YWI=");
  EXPECT_FALSE(Base64Decode("YW*=").ok());
}

// kubeadm's documented way to compute --discovery-token-ca-cert-hash, with the openssl CLI.
std::string OpensslHash(const std::string& pem) {
  char path[] = "/tmp/hs-sim-kubelet-ca-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return "";
  close(fd);
  std::ofstream(path) << pem;
  std::string cmd =
      std::string("openssl x509 -in ") + path +
      " -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -hex";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[256];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  pclose(p);
  unlink(path);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return "sha256:" + out.substr(out.rfind(' ') + 1);
}

TEST(CaCertHash, IsKubeadmsPinOfTheSubjectPublicKeyInfo) {
  auto ca = net::pki::MakeCa("sim-kubelet-test-ca");
  ASSERT_TRUE(ca.ok());
  auto hash = CaCertHash(ca->cert_pem);
  ASSERT_TRUE(hash.ok()) << hash.error().ToString();
  EXPECT_EQ(*hash, OpensslHash(ca->cert_pem));
  EXPECT_EQ(hash->size(), 7u + 64u);
  auto other = net::pki::MakeCa("sim-kubelet-test-ca");
  EXPECT_NE(*CaCertHash(other->cert_pem), *hash);  // same name, other key
  EXPECT_FALSE(CaCertHash("not a certificate").ok());
}

TEST(Csr, IsANodeClientRequestSignedByItsP256Key) {
  auto kc = MakeCsr("system:node:vm-1", "system:nodes");
  ASSERT_TRUE(kc.ok()) << kc.error().ToString();
  BIO* bio = BIO_new_mem_buf(kc->csr_pem.data(), static_cast<int>(kc->csr_pem.size()));
  X509_REQ* req = PEM_read_bio_X509_REQ(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ASSERT_NE(req, nullptr);
  EVP_PKEY* pub = X509_REQ_get_pubkey(req);
  ASSERT_NE(pub, nullptr);
  EXPECT_EQ(X509_REQ_verify(req, pub), 1);
  EXPECT_TRUE(EVP_PKEY_is_a(pub, "EC"));
  char group[64] = {};
  size_t len = 0;
  EXPECT_EQ(EVP_PKEY_get_group_name(pub, group, sizeof group, &len), 1);
  EXPECT_STREQ(group, "prime256v1");
  char subject[256] = {};
  X509_NAME_oneline(X509_REQ_get_subject_name(req), subject, sizeof subject);
  EXPECT_STREQ(subject, "/O=system:nodes/CN=system:node:vm-1");
  EVP_PKEY_free(pub);
  X509_REQ_free(req);
  EXPECT_NE(kc->key_pem.find("BEGIN PRIVATE KEY"), std::string::npos);
}

TEST(InspectCertificate, TellsWhetherTheCertificateIsForTheKey) {
  auto ca = net::pki::MakeCa("sim-kubelet-test-ca");
  ASSERT_TRUE(ca.ok());
  auto leaf = net::pki::Issue(
      *ca, {.common_name = "system:node:vm-1", .organizations = {"system:nodes"}, .client = true});
  ASSERT_TRUE(leaf.ok());
  auto facts = InspectCertificate(leaf->cert_pem, leaf->key_pem);
  ASSERT_TRUE(facts.ok());
  EXPECT_EQ(facts->common_name, "system:node:vm-1");
  EXPECT_EQ(facts->organization, "system:nodes");
  EXPECT_TRUE(facts->matches_key);
  auto other = MakeCsr("x", "y");
  EXPECT_FALSE(InspectCertificate(leaf->cert_pem, other->key_pem)->matches_key);
}

}  // namespace
}  // namespace hyperslice::sim::kubelet::internal
