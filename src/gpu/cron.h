// Cron schedules for GPUNodePool disruption budgets (`spec.disruption.budgets[].schedule`, UTC), as
// Karpenter reads them (robfig/cron's standard parser): five fields — minute, hour, day of month,
// month, day of week — each `*`, a number, a range `a-b`, a step `*/n` or `a-b/n`, or a list of
// those; month and weekday names (`JAN`, `MON`, case-insensitive); day of week 0 or 7 is Sunday;
// when both day fields are restricted a day matches either (Vixie cron); and the macros
// `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`.
// Written here because no cron library is packaged for C++ in Debian; ~150 lines of parsing.
// Thread-safe (values).
#pragma once

#include <bitset>
#include <chrono>
#include <string>

#include "src/base/result.h"

namespace hyperslice::gpu {

class CronSchedule {
 public:
  // Errors (kInvalidArgument) name the field and the text that does not parse.
  static Result<CronSchedule> Parse(const std::string& text);

  // Whether the schedule fires in the (UTC) minute that contains `t`.
  bool Fires(std::chrono::system_clock::time_point t) const;

  // Whether `now` lies within `duration` of a firing: some firing minute f with
  // f <= now < f + duration. Looks back at most 31 days (a longer window is read as 31 days).
  bool ActiveAt(std::chrono::system_clock::time_point now, std::chrono::seconds duration) const;

 private:
  std::bitset<60> minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_;     // 1..31
  std::bitset<13> months_;   // 1..12
  std::bitset<7> weekdays_;  // 0 (Sunday)..6
  bool days_restricted_ = false, weekdays_restricted_ = false;
};

}  // namespace hyperslice::gpu
