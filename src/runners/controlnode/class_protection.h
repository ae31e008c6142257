// A GPUNodeClass that marketplace Runners rent with is kept while one names it, as
// kubernetes.io/pvc-protection keeps a claim a pod uses: a Runner's machine is returned through
// its class's providers and credentials (market_runner.h Finalize), so a class deleted first
// would leave the Runner unable to go and the machine billed.
//
// The runners controller owns the finalizer kClassInUseFinalizer on the class (src/gpu knows
// nothing of Runners; its class controller's own finalizer, tgp.io/termination, covers pools and
// claims): added before a Runner's first create, removed once no Runner names the class any
// more (the last one's machine returned). While a deleted class waits, its condition
// RunnersReleased (False, reason InUseByRunners) and a Warning Event InUse name the Runners.
// A deleting class rents nothing new: a Runner without a machine stays Pending
// (GPUNodeClassDeleting).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/kube/resource.h"

namespace hyperslice::kube {
class Client;
class EventRecorder;
}  // namespace hyperslice::kube

namespace hyperslice::runners::controlnode {

inline constexpr char kClassInUseFinalizer[] = "runners.hyperslice.dev/in-use";

class ClassProtection {
 public:
  ClassProtection(std::shared_ptr<kube::Client> client,
                  std::shared_ptr<kube::EventRecorder> events);

  enum class Use {
    kProtected,  // the class carries the finalizer: renting with it is safe
    kMissing,    // no such class (the provisioner reports GPUNodeClassNotFound)
    kDeleting,   // being deleted: keep what is rented, rent nothing new
  };
  // Before `runner` rents (or observes its machine) with `cls`: adds the finalizer when absent.
  // A deleting class is noted (its condition and Event name the Runners that hold it). `read`
  // (optional) receives the class as this call read it, so that the reconcile that goes on to
  // rent with it need not GET it again (unchanged when the class is missing).
  Result<Use> Protect(const std::string& cls, kube::Object* read = nullptr);
  // After `runner` returned its machine (its machine finalizer is gone or about to go): removes
  // the finalizer when no other Runner names `cls`; else, when the class is being deleted, says
  // which ones it waits for.
  Status Release(const std::string& cls, const std::string& runner);

 private:
  // The Runners (other than `except`) whose spec.marketplace names `cls`.
  Result<std::vector<std::string>> Users(const std::string& cls, const std::string& except);
  Status NoteWaiting(const kube::Object& cls, const std::vector<std::string>& users);

  std::shared_ptr<kube::Client> client_;
  std::shared_ptr<kube::EventRecorder> events_;
};

}  // namespace hyperslice::runners::controlnode
