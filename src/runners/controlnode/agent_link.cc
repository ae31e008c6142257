#include "src/runners/controlnode/agent_link.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cstdio>

#include "src/base/log.h"
#include "src/kube/object_helpers.h"

namespace hyperslice::runners::controlnode {
namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    out += d[p[i] >> 4];
    out += d[p[i] & 15];
  }
  return out;
}

AgentIdentity IdentityOf(const std::string& pem) {
  AgentIdentity id;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return id;
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (cert == nullptr) return id;
  if (const ASN1_INTEGER* serial = X509_get0_serialNumber(cert)) {
    id.serial = Hex(serial->data, static_cast<size_t>(serial->length));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (X509_digest(cert, EVP_sha256(), md, &len) == 1) id.fingerprint = Hex(md, len);
  struct tm t {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &t) == 1) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02dZ", t.tm_year + 1900, t.tm_mon + 1,
                  t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec);
    id.not_after = buf;
  }
  X509_free(cert);
  return id;
}

}  // namespace

AgentLink::AgentLink(AgentLinkOptions options) : options_(std::move(options)) {}

AgentLink::~AgentLink() { Stop(); }

Status AgentLink::Start() {
  if (!options_.credentials) {
    return Error::Make(Error::Code::kInvalidArgument, "agent link: no credentials factory");
  }
  auto creds = options_.credentials(options_.runner);
  if (!creds.ok()) return creds.error();
  if (!*creds) {
    return Error::Make(Error::Code::kInvalidArgument, "agent link: credentials factory gave none");
  }
  grpc::ChannelArguments args;
  if (options_.verify_runner_name) args.SetSslTargetNameOverride(options_.runner);
  // Reconnect within the probe interval, not gRPC's default of up to two minutes: a runner that
  // is back must relink within one probe.
  int backoff = static_cast<int>(std::clamp<int64_t>(options_.probe_interval.count(), 100, 5000));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, backoff);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(backoff, 1000));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff);
  // One channel per runner (no sharing of subchannels between links to the same address).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  channel_ = grpc::CreateCustomChannel(options_.address, *creds, args);
  stub_ = v1::RunnerAgent::NewStub(channel_);
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  prober_ = std::thread([this] { ProbeLoop(); });
  watcher_ = std::thread([this] { WatchLoop(); });
  return OkStatus();
}

void AgentLink::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (watch_ctx_ != nullptr) watch_ctx_->TryCancel();
  }
  cv_.notify_all();
  if (prober_.joinable()) prober_.join();
  if (watcher_.joinable()) watcher_.join();
}

AgentSnapshot AgentLink::Snapshot(bool with_pods) const {
  std::lock_guard lock(mu_);
  if (with_pods) return snap_;
  AgentSnapshot s;
  s.answered = snap_.answered;
  s.healthy = snap_.healthy;
  s.last_seen = snap_.last_seen;
  s.last_error = snap_.last_error;
  s.info = snap_.info;
  s.pods_synced = snap_.pods_synced;
  s.identity = snap_.identity;
  return s;
}

std::optional<v1::PodStatus> AgentLink::Pod(const std::string& uid) const {
  std::lock_guard lock(mu_);
  auto it = snap_.pods.find(uid);
  if (it == snap_.pods.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> AgentLink::UidsNamed(const std::string& ns,
                                              const std::string& name) const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [uid, p] : snap_.pods) {
    if (p.pod().namespace_() == ns && p.pod().name() == name) out.push_back(uid);
  }
  return out;
}

uint64_t AgentLink::run_pod_calls() const {
  std::lock_guard lock(mu_);
  return run_pod_calls_;
}

bool AgentLink::SleepFor(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, d, [&] { return stopping_; });
  return !stopping_;
}

void AgentLink::Notify() {
  if (options_.on_change) options_.on_change();
}

void AgentLink::ProbeLoop() {
  auto timeout =
      std::min<std::chrono::milliseconds>(options_.probe_interval, std::chrono::milliseconds(5000));
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    v1::InfoRequest req;
    v1::RunnerInfo info;
    grpc::Status st = stub_->Info(&ctx, req, &info);
    auto now = std::chrono::system_clock::now();
    bool changed = false;
    bool cancel_watch = false;
    {
      std::lock_guard lock(mu_);
      bool was_healthy = snap_.healthy;
      if (st.ok()) {
        std::string old_boot = snap_.info ? snap_.info->boot_id() : "";
        std::string old_caps = snap_.info ? snap_.info->SerializeAsString() : "";
        bool first = !snap_.answered;
        snap_.answered = true;
        snap_.last_error.clear();
        if (info.healthy()) snap_.last_seen = now;
        changed = first || old_boot != info.boot_id() || old_caps != info.SerializeAsString();
        if (!old_boot.empty() && old_boot != info.boot_id()) {
          log::Info("runner agent restarted", {{"runner", options_.runner}});
        }
        snap_.info = info;
        auto certs = ctx.auth_context() ? ctx.auth_context()->FindPropertyValues("x509_pem_cert")
                                        : std::vector<grpc::string_ref>{};
        if (!certs.empty()) {
          snap_.identity = IdentityOf(std::string(certs.front().data(), certs.front().size()));
        }
      } else {
        snap_.last_error = st.error_message();
      }
      bool healthy = snap_.answered && snap_.info && snap_.info->healthy() &&
                     now - snap_.last_seen <= options_.unhealthy_after;
      // An unhealthy info answer counts at once; silence counts after the bound.
      snap_.healthy = healthy;
      if (was_healthy != healthy) {
        changed = true;
        log::Info(healthy ? "runner healthy" : "runner unhealthy",
                  {{"runner", options_.runner}, {"error", snap_.last_error}});
      }
      if (!healthy && watch_ctx_ != nullptr) cancel_watch = true;
      if (cancel_watch) watch_ctx_->TryCancel();
    }
    if (changed) Notify();
    if (!SleepFor(options_.probe_interval)) return;
  }
}

void AgentLink::WatchLoop() {
  auto backoff =
      std::min<std::chrono::milliseconds>(options_.probe_interval, std::chrono::milliseconds(1000));
  while (true) {
    grpc::ClientContext ctx;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      watch_ctx_ = &ctx;
    }
    v1::WatchPodsRequest wreq;
    auto reader = stub_->WatchPods(&ctx, wreq);
    // The full set, then the stream's changes on top.
    grpc::ClientContext lctx;
    lctx.set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
    v1::ListPodsResponse list;
    grpc::Status ls = stub_->ListPods(&lctx, v1::ListPodsRequest(), &list);
    bool synced = false;
    if (ls.ok()) {
      std::lock_guard lock(mu_);
      snap_.pods.clear();
      for (const auto& p : list.pods()) snap_.pods[p.pod().uid()] = p;
      snap_.pods_synced = true;
      synced = true;
    }
    if (synced) {
      Notify();
      for (const auto& p : list.pods()) {
        if (options_.on_pod) options_.on_pod(p);
      }
      v1::PodStatus ps;
      while (reader->Read(&ps)) {
        {
          std::lock_guard lock(mu_);
          if (ps.deleted()) {
            snap_.pods.erase(ps.pod().uid());
          } else {
            snap_.pods[ps.pod().uid()] = ps;
          }
        }
        if (options_.on_pod) options_.on_pod(ps);
      }
    }
    ctx.TryCancel();
    (void)reader->Finish();
    bool was_synced = false;
    {
      std::lock_guard lock(mu_);
      watch_ctx_ = nullptr;
      was_synced = snap_.pods_synced;
      snap_.pods_synced = false;
    }
    if (was_synced) Notify();
    if (!SleepFor(backoff)) return;
  }
}

Result<v1::PodStatus> AgentLink::RunPod(const v1::RunPodRequest& req) {
  {
    std::lock_guard lock(mu_);
    ++run_pod_calls_;
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
  v1::PodStatus out;
  grpc::Status st = stub_->RunPod(&ctx, req, &out);
  if (!st.ok()) return FromGrpc(st, "RunPod on runner " + options_.runner);
  std::lock_guard lock(mu_);
  if (snap_.pods_synced && !out.pod().uid().empty()) snap_.pods[out.pod().uid()] = out;
  return out;
}

Status AgentLink::DeletePod(const std::string& uid, int64_t grace_seconds) {
  grpc::ClientContext ctx;
  // The agent waits out the grace before SIGKILL: the deadline must leave room for it.
  ctx.set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout +
                   std::chrono::seconds(std::max<int64_t>(grace_seconds, 0)));
  v1::DeletePodRequest req;
  req.set_uid(uid);
  req.set_grace_seconds(grace_seconds);
  v1::DeletePodResponse resp;
  grpc::Status st = stub_->DeletePod(&ctx, req, &resp);
  if (!st.ok()) return FromGrpc(st, "DeletePod on runner " + options_.runner);
  std::lock_guard lock(mu_);
  snap_.pods.erase(uid);
  return OkStatus();
}

}  // namespace hyperslice::runners::controlnode
