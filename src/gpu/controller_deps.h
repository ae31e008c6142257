// ControllerDeps: what every GPU controller is built from — the API client, the event recorder and
// the clock. Each controller's options (class_controller.h, claim_controller.h, provisioner.h,
// disruption_controller.h, cost_controller.h) start with it, so the operator (operator.cc) builds
// the shared part once and every controller reads it the same way.
#pragma once

#include <memory>

#include "src/base/clock.h"

namespace hyperslice::kube {
class Client;
class Manager;
class EventRecorder;
}  // namespace hyperslice::kube

namespace hyperslice::gpu {

struct ControllerDeps {
  std::shared_ptr<kube::Client> client;  // required
  std::shared_ptr<kube::EventRecorder>
      events;              // optional: no events (the cost collector records none)
  Clock* clock = nullptr;  // nullptr: RealClock()

  Clock& ClockOrReal() const { return clock != nullptr ? *clock : RealClock(); }
};

}  // namespace hyperslice::gpu
