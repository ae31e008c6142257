// The reasons of the conditions the TPU controllers set, in one place: tests, docs and the
// controllers name them alike. GCE's own codes (ZONE_RESOURCE_POOL_EXHAUSTED, notFound...) are
// passed through as reasons too; they are GCE's, not listed here.
#pragma once

namespace hyperslice::tpu::internal::reason {

// Shared by the group and its children.
inline constexpr char kInvalidSpec[] = "InvalidSpec";
inline constexpr char kCreating[] = "Creating";
inline constexpr char kDeleting[] = "Deleting";

// A GCE child's Ready condition (ResourcePolicy, InstanceTemplate, ManagedInstanceGroup).
inline constexpr char kCreated[] = "Created";
inline constexpr char kAdopted[] = "Adopted";
inline constexpr char kDrifted[] = "Drifted";
inline constexpr char kUpdating[] = "Updating";
inline constexpr char kNameConflict[] = "NameConflict";
inline constexpr char kInstancesNotRunning[] = "InstancesNotRunning";  // a MIG's VMs, not yet

// The TPUNodeGroup's conditions.
inline constexpr char kNotRequired[] = "NotRequired";
inline constexpr char kUserProvided[] = "UserProvided";
inline constexpr char kReconciling[] = "Reconciling";
inline constexpr char kWaitingForPrerequisites[] = "WaitingForPrerequisites";
inline constexpr char kWaitingForInstances[] = "WaitingForInstances";
inline constexpr char kNodesNotJoined[] = "NodesNotJoined";
inline constexpr char kNodeNotReady[] = "NodeNotReady";
inline constexpr char kTpuChipsUnavailable[] = "TPUChipsUnavailable";
inline constexpr char kNodesReady[] = "NodesReady";
inline constexpr char kSliceReady[] = "SliceReady";
inline constexpr char kApplyFailed[] = "ApplyFailed";
// The Event of a group whose teardown finished.
inline constexpr char kDeleted[] = "Deleted";

}  // namespace hyperslice::tpu::internal::reason
