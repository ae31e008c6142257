// The deletion of a GCE child (internal/child_phases.h): finish any operation in flight, delete
// the resource when it is ours, wait for the delete, and let the CR go only once GCE says the
// resource is gone.
#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/tpu/internal/child_phases.h"
#include "src/tpu/internal/reasons.h"

namespace hyperslice::tpu::internal {

using jsonfield::StringValue;

Result<Step> ChildPhases::Teardown(ChildCtx& ctx) const {
  using Next = Step::Next;
  gce::Compute& compute = *options_.compute;
  const GceChildKind& kind = *options_.kind;
  // Nothing can have been created from a spec that never validated.
  if (!kind.Validate(ctx.spec).ok()) return Step{.next = Next::kRemoveFinalizer};
  ctx.gce_name = StringValue(ctx.spec, "name");

  // An operation in flight (an insert, a resize or our delete) is finished first.
  if (Step s = ResumeOperation(ctx); s.done()) return s;
  if (Step s = RetryGate(ctx); s.done()) return s;

  auto resource = kind.Get(compute, ctx.spec);
  if (!resource.ok()) {
    // Gone already (deleted by hand, or by us).
    if (resource.error().code == Error::Code::kNotFound)
      return Step{.next = Next::kRemoveFinalizer};
    return Fail(ctx, resource.error(),
                "reading " + Describe(ctx) + ": " + resource.error().message);
  }
  if (!ForeignOwnerMessage(kind.OwnerOf(*resource), OwnerOfChild(ctx.cr, options_.cluster_id))
           .empty()) {
    return Step{.next = Next::kRemoveFinalizer};  // not ours: released without touching it
  }

  auto op = kind.Delete(compute, ctx.spec);
  if (!op.ok()) {
    if (op.error().code == Error::Code::kNotFound) return Step{.next = Next::kRemoveFinalizer};
    return Fail(ctx, op.error(), "deleting " + Describe(ctx) + ": " + op.error().message);
  }
  Error failure;
  HS_ASSIGN_OR_RETURN(
      auto state, RecordAndWait(ctx, *op, reason::kDeleting,
                                "deleting " + Describe(ctx) + " (operation " + op->ref.name + ")",
                                false, &failure));
  switch (state) {
    case OpState::kPending:
      return Step{.next = Next::kBackoff};
    case OpState::kFailed:
      ctx.status.erase("operation");
      return Fail(ctx, failure, "deleting " + Describe(ctx) + " failed: " + failure.message);
    case OpState::kDone:
    case OpState::kGone:
      break;
  }
  // Only a resource that is gone lets the CR go.
  auto after = kind.Get(compute, ctx.spec);
  if (after.ok() || after.error().code != Error::Code::kNotFound) {
    return Step{.next = Next::kBackoff, .write_status = false};
  }
  return Step{.next = Next::kRemoveFinalizer};
}

}  // namespace hyperslice::tpu::internal
