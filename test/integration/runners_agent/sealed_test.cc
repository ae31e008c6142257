// A sealed runner agent (--workload-policy-file) as a control node — or anyone holding a control
// node's certificate — reaches it straight over the mTLS link: it runs an image pinned by digest
// and signed by a trusted key (cosign's format, pushed to the local registry by the test) and
// refuses an unsigned image, an image signed by an untrusted key, an image by tag and a pod
// violating the launch policy; Exec and Logs are refused; it listens on its link port only.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <fstream>
#include <regex>

#include "src/base/command.h"
#include "src/runners/attest/attest.h"
#include "test/integration/runners_agent/fixture.h"
#include "test/unit/runners_attest/signing.h"

namespace hyperslice::runners::testing {
namespace {

using attest::testing::NewSigningKey;
using attest::testing::SignBase64;
using attest::testing::SigningKey;

class SealedAgentTest : public OneAgentSuite<SealedAgentTest> {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    Env* env = Shared(&why);
    if (env == nullptr) return;
    trusted_ = new SigningKey(NewSigningKey());
    untrusted_ = new SigningKey(NewSigningKey());
    // The same test image under three repositories, so each has its own .sig tag.
    auto signed_image = env->registry->PushTestImage("sealed/signed");
    auto untrusted_image = env->registry->PushTestImage("sealed/untrusted");
    if (!signed_image.ok() || !untrusted_image.ok()) {
      started_ = ::testing::AssertionFailure()
                 << "push: "
                 << (signed_image.ok() ? untrusted_image.error() : signed_image.error()).message;
      return;
    }
    signed_ = new std::string(*signed_image);
    untrusted_image_ = new std::string(*untrusted_image);
    for (auto [image, key] : {std::pair{*signed_, trusted_}, {*untrusted_image_, untrusted_}}) {
      std::string digest = image.substr(image.find('@') + 1);
      std::string payload = attest::MakeSimpleSigning(image.substr(0, image.find('@')), digest);
      Status st = env->registry->PushCosignSignature(image, payload, SignBase64(*key, payload));
      if (!st.ok()) {
        started_ = ::testing::AssertionFailure() << "signature: " << st.error().message;
        return;
      }
    }
    boost::json::object policy{
        {"apiVersion", "runners.hyperslice.dev/v1alpha1"},
        {"kind", "WorkloadPolicy"},
        {"metadata", boost::json::object{{"name", "models"}}},
        {"spec",
         boost::json::object{
             {"trustedKeys", boost::json::array{boost::json::object{
                                 {"name", "release"}, {"publicKey", trusted_->public_pem}}}},
             {"launchPolicy",
              boost::json::object{{"allowedEnvOverrides", boost::json::array{"MODEL"}}}}}}};
    std::string policy_file = env->dir + "/sealed-policy.json";
    std::ofstream(policy_file) << boost::json::serialize(policy);
    // --require-digest=false: the policy itself, not the runner's digest rule, refuses tags.
    Launch(*env, "runner-sealed",
           {"--workload-policy-file", policy_file, "--require-digest=false"});
  }
  grpc::Status Run(const v1::RunPodRequest& r) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::PodStatus st;
    return stub_->RunPod(&ctx, r, &st);
  }
  static v1::RunPodRequest Plain(const std::string& uid, const std::string& image) {
    v1::RunPodRequest r = Pod(uid, image, {});
    r.mutable_containers(0)->clear_args();
    return r;
  }
  // A refused RunPod: FAILED_PRECONDITION whose message starts with the policy's reason, and
  // nothing of the pod on the runner.
  void ExpectRefused(const v1::RunPodRequest& r, const std::string& reason) {
    grpc::Status st = Run(r);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
    EXPECT_EQ(st.error_message().rfind(reason + ": workload policy models: ", 0), 0u)
        << st.error_message();
    grpc::ClientContext ctx;
    v1::ListPodsResponse list;
    ASSERT_TRUE(stub_->ListPods(&ctx, v1::ListPodsRequest(), &list).ok());
    for (const auto& p : list.pods()) EXPECT_NE(p.pod().uid(), r.pod().uid());
    for (const auto& id : RuntimeList(agent_->RuntimeRoot())) {
      EXPECT_EQ(id.find(r.pod().uid()), std::string::npos) << id;
    }
  }

  static inline SigningKey* trusted_ = nullptr;
  static inline SigningKey* untrusted_ = nullptr;
  static inline std::string* signed_ = nullptr;
  static inline std::string* untrusted_image_ = nullptr;
};

TEST_F(SealedAgentTest, RunsAnImageSignedByATrustedKey) {
  v1::RunPodRequest pod = Plain("s-signed", *signed_);
  auto* env = pod.mutable_containers(0)->add_env();
  env->set_name("MODEL");  // allowed by the launch policy
  env->set_value("m1");
  grpc::Status st = Run(pod);
  ASSERT_TRUE(st.ok()) << st.error_message();
  auto done =
      WaitFor(*stub_, "s-signed", [](const v1::PodStatus& p) { return p.phase() == "Succeeded"; });
  ASSERT_TRUE(done);
  EXPECT_EQ(done->container_statuses(0).image_id(), signed_->substr(signed_->find('@') + 1));
  grpc::ClientContext ctx;
  v1::DeletePodRequest del;
  del.set_uid("s-signed");
  del.set_grace_seconds(0);
  v1::DeletePodResponse resp;
  EXPECT_TRUE(stub_->DeletePod(&ctx, del, &resp).ok());
}

TEST_F(SealedAgentTest, RefusesUnsignedUntrustedAndTaggedImages) {
  ExpectRefused(Plain("s-unsigned", env_->image), "ImageUnsigned");
  ExpectRefused(Plain("s-untrusted", *untrusted_image_), "ImageSignatureUntrusted");
  // The signed repository by tag: its signature names a digest, a tag names none.
  std::string by_tag = signed_->substr(0, signed_->find('@')) + ":v1";
  ExpectRefused(Plain("s-tag", by_tag), "ImageNotByDigest");
  // The trusted signature of the signed image does not cover another image of its repository.
  auto other = env_->registry->PushTestImage("sealed/signed", "v2", "another");
  ASSERT_TRUE(other.ok()) << other.error().message;
  ExpectRefused(Plain("s-other", *other), "ImageUnsigned");
}

TEST_F(SealedAgentTest, RefusesPodsViolatingTheLaunchPolicy) {
  v1::RunPodRequest args = Pod("s-args", *signed_, {"print:override"});
  ExpectRefused(args, "CommandOverrideForbidden");
  v1::RunPodRequest env = Plain("s-env", *signed_);
  auto* e = env.mutable_containers(0)->add_env();
  e->set_name("LD_PRELOAD");
  e->set_value("/x.so");
  ExpectRefused(env, "EnvOverrideForbidden");
  // An init container is a workload too.
  v1::RunPodRequest init = Plain("s-init", *signed_);
  *init.add_init_containers() = init.containers(0);
  init.mutable_init_containers(0)->set_name("init");
  init.mutable_init_containers(0)->set_image(env_->image);
  ExpectRefused(init, "ImageUnsigned");
}

TEST_F(SealedAgentTest, ExecAndLogsAreRefused) {
  // With a terminal or without.
  grpc::Status st;
  for (bool tty : {false, true}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub_->Exec(&ctx);
    v1::ExecInput start;
    start.mutable_start()->set_uid("s-signed");
    start.mutable_start()->set_container("main");
    start.mutable_start()->set_tty(tty);
    start.mutable_start()->add_command("/hstest");
    stream->Write(start);
    stream->WritesDone();
    v1::ExecOutput out;
    EXPECT_FALSE(stream->Read(&out)) << "tty " << tty;
    st = stream->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << "tty " << tty;
    EXPECT_NE(st.error_message().find("AdministrativeAccessForbidden: exec is refused"),
              std::string::npos)
        << st.error_message();
  }

  grpc::ClientContext lctx;
  v1::LogsRequest lr;
  lr.set_uid("s-signed");
  lr.set_container("main");
  auto reader = stub_->Logs(&lctx, lr);
  v1::LogChunk chunk;
  EXPECT_FALSE(reader->Read(&chunk));
  st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(st.error_message().find("LogsForbidden"), std::string::npos) << st.error_message();
}

// The agent exposes nothing but the link-serving port: every listening socket (TCP, UDP, unix)
// that ss attributes to its process is that one.
TEST_F(SealedAgentTest, ListensOnTheLinkPortOnly) {
  auto ss = RunCommand({"ss", "-H", "-l", "-n", "-p", "-t", "-u", "-x", "-w"});
  ASSERT_EQ(ss.exit_code, 0) << ss.errors;
  const std::string tag = "pid=" + std::to_string(agent_->pid()) + ",";
  std::vector<std::string> mine;
  std::istringstream lines(ss.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(tag) != std::string::npos) mine.push_back(line);
  }
  ASSERT_EQ(mine.size(), 1u) << ss.output;
  // ss prints the IPv4 address of a dual-stack socket as [::ffff:127.0.0.1]:port.
  const std::string& a = agent_->address();
  const std::string port = a.substr(a.rfind(':'));
  EXPECT_EQ(mine[0].rfind("tcp", 0), 0u) << mine[0];
  EXPECT_NE(mine[0].find("127.0.0.1"), std::string::npos) << mine[0];
  EXPECT_NE(mine[0].find(port + " "), std::string::npos) << mine[0];
}

}  // namespace
}  // namespace hyperslice::runners::testing
