// Exec through the CRI (cri_exec.h).
#include "src/runners/agent/cri_exec.h"

#include "src/runners/agent/container_runtime.h"

namespace hyperslice::runners::agent {
namespace v1 = ::hyperslice::runners::v1;
namespace cri = ::runtime::v1;

grpc::Status ServeCriExec(cri::RuntimeService::StubInterface& runtime, const std::string& id,
                          const v1::ExecInput::ExecStart& start, grpc::ServerContext* ctx,
                          grpc::ServerReaderWriter<v1::ExecOutput, v1::ExecInput>* stream) {
  if (start.tty() || start.stdin()) {
    return ExecFailed(stream, "exec with a terminal or stdin is not available on the CRI path yet");
  }
  // ExecSync: the command's output comes whole when it ends (no streaming, no stdin).
  cri::ExecSyncRequest req;
  req.set_container_id(id);
  for (const auto& a : start.command()) req.add_cmd(a);
  cri::ExecSyncResponse resp;
  grpc::ClientContext call;
  call.set_deadline(std::chrono::system_clock::now() + std::chrono::hours(1));
  if (auto st = runtime.ExecSync(&call, req, &resp); !st.ok()) {
    return ExecFailed(stream, "the container runtime's exec failed: " + st.error_message());
  }
  if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
  v1::ExecOutput out;
  if (!resp.stdout().empty()) {
    out.set_stdout(resp.stdout());
    stream->Write(out);
  }
  if (!resp.stderr().empty()) {
    out.set_stderr(resp.stderr());
    stream->Write(out);
  }
  v1::ExecOutput exit;
  exit.mutable_exit()->set_code(resp.exit_code());
  stream->Write(exit);
  return grpc::Status::OK;
}

}  // namespace hyperslice::runners::agent
