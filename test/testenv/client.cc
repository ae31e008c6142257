// Clients and namespaces on the shared cluster (needs the kube client runtime).
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <map>
#include <mutex>

#include <gtest/gtest.h>

#include "src/kube/resource.h"
#include "test/testenv/testenv.h"

namespace hyperslice::testenv {
namespace {

// DNS-1123 label from free text: lower-case alphanumerics and '-', no leading/trailing '-'.
std::string Dns1123(const std::string& in, size_t max_len) {
  std::string out;
  for (char c : in) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) {
      out += static_cast<char>(std::tolower(u));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  if (out.size() > max_len) out.resize(max_len);
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "test" : out;
}

}  // namespace

std::shared_ptr<kube::Client> AdminClient() {
  auto client = kube::Client::Create(Cluster().AdminConfig());
  if (!client.ok()) {
    ADD_FAILURE() << "admin client: " << client.error().ToString();
    return nullptr;
  }
  return *client;
}

std::string TestNamespace() {
  static std::mutex mu;
  static std::map<std::string, std::string> by_test;  // full test name -> namespace
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string full = info ? std::string(info->test_suite_name()) + "." + info->name() : "no-test";
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = by_test.find(full); it != by_test.end()) return it->second;
  }
  // Unique across test binaries sharing nothing but the name: pid and a counter as the suffix.
  std::string suffix =
      "-" + std::to_string(getpid() % 100000) + "-" + std::to_string(counter.fetch_add(1));
  std::string name = Dns1123(full, 63 - suffix.size()) + suffix;

  auto client = AdminClient();
  if (!client) return name;
  kube::Object ns{{"apiVersion", "v1"},
                  {"kind", "Namespace"},
                  {"metadata", boost::json::object{{"name", name}}}};
  auto created = client->Create(kube::resources::Namespaces(), "", ns);
  if (!created.ok()) {
    ADD_FAILURE() << "creating namespace " << name << ": " << created.error().ToString();
    return name;
  }
  std::lock_guard<std::mutex> lock(mu);
  by_test[full] = name;
  return name;
}

}  // namespace hyperslice::testenv
