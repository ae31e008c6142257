// Exec in a CRI container (cri_runtime.h): the runtime's streaming server bridged to the
// RunnerAgent Exec stream (cri_exec.cc).
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "src/runners/agent.pb.h"
#include "src/runners/agent/cri/api.grpc.pb.h"

namespace hyperslice::runners::agent {

// Runs the exec start's command in container `id` and streams its output and exit code.
grpc::Status ServeCriExec(::runtime::v1::RuntimeService::StubInterface& runtime,
                          const std::string& id,
                          const ::hyperslice::runners::v1::ExecInput::ExecStart& start,
                          grpc::ServerContext* ctx,
                          grpc::ServerReaderWriter<::hyperslice::runners::v1::ExecOutput,
                                                   ::hyperslice::runners::v1::ExecInput>* stream);

}  // namespace hyperslice::runners::agent
