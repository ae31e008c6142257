// The TPU operator in the test's own process (tpu::RegisterOperator on a kube::Manager of its
// own, no leader election) on the operator's test environment (tpu_env.h), as `hyperslice
// operator` wires it: the integration test (test/integration/tpu_operator) and the slice end to end
// (test/e2e/tpu_slice). Header-only; a test that includes it links hs_tpu.
#pragma once

#include <chrono>
#include <memory>
#include <thread>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/kube/manager.h"
#include "src/tpu/operator.h"
#include "test/testenv/tpu_env.h"

namespace hyperslice::testenv::tpuenv {

// 2 workers, no periodic drift check or orphan sweep; Stop() waits up to 3 s for in-flight work.
class InProcessOperator {
 public:
  InProcessOperator() = default;
  InProcessOperator(const InProcessOperator&) = delete;
  InProcessOperator& operator=(const InProcessOperator&) = delete;
  ~InProcessOperator() { Stop(); }
  Status Start(const Env& env) {
    kube::ManagerOptions mo;
    mo.client = env.client;
    mo.graceful_shutdown_timeout = std::chrono::milliseconds(3000);
    HS_ASSIGN_OR_RETURN(mgr_, kube::Manager::Create(mo));
    tpu::OperatorOptions o;
    o.client = env.client;
    o.compute = env.compute;
    o.device_plugin_namespace = kOperatorNs;
    o.drift_check_interval = std::chrono::hours(1);
    o.orphan_sweep_interval = Clock::Duration::zero();
    o.workers = 2;
    HS_RETURN_IF_ERROR(tpu::RegisterOperator(*mgr_, o));
    thread_ = std::thread([this] { run_status_ = mgr_->Run(); });
    return OkStatus();
  }
  void Stop() {
    if (!mgr_) return;
    mgr_->Stop();
    if (thread_.joinable()) thread_.join();
    mgr_.reset();
  }

 private:
  std::unique_ptr<kube::Manager> mgr_;
  std::thread thread_;
  Status run_status_;
};

}  // namespace hyperslice::testenv::tpuenv
