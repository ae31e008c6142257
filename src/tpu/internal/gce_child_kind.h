// How one kind of child CR maps to one kind of GCE resource (ResourcePolicy → resourcePolicy,
// InstanceTemplate → instanceTemplate, ManagedInstanceGroup → instanceGroupManager). The lifecycle
// around it is the same for all three (internal/child_phases.h); a kind only says how to read,
// create, delete, compare and observe its resource. Implementations are stateless.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/clock.h"
#include "src/base/json.h"
#include "src/base/result.h"
#include "src/gce/compute.h"
#include "src/kube/resource.h"
#include "src/tpu/internal/owner_marks.h"

namespace hyperslice::tpu::internal {

// What a kind-specific observation found (after the resource exists and is ours).
struct Observation {
  bool ready = true;
  std::string reason;    // when not ready: GCE's code or our CamelCase reason
  std::string message;   // when not ready
  bool warning = false;  // emit a Warning Event with reason/message
  // A corrective mutation that was started (MIG resize); recorded and waited for.
  std::optional<gce::Operation> operation;
  // Replaces the default "not ready" requeue delay (the backoff) when set.
  std::optional<Clock::Duration> requeue_after;
};

class GceChildKind {
 public:
  virtual ~GceChildKind() = default;
  virtual const kube::Resource& resource() const = 0;
  // "resourcePolicy", for messages.
  virtual std::string GceKind() const = 0;
  // Checks the spec's required fields; the error message says what to fix.
  virtual Status Validate(const boost::json::object& spec) const = 0;

  virtual Result<boost::json::object> Get(gce::Compute& compute,
                                          const boost::json::object& spec) const = 0;
  // Inserts the resource the spec describes, marked with `owner`.
  virtual Result<gce::Operation> Insert(gce::Compute& compute, const boost::json::object& spec,
                                        const GceOwner& owner) const = 0;
  virtual Result<gce::Operation> Delete(gce::Compute& compute,
                                        const boost::json::object& spec) const = 0;
  // The owner marks a GCE resource carries: by default those in its description (a kind that also
  // labels what it makes reads its labels too).
  virtual OwnerMarks OwnerOf(const boost::json::object& resource) const {
    return OwnerMarksFromDescription(jsonfield::StringValue(resource, "description"));
  }
  // The fields we set that differ between the spec and the GCE resource (GCE field paths).
  virtual std::vector<std::string> Drift(const boost::json::object& spec,
                                         const boost::json::object& resource) const = 0;
  // Kind-specific observation of an existing, owned resource; may fill `status` (MIG
  // instances) and start a correction. `drift` may be edited (fields being corrected removed).
  virtual Result<Observation> Observe(gce::Compute& /*compute*/,
                                      const boost::json::object& /*spec*/,
                                      const boost::json::object& /*resource*/,
                                      std::vector<std::string>& /*drift*/,
                                      boost::json::object& /*status*/) const {
    return Observation{};
  }
};

// The three kinds (resource_policy_controller.cc, instance_template_controller.cc,
// managed_instance_group_controller.cc).
// The required-field part of a kind's Validate: the first of `strings` that is empty, else the
// first of `objects` that is not an object, is kInvalidArgument "spec.<field> is required".
inline Status RequireSpecFields(const boost::json::object& spec,
                                std::initializer_list<const char*> strings,
                                std::initializer_list<const char*> objects = {}) {
  for (const char* f : strings) {
    if (jsonfield::StringValue(spec, f).empty()) {
      return Error::Make(Error::Code::kInvalidArgument, std::string("spec.") + f + " is required");
    }
  }
  for (const char* f : objects) {
    if (jsonfield::ObjectField(spec, f) == nullptr) {
      return Error::Make(Error::Code::kInvalidArgument, std::string("spec.") + f + " is required");
    }
  }
  return OkStatus();
}

std::unique_ptr<GceChildKind> NewResourcePolicyKind();
std::unique_ptr<GceChildKind> NewInstanceTemplateKind();
std::unique_ptr<GceChildKind> NewManagedInstanceGroupKind();

}  // namespace hyperslice::tpu::internal
