#include <chrono>

#include <gtest/gtest.h>

#include "src/base/clock.h"
#include "src/base/fake_clock.h"

namespace hyperslice {
namespace {

using std::chrono::system_clock;
using namespace std::chrono_literals;

TEST(WallClock, OnTheRealClockIsTheSystemClock) {
  for (const Clock* real :
       {static_cast<const Clock*>(nullptr), static_cast<const Clock*>(&RealClock())}) {
    WallClock wall(real);
    const auto before = system_clock::now();
    const auto now = wall.Now();
    EXPECT_GE(now, before);
    EXPECT_LE(now, system_clock::now());
  }
}

TEST(WallClock, OnAFakeClockMovesOnlyAsItIsAdvanced) {
  FakeClock clock;
  const auto before = system_clock::now();
  WallClock wall(&clock);
  const auto start = wall.Now();
  EXPECT_GE(start, before);
  EXPECT_LE(start, system_clock::now());
  EXPECT_EQ(wall.Now(), start) << "no real time passes on a fake clock";
  clock.Advance(1500ms);
  EXPECT_EQ(wall.Now() - start, 1500ms);
  clock.Advance(24h);
  EXPECT_EQ(wall.Now() - start, 24h + 1500ms);
}

}  // namespace
}  // namespace hyperslice
