// ProvisionRecorder (provision_store.h), which both machine provisioners keep their part of a
// Runner's status with, and HoldsMachine (market_runner.h), the one reading of status.machine
// that keeps a GPUNodeClass.
#include "src/runners/controlnode/provision_store.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/runners/controlnode/market_runner.h"

namespace hyperslice::runners::controlnode {
namespace {

namespace json = boost::json;
using Ms = std::chrono::milliseconds;

// The patches the recorder writes, in order.
struct Patches {
  std::vector<json::object> written;
  ProvisionStore Make() {
    ProvisionStore s;
    s.record = [this](const std::string&, const json::object& patch) -> Status {
      written.push_back(patch);
      return OkStatus();
    };
    s.join_token = [](const std::string&) -> Result<std::optional<std::string>> {
      return std::optional<std::string>();
    };
    return s;
  }
};

ProvisionRecorder Recorder(Patches& p) {
  return ProvisionRecorder(p.Make(), "machine", {"id", "lastError"}, Ms(100), Ms(350));
}

TEST(ProvisionRecorder, BackoffDoublesPerFailureUpToItsMaximum) {
  Patches p;
  auto r = Recorder(p);
  EXPECT_EQ(r.Backoff(1), Ms(100));
  EXPECT_EQ(r.Backoff(2), Ms(200));
  EXPECT_EQ(r.Backoff(3), Ms(350));
  EXPECT_EQ(r.Backoff(40), Ms(350));
}

TEST(ProvisionRecorder, ARecordNamesTheOwnedFieldsItLacksAsNull) {
  Patches p;
  auto r = Recorder(p);
  ASSERT_TRUE(r.Record("a", json::object{{"id", "m-1"}, {"other", 1}}).ok());
  ASSERT_EQ(p.written.size(), 1u);
  EXPECT_EQ(p.written[0], (json::object{{"id", "m-1"}, {"other", 1}, {"lastError", nullptr}}));
}

TEST(ProvisionRecorder, FailuresCountAndHoldTheNextAttemptBack) {
  Patches p;
  auto r = Recorder(p);
  json::object holder;
  EXPECT_FALSE(r.BackingOff(holder).has_value());
  ProvisionOutcome first = r.NoteFailure(holder, "NoOfferFits", "none");
  EXPECT_TRUE(first.warning);
  EXPECT_EQ(first.requeue_after, Ms(100));
  ProvisionOutcome second = r.NoteFailure(holder, "NoOfferFits", "still none");
  EXPECT_EQ(second.requeue_after, Ms(200));
  EXPECT_EQ(holder["lastError"].as_object()["failures"].as_int64(), 2);
  EXPECT_TRUE(p.written.empty()) << "noting a failure writes nothing by itself";

  auto waiting = r.BackingOff(holder);
  ASSERT_TRUE(waiting.has_value());
  EXPECT_EQ(waiting->reason, "NoOfferFits");
  EXPECT_EQ(waiting->message, "still none");
  EXPECT_FALSE(waiting->warning);
  ASSERT_TRUE(waiting->requeue_after.has_value());
  EXPECT_GT(*waiting->requeue_after, Ms(0));
  EXPECT_LE(*waiting->requeue_after, Ms(201));
}

TEST(ProvisionRecord, FinishWritesThroughOnlyWhenAFieldWasDropped) {
  Patches p;
  auto r = Recorder(p);
  json::object status{{"machine", json::object{{"id", "m-1"}, {"lastError", "x"}}}};
  {
    ProvisionRecord rec = r.Open("a", status);
    rec.holder()["state"] = "Running";
    ASSERT_TRUE(rec.Finish(ProvisionOutcome{.ready = true}).ok());
  }
  EXPECT_TRUE(p.written.empty()) << "a field added reaches the API with the status write";
  EXPECT_EQ(status["machine"].as_object()["state"], "Running");
  {
    ProvisionRecord rec = r.Open("a", status);
    rec.holder().erase("lastError");
    ASSERT_TRUE(rec.Finish(ProvisionOutcome{}).ok());
  }
  ASSERT_EQ(p.written.size(), 1u);
  EXPECT_TRUE(p.written[0]["lastError"].is_null());
  EXPECT_FALSE(status["machine"].as_object().contains("lastError"));
}

TEST(HoldsMachine, AMachineNotReturnedOrACreateThatMayHaveMadeOne) {
  const json::object launching{{"launchAttempt", json::object{{"provider", "runpod"}}}};
  const json::object running{{"id", "m-1"}, {"state", "Running"}};
  const json::object returned{{"id", "m-1"}, {"state", "Terminated"}};
  const json::object nothing{{"lastError", json::object{}}};
  EXPECT_TRUE(HoldsMachine(&launching));
  EXPECT_TRUE(HoldsMachine(&running));
  EXPECT_FALSE(HoldsMachine(&returned));
  EXPECT_FALSE(HoldsMachine(&nothing));
  EXPECT_FALSE(HoldsMachine(nullptr));
}

}  // namespace
}  // namespace hyperslice::runners::controlnode
