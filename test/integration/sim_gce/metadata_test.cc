// The per-VM metadata server as a startup script uses it: the exact
// `curl -H 'Metadata-Flavor: Google' http://${GCE_METADATA_HOST}/computeMetadata/v1/...` calls
// (run through the real curl), 404 for an absent key, the value once set with setMetadata, and a
// wait_for_change that blocks until the value changes. Also the OAuth2 JWT-bearer token endpoint.
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <atomic>
#include <cstdio>
#include <future>

#include "test/integration/sim_gce/sim_fixture.h"

namespace hyperslice::sim::gce::testing {
namespace {

class MetadataTest : public SimTest {
 protected:
  // One running VM; returns its name.
  std::string StartVm() {
    MakeTemplate("md", "e2-medium");
    WaitDone(Api("POST", Zonal("instanceGroupManagers"), MigBody("md", "md", 1)).body);
    EXPECT_TRUE(Eventually([&] {
      auto i = Instances();
      return i.size() == 1 && i[0].at("status") == "RUNNING";
    }));
    auto items = Instances();
    return items.empty() ? "" : std::string(items[0].at("name").as_string());
  }

  void SetMetadata(const std::string& vm, const std::string& key, const std::string& value) {
    Reply inst = Api("GET", Zonal("instances/" + vm));
    json::array items = inst.body.at("metadata").as_object().contains("items")
                            ? inst.body.at("metadata").at("items").as_array()
                            : json::array{};
    bool replaced = false;
    for (auto& it : items) {
      if (it.at("key") == json::value(key)) {
        it.as_object()["value"] = value;
        replaced = true;
      }
    }
    if (!replaced) items.push_back(json::object{{"key", key}, {"value", value}});
    Reply r = Api("POST", Zonal("instances/" + vm + "/setMetadata"),
                  json::object{{"fingerprint", inst.body.at("metadata").at("fingerprint")},
                               {"items", items}});
    ASSERT_EQ(r.status, 200) << r.raw;
    WaitDone(r.body);
  }

  // Runs a shell command; returns {exit status, stdout}.
  static std::pair<int, std::string> Shell(const std::string& cmd) {
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) return {-1, ""};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int rc = pclose(p);
    return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
  }

  // The startup script's call, verbatim, with GCE_METADATA_HOST set for this VM.
  std::pair<int, std::string> Curl(const std::string& vm, const std::string& key,
                                   const std::string& extra = "") {
    std::string host = sim_->metadata_host(kProject, kZone, vm);
    return Shell("GCE_METADATA_HOST='" + host +
                 "' sh -c 'curl -sf -H \"Metadata-Flavor: Google\" "
                 "\"http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/"
                 "instance/attributes/" +
                 key + extra + "\"'");
  }
};

TEST_F(MetadataTest, StartupScriptCurlSeesAbsentThenSetValue) {
  std::string vm = StartVm();
  ASSERT_FALSE(vm.empty());
  // curl -f exits 22 on HTTP errors: the key is absent (404).
  auto [rc1, out1] = Curl(vm, "kubeadm-join-token");
  EXPECT_EQ(rc1, 22) << out1;
  // Template metadata is there from the start.
  auto [rc0, out0] = Curl(vm, "startup-script");
  EXPECT_EQ(rc0, 0);
  EXPECT_EQ(out0, "#!/bin/bash\necho hi\n");

  SetMetadata(vm, "kubeadm-join-token", "abcdef.0123456789abcdef");
  auto [rc2, out2] = Curl(vm, "kubeadm-join-token");
  EXPECT_EQ(rc2, 0);
  EXPECT_EQ(out2, "abcdef.0123456789abcdef");
}

TEST_F(MetadataTest, RequiresMetadataFlavorAndAnswersWithIt) {
  std::string vm = StartVm();
  std::string prefix = "/sim/instances/" + std::string(kProject) + "/" + kZone + "/" + vm;
  Reply no_header = Do(*metadata_, "GET", prefix + "/computeMetadata/v1/instance/name");
  EXPECT_EQ(no_header.status, 403);
  Reply ok = Do(*metadata_, "GET", prefix + "/computeMetadata/v1/instance/name", "",
                {{"Metadata-Flavor", "Google"}});
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.raw, vm);
  EXPECT_EQ(ok.Header("metadata-flavor"), "Google");
  EXPECT_FALSE(ok.Header("etag").empty());
  // The same VM through the header instead of the path prefix.
  Reply by_header = Do(*metadata_, "GET", "/computeMetadata/v1/instance/zone", "",
                       {{"Metadata-Flavor", "Google"},
                        {"X-Sim-Instance", std::string(kProject) + "/" + kZone + "/" + vm}});
  EXPECT_EQ(by_header.status, 200);
  EXPECT_NE(by_header.raw.find("/zones/" + std::string(kZone)), std::string::npos);
  Reply project = Do(*metadata_, "GET", prefix + "/computeMetadata/v1/project/project-id", "",
                     {{"Metadata-Flavor", "Google"}});
  EXPECT_EQ(project.raw, kProject);
  Reply id = Do(*metadata_, "GET", prefix + "/computeMetadata/v1/instance/id", "",
                {{"Metadata-Flavor", "Google"}});
  EXPECT_EQ(id.raw, std::string(Instances()[0].at("id").as_string()));
  Reply all = Do(*metadata_, "GET", prefix + "/computeMetadata/v1/instance/?recursive=true", "",
                 {{"Metadata-Flavor", "Google"}});
  ASSERT_EQ(all.status, 200);
  EXPECT_EQ(all.body.at("name"), json::value(vm));
  EXPECT_EQ(all.body.at("attributes").at("startup-script"), "#!/bin/bash\necho hi\n");
  // The VM's token is an access token the API accepts.
  Reply tok =
      Do(*metadata_, "GET", prefix + "/computeMetadata/v1/instance/service-accounts/default/token",
         "", {{"Metadata-Flavor", "Google"}});
  ASSERT_EQ(tok.status, 200) << tok.raw;
  EXPECT_EQ(tok.body.at("token_type"), "Bearer");
  Reply api = ApiRaw("GET", "zones", "", std::string(tok.body.at("access_token").as_string()));
  EXPECT_EQ(api.status, 200);
}

TEST_F(MetadataTest, WaitForChangeBlocksUntilTheValueChanges) {
  std::string vm = StartVm();
  std::string host = sim_->metadata_host(kProject, kZone, vm);
  // Absent key: the wait returns once the key appears.
  std::atomic<bool> returned{false};
  auto waiter = std::async(std::launch::async, [&] {
    auto r = Curl(vm, "kubeadm-join-token", "?wait_for_change=true&timeout_sec=30");
    returned = true;
    return r;
  });
  // Parked in the simulator: from now on only a change (or timeout_sec) answers it.
  ASSERT_TRUE(Eventually([&] { return sim_->metadata_waiters() == 1; }))
      << "wait_for_change was answered without a change";
  EXPECT_FALSE(returned.load()) << "wait_for_change returned before any change";
  SetMetadata(vm, "kubeadm-join-token", "tok-1");
  auto [rc, out] = waiter.get();
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "tok-1");

  // With last_etag: returns at once when the value already differs, blocks while it matches.
  std::string prefix = "/sim/instances/" + std::string(kProject) + "/" + kZone + "/" + vm;
  std::string path = prefix + "/computeMetadata/v1/instance/attributes/kubeadm-join-token";
  Reply now = Do(*metadata_, "GET", path, "", {{"Metadata-Flavor", "Google"}});
  std::string etag = now.Header("etag");
  ASSERT_FALSE(etag.empty());
  Reply stale = Do(*metadata_, "GET", path + "?wait_for_change=true&last_etag=0000", "",
                   {{"Metadata-Flavor", "Google"}});
  EXPECT_EQ(stale.raw, "tok-1");
  auto second = std::async(std::launch::async, [&] {
    return Do(*metadata_, "GET", path + "?wait_for_change=true&last_etag=" + etag, "",
              {{"Metadata-Flavor", "Google"}});
  });
  ASSERT_TRUE(Eventually([&] { return sim_->metadata_waiters() == 1; }))
      << "a wait whose last_etag matches was answered without a change";
  EXPECT_EQ(second.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  SetMetadata(vm, "kubeadm-join-token", "tok-2");
  Reply changed = second.get();
  EXPECT_EQ(changed.status, 200);
  EXPECT_EQ(changed.raw, "tok-2");
  EXPECT_NE(changed.Header("etag"), etag);
  // timeout_sec bounds the wait; the current value comes back.
  Reply timed = Do(*metadata_, "GET", path + "?wait_for_change=true&timeout_sec=1", "",
                   {{"Metadata-Flavor", "Google"}});
  EXPECT_EQ(timed.status, 200);
  EXPECT_EQ(timed.raw, "tok-2");
}

// ---- OAuth2 ----

std::string SignRs256(const std::string& private_pem, const std::string& data) {
  BIO* bio = BIO_new_mem_buf(private_pem.data(), static_cast<int>(private_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (key == nullptr) return "";
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  size_t len = 0;
  std::string sig;
  if (EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key) == 1 &&
      EVP_DigestSign(ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(data.data()),
                     data.size()) == 1) {
    sig.resize(len);
    EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                   reinterpret_cast<const unsigned char*>(data.data()), data.size());
    sig.resize(len);
  }
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(key);
  return sig;
}

std::string B64Url(const std::string& in) {
  static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  int val = 0, bits = -6;
  for (unsigned char c : in) {
    val = (val << 8) + c;
    bits += 8;
    while (bits >= 0) {
      out += t[(val >> bits) & 0x3F];
      bits -= 6;
    }
  }
  if (bits > -6) out += t[((val << 8) >> (bits + 8)) & 0x3F];
  return out;
}

std::string MakeJwt(const json::object& key, const std::string& aud, int64_t iat) {
  std::string header = json::serialize(
      json::object{{"alg", "RS256"}, {"typ", "JWT"}, {"kid", key.at("private_key_id")}});
  std::string claims =
      json::serialize(json::object{{"iss", key.at("client_email")},
                                   {"scope", "https://www.googleapis.com/auth/compute"},
                                   {"aud", aud},
                                   {"iat", iat},
                                   {"exp", iat + 3600}});
  std::string signing = B64Url(header) + "." + B64Url(claims);
  return signing + "." + B64Url(SignRs256(std::string(key.at("private_key").as_string()), signing));
}

TEST_F(SimTest, ServiceAccountKeyJwtIsExchangedForAnAccessToken) {
  Reply key = Control("POST", "/control/service-account-keys",
                      json::object{{"email", "ops@my-gcp-project.iam.gserviceaccount.com"}});
  ASSERT_EQ(key.status, 200) << key.raw;
  EXPECT_EQ(key.body.at("type"), "service_account");
  EXPECT_EQ(key.body.at("token_uri"), json::value(sim_->token_endpoint()));
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  std::string jwt = MakeJwt(key.body.as_object(), sim_->token_endpoint(), now);
  auto post = [&](const std::string& assertion) {
    return Do(
        *api_, "POST", "/token",
        "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + assertion,
        {{"Content-Type", "application/x-www-form-urlencoded"}});
  };
  Reply tok = post(jwt);
  ASSERT_EQ(tok.status, 200) << tok.raw;
  EXPECT_EQ(tok.body.at("token_type"), "Bearer");
  EXPECT_GT(tok.body.at("expires_in").as_int64(), 0);
  EXPECT_EQ(ApiRaw("GET", "zones", "", std::string(tok.body.at("access_token").as_string())).status,
            200);

  // A tampered signature, an expired assertion and a foreign audience are refused.
  std::string tampered = jwt;
  tampered[tampered.size() - 5] = tampered[tampered.size() - 5] == 'A' ? 'B' : 'A';
  Reply bad = post(tampered);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body.at("error"), "invalid_grant");
  EXPECT_EQ(post(MakeJwt(key.body.as_object(), sim_->token_endpoint(), now - 7200)).status, 400);
  EXPECT_EQ(post(MakeJwt(key.body.as_object(), "https://example.invalid/token", now)).status, 400);
}

}  // namespace
}  // namespace hyperslice::sim::gce::testing
