// Test fixture: a software TPM 2.0 (swtpm, Debian) on loopback for the prover, started per test
// with its own state folder, and an EK certificate issued by the test's own CA.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "src/base/command.h"
#include "src/base/result.h"

extern char** environ;

namespace hyperslice::runners::attest::testing {

inline bool OnPath(const std::string& tool) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    if (::access((p.substr(start, end - start) + "/" + tool).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

inline bool PortFree(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

inline bool Connects(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// A child process killed (SIGTERM, then reaped) when this goes away.
class Child {
 public:
  static std::unique_ptr<Child> Spawn(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return nullptr;
    auto c = std::make_unique<Child>();
    c->pid_ = pid;
    return c;
  }
  bool Exited() {
    int status = 0;
    if (!reaped_ && ::waitpid(pid_, &status, WNOHANG) == pid_) reaped_ = true;
    return reaped_;
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// Polls `ready` until it holds or `deadline` passes (a condition, not a fixed sleep).
template <typename F>
bool WaitFor(F ready, std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
  auto end = std::chrono::steady_clock::now() + deadline;
  auto step = std::chrono::milliseconds(5);
  while (std::chrono::steady_clock::now() < end) {
    if (ready()) return true;
    std::this_thread::sleep_for(step);
    step = std::min(step * 2, std::chrono::milliseconds(100));
  }
  return ready();
}

class Swtpm {
 public:
  // Skip reason when swtpm is not installed.
  static std::optional<std::string> Missing() {
    if (!OnPath("swtpm") || !OnPath("swtpm_setup")) {
      return "swtpm is not installed (Debian swtpm, swtpm-tools; scripts/deps.sh)";
    }
#if !HS_ATTEST_HAVE_TSS
    return "built without libtss2 (Debian libtss2-dev; scripts/deps.sh)";
#endif
    return std::nullopt;
  }

  // The TCTI for swtpm needs the control port at port+1; a free pair is picked and swtpm started
  // on it, retrying on a lost race for the ports.
  //
  // `with_ek_certificate`: manufacture the TPM first with swtpm_setup --create-ek-cert, its EK
  // certificates issued by swtpm_localca with a CA of its own in the test's folder (as a vendor
  // provisions a real TPM); ek_ca_pem() then holds that CA's root and intermediate.
  static Result<std::unique_ptr<Swtpm>> Start(bool with_ek_certificate = false) {
    auto t = std::make_unique<Swtpm>();
    t->dir_ = std::filesystem::temp_directory_path() /
              ("hs-swtpm-" + std::to_string(::getpid()) + "-" + std::to_string(Counter()++));
    std::filesystem::create_directories(t->dir_ / "state");
    if (with_ek_certificate) HS_RETURN_IF_ERROR(t->Manufacture());
    std::mt19937 rng(std::random_device{}());
    for (int attempt = 0; attempt < 20; ++attempt) {
      int port = 20000 + static_cast<int>(rng() % 40000);
      if (!PortFree(port) || !PortFree(port + 1)) continue;
      t->child_ = Child::Spawn(
          {"swtpm", "socket", "--tpm2", "--server",
           "type=tcp,port=" + std::to_string(port) + ",bindaddr=127.0.0.1", "--ctrl",
           "type=tcp,port=" + std::to_string(port + 1) + ",bindaddr=127.0.0.1", "--flags",
           "not-need-init,startup-clear", "--tpmstate", "dir=" + (t->dir_ / "state").string()});
      if (!t->child_) return Error::Make(Error::Code::kInternal, "could not start swtpm");
      bool up =
          WaitFor([&] { return t->child_->Exited() || (Connects(port) && Connects(port + 1)); });
      if (up && !t->child_->Exited()) {
        t->port_ = port;
        return t;
      }
      t->child_.reset();
    }
    return Error::Make(Error::Code::kUnavailable, "swtpm did not start on a free port pair");
  }

  std::string Tcti() const { return "swtpm:host=127.0.0.1,port=" + std::to_string(port_); }
  const std::string& ek_ca_pem() const { return ek_ca_pem_; }

  ~Swtpm() {
    child_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

 private:
  Status Manufacture() {
    auto ca = dir_ / "ca";
    std::filesystem::create_directories(ca);
    std::ofstream(dir_ / "localca.conf")
        << "statedir = " << ca.string() << "\nsigningkey = " << (ca / "signkey.pem").string()
        << "\nissuercert = " << (ca / "issuercert.pem").string()
        << "\ncertserial = " << (ca / "certserial").string() << "\n";
    std::ofstream(dir_ / "setup.conf")
        << "create_certs_tool = swtpm_localca\n"
        << "create_certs_tool_config = " << (dir_ / "localca.conf").string() << "\n";
    auto r =
        RunCommand({"swtpm_setup", "--tpm2", "--tpmstate", (dir_ / "state").string(),
                    "--create-ek-cert", "--config", (dir_ / "setup.conf").string(), "--overwrite"});
    if (r.exit_code != 0) {
      return Error::Make(Error::Code::kInternal, "swtpm_setup failed: " + r.errors + r.output);
    }
    for (const char* f : {"swtpm-localca-rootca-cert.pem", "issuercert.pem"}) {
      std::ifstream in(ca / f);
      ek_ca_pem_.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return OkStatus();
  }

  static int& Counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path dir_;
  std::unique_ptr<Child> child_;
  int port_ = 0;
  std::string ek_ca_pem_;
};

// An EK certificate over `ek_public_pem`, issued by the CA (cert + key PEM) as a TPM
// manufacturer would: the test's own trust anchor.
inline Result<std::string> IssueEkCertificate(const std::string& ca_cert_pem,
                                              const std::string& ca_key_pem,
                                              const std::string& ek_public_pem) {
  auto bio = [](const std::string& s) {
    return std::unique_ptr<BIO, decltype(&BIO_free)>(
        BIO_new_mem_buf(s.data(), static_cast<int>(s.size())), &BIO_free);
  };
  auto b1 = bio(ca_cert_pem), b2 = bio(ca_key_pem), b3 = bio(ek_public_pem);
  std::unique_ptr<X509, decltype(&X509_free)> ca(
      PEM_read_bio_X509(b1.get(), nullptr, nullptr, nullptr), &X509_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> ca_key(
      PEM_read_bio_PrivateKey(b2.get(), nullptr, nullptr, nullptr), &EVP_PKEY_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> ek(
      PEM_read_bio_PUBKEY(b3.get(), nullptr, nullptr, nullptr), &EVP_PKEY_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), &X509_free);
  if (!ca || !ca_key || !ek || !cert) {
    return Error::Make(Error::Code::kInvalidArgument, "unreadable CA or EK PEM");
  }
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof(serial));
  serial[0] &= 0x7f;
  std::unique_ptr<BIGNUM, decltype(&BN_free)> bn(BN_bin2bn(serial, sizeof(serial), nullptr),
                                                 &BN_free);
  BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get()));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.get()));
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("swtpm EK"), -1, -1, 0);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
  X509_set_pubkey(cert.get(), ek.get());
  if (X509_sign(cert.get(), ca_key.get(), EVP_sha256()) <= 0) {
    return Error::Make(Error::Code::kInternal, "signing the EK certificate failed");
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> out(BIO_new(BIO_s_mem()), &BIO_free);
  PEM_write_bio_X509(out.get(), cert.get());
  char* data = nullptr;
  long n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

}  // namespace hyperslice::runners::attest::testing
