// Helpers on untyped objects for the things every controller does to metadata and status:
// owner references, finalizers and metav1.Condition lists, with controller-runtime's and
// apimachinery's semantics (controllerutil.SetControllerReference, meta.SetStatusCondition).
//
// They edit an Object in memory and report whether anything changed, so a reconciler writes back
// only when needed. Thread-compatible (no shared state).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "src/base/result.h"
#include "src/kube/resource.h"

namespace hyperslice::kube {

// --- owner references ---------------------------------------------------------------------

// Makes `owner` the managing controller of `object` (controller: true, blockOwnerDeletion: true).
// Errors (kInvalidArgument): the owner lacks apiVersion/kind/name/uid; a namespaced owner of an
// object in another namespace or of a cluster-scoped object; (kAlreadyExists, reason
// "AlreadyOwned") the object already has a different controller. An existing reference to the
// same owner is updated in place. Returns whether the object changed.
Result<bool> SetControllerReference(const Object& owner, Object& object);
// Adds or updates a plain (non-controller) owner reference. Returns whether the object changed.
Result<bool> SetOwnerReference(const Object& owner, Object& object);
// Whether `object` has an owner reference to `owner` (matched by uid, else by
// apiVersion group/kind/name).
bool HasOwner(const Object& object, const Object& owner);
bool HasOwnerUid(const Object& object, const std::string& uid);
// The uid of the controller owner reference, if any.
std::optional<std::string> ControllerUid(const Object& object);

// --- finalizers ---------------------------------------------------------------------------

// Whether the object is being deleted (metadata.deletionTimestamp set; finalizers hold it).
bool IsDeleting(const Object& object);

bool HasFinalizer(const Object& object, const std::string& finalizer);
bool AddFinalizer(Object& object, const std::string& finalizer);     // true when added
bool RemoveFinalizer(Object& object, const std::string& finalizer);  // true when removed
// A JSON patch (PatchType::kJson) removing `finalizer` from the object as `object` shows it:
// it tests that metadata.finalizers is still what `object` holds, so it neither needs the
// object's resourceVersion (a status write meanwhile does not make it conflict) nor drops a
// finalizer someone else added meanwhile (the test fails: 422, re-read and try again).
// "" when `object` does not carry `finalizer`.
std::string RemoveFinalizerPatch(const Object& object, const std::string& finalizer);

// --- conditions (metav1.Condition) ---------------------------------------------------------

struct Condition {
  std::string type;
  std::string status;  // "True" | "False" | "Unknown"
  std::string reason;  // CamelCase, required by the API
  std::string message;
  int64_t observed_generation = 0;
  std::string last_transition_time;  // RFC 3339; set by SetCondition when empty
};

// Sets a condition in status.conditions (creating the list). lastTransitionTime changes only
// when the status changes (or the condition is new); reason, message and observedGeneration are
// updated in place. `now` is used for the transition time unless c.last_transition_time is set.
// Returns whether the object changed.
bool SetCondition(Object& object, const Condition& c,
                  std::chrono::system_clock::time_point now = std::chrono::system_clock::now());
std::optional<Condition> FindCondition(const Object& object, const std::string& type);
bool RemoveCondition(Object& object, const std::string& type);
// True when the condition exists with status "True".
bool IsConditionTrue(const Object& object, const std::string& type);

// metadata.generation (0 when absent).
int64_t Generation(const Object& object);

// metav1.Time in UTC, "2006-01-02T15:04:05Z". These three name src/base/time.h's RFC 3339
// functions in the API's words.
std::string FormatTime(std::chrono::system_clock::time_point t);
// metav1.MicroTime in UTC, "2006-01-02T15:04:05.000000Z" (Leases, Events, billing starts).
std::string FormatMicroTime(std::chrono::system_clock::time_point t);
// The other way, for both and for any RFC 3339 time: "…Z" or a numeric offset ("+02:00"), with an
// optional fraction kept to the microsecond; times past 2191 are clamped (system_clock's range);
// nullopt when it does not parse.
std::optional<std::chrono::system_clock::time_point> ParseTime(std::string_view rfc3339);

}  // namespace hyperslice::kube
