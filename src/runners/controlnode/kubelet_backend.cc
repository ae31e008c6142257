#include "src/runners/controlnode/kubelet_backend.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <string>
#include <thread>
#include <utility>

#include "src/base/json.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/kube/resource.h"
#include "src/runners/controlnode/agent_link.h"
#include "src/runners/policy/policy.h"

namespace hyperslice::runners::controlnode {
namespace {

using kubeletapi::ExecInput;

class AgentBackend final : public kubeletapi::Backend {
 public:
  AgentBackend(std::shared_ptr<kube::Client> client, std::shared_ptr<ControlNodeSet> set)
      : client_(std::move(client)), set_(std::move(set)) {}

  Status Logs(const std::string& ns, const std::string& pod, const std::string& container,
              const kubeletapi::LogOptions& options, kubeletapi::LogSink& sink) override {
    HS_ASSIGN_OR_RETURN(std::string node, NodeOf(ns, pod));
    ControlNodeSet::Sealing sealing = set_->SealingOf(node);
    if (sealing.sealed && !sealing.allow_logs) {
      return Error::Make(Error::Code::kForbidden,
                         "logs of " + ns + "/" + pod + " are not readable: control node " +
                             sealing.control_node + " is sealed and its workload policy " +
                             sealing.policy + " does not allow logs",
                         policy::kReasonLogs, 403);
    }
    HS_ASSIGN_OR_RETURN(ControlNodeSet::PodTarget target, set_->AgentForPod(node, ns, pod));
    v1::LogsRequest req;
    req.set_uid(target.uid);
    req.set_container(container);
    req.set_follow(options.follow);
    req.set_tail_lines(options.tail_lines.value_or(-1));
    req.set_since_seconds(options.since_seconds.value_or(0));
    req.set_timestamps(options.timestamps);
    req.set_limit_bytes(options.limit_bytes.value_or(0));
    req.set_previous(options.previous);
    grpc::ClientContext ctx;
    // A follow call blocks in Read until the agent has more: a client that goes away cancels
    // the call from here.
    std::atomic<bool> done{false};
    std::thread canceller([&] {
      while (!done.load()) {
        if (sink.WaitCancelled(std::chrono::milliseconds(200))) {
          ctx.TryCancel();
          return;
        }
      }
    });
    auto reader = target.stub->Logs(&ctx, req);
    v1::LogChunk chunk;
    bool wrote = false;
    while (reader->Read(&chunk)) {
      wrote = true;
      if (!sink.Write(chunk.data())) {
        ctx.TryCancel();
        break;
      }
    }
    grpc::Status s = reader->Finish();
    done = true;
    canceller.join();
    if (!s.ok() && s.error_code() != grpc::StatusCode::CANCELLED && !wrote) {
      return FromGrpc(s, "logs of " + ns + "/" + pod + " on runner " + target.runner);
    }
    return OkStatus();
  }

  // A sealed control node gives no administrative access to its pods (issue 21 §5).
  Status AdmitExec(const kubeletapi::ExecRequest& request) override {
    return RefuseOnSealed("exec", request.namespace_name, request.pod);
  }
  Status AdmitUnsupported(const std::string& kind, const std::string& ns,
                          const std::string& pod) override {
    return RefuseOnSealed(kind, ns, pod);
  }

  Result<int> Exec(const kubeletapi::ExecRequest& request,
                   kubeletapi::ExecSession& session) override {
    HS_RETURN_IF_ERROR(RefuseOnSealed("exec", request.namespace_name, request.pod));
    HS_ASSIGN_OR_RETURN(ControlNodeSet::PodTarget target,
                        Target(request.namespace_name, request.pod));
    if (!request.uid.empty() && request.uid != target.uid) {
      return Error::Make(Error::Code::kNotFound,
                         "pod " + request.namespace_name + "/" + request.pod + " has another uid");
    }
    grpc::ClientContext ctx;
    auto stream = target.stub->Exec(&ctx);
    v1::ExecInput first;
    auto* start = first.mutable_start();
    start->set_uid(target.uid);
    start->set_container(request.container);
    for (const auto& arg : request.command) start->add_command(arg);
    start->set_tty(request.tty);
    start->set_stdin(request.with_stdin);
    if (!stream->Write(first)) {
      grpc::Status s = stream->Finish();
      return FromGrpc(s, "exec on runner " + target.runner);
    }
    // Input pump: the client's stdin, resizes and departure go to the agent on their own thread
    // while this one copies the agent's output back.
    std::atomic<bool> finished{false};
    std::thread input([&] {
      bool stdin_open = request.with_stdin;
      while (!finished.load()) {
        ExecInput in = session.ReadInput(std::chrono::milliseconds(200));
        v1::ExecInput msg;
        switch (in.kind) {
          case ExecInput::Kind::kStdin:
            if (!stdin_open) continue;
            msg.set_stdin(in.data);
            break;
          case ExecInput::Kind::kStdinEof:
            if (!stdin_open) continue;
            stdin_open = false;
            msg.set_close_stdin(true);
            break;
          case ExecInput::Kind::kResize:
            msg.mutable_resize()->set_width(in.size.width);
            msg.mutable_resize()->set_height(in.size.height);
            break;
          case ExecInput::Kind::kTimeout:
            continue;
          case ExecInput::Kind::kGone:
            ctx.TryCancel();
            return;
        }
        if (!stream->Write(msg)) return;
      }
    });
    int code = -1;
    std::string error;
    v1::ExecOutput out;
    while (stream->Read(&out)) {
      if (out.has_exit()) {
        code = out.exit().code();
        error = out.exit().error();
        break;
      }
      if (!out.stdout().empty()) session.WriteStdout(out.stdout());
      if (!out.stderr().empty()) session.WriteStderr(out.stderr());
    }
    finished = true;
    input.join();
    stream->WritesDone();
    grpc::Status s = stream->Finish();
    if (!error.empty()) return Error::Make(Error::Code::kInvalidArgument, error);
    if (code < 0) {
      if (s.ok())
        return Error::Make(Error::Code::kInternal, "the agent ended exec without an exit");
      return FromGrpc(s, "exec on runner " + target.runner);
    }
    return code;
  }

 private:
  Result<std::string> NodeOf(const std::string& ns, const std::string& name) {
    HS_ASSIGN_OR_RETURN(kube::Object pod, client_->Get(kube::resources::Pods(), ns, name));
    const auto* spec = jsonfield::ObjectField(pod, "spec");
    const std::string node(spec != nullptr ? jsonfield::StringField(*spec, "nodeName") : "");
    if (node.empty()) {
      return Error::Make(Error::Code::kNotFound, "pod " + ns + "/" + name + " is not bound");
    }
    return node;
  }

  Result<ControlNodeSet::PodTarget> Target(const std::string& ns, const std::string& name) {
    HS_ASSIGN_OR_RETURN(std::string node, NodeOf(ns, name));
    return set_->AgentForPod(node, ns, name);
  }

  Status RefuseOnSealed(const std::string& what, const std::string& ns, const std::string& pod) {
    HS_ASSIGN_OR_RETURN(std::string node, NodeOf(ns, pod));
    ControlNodeSet::Sealing sealing = set_->SealingOf(node);
    if (!sealing.sealed) return OkStatus();
    return Error::Make(Error::Code::kForbidden,
                       what + " into " + ns + "/" + pod + " is refused: control node " +
                           sealing.control_node +
                           " is sealed (no administrative access to its workloads)",
                       policy::kReasonAdminAccess, 403);
  }

  std::shared_ptr<kube::Client> client_;
  std::shared_ptr<ControlNodeSet> set_;
};

}  // namespace

std::shared_ptr<kubeletapi::Backend> MakeKubeletBackend(std::shared_ptr<kube::Client> client,
                                                        std::shared_ptr<ControlNodeSet> set) {
  return std::make_shared<AgentBackend>(std::move(client), std::move(set));
}

}  // namespace hyperslice::runners::controlnode
