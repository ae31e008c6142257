#include "src/gpu/cron.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <ctime>
#include <sstream>
#include <vector>

namespace hyperslice::gpu {
namespace {

constexpr std::array<const char*, 12> kMonths = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                                 "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
constexpr std::array<const char*, 7> kWeekdays = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

struct Field {
  const char* name;
  int lo, hi;
  const char* const* names;  // nullptr, or hi - lo + 1 names for lo..hi (weekdays: 0..6)
  int name_count;
};

Error Bad(const Field& f, const std::string& text, const std::string& why) {
  return Error::Make(Error::Code::kInvalidArgument,
                     std::string("cron ") + f.name + " \"" + text + "\": " + why);
}

Result<int> Value(const Field& f, const std::string& text) {
  if (f.names != nullptr) {
    std::string up = text;
    std::transform(up.begin(), up.end(), up.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    for (int i = 0; i < f.name_count; ++i)
      if (up == f.names[i]) return f.names == kMonths.data() ? i + 1 : i;
  }
  if (text.empty() || text.size() > 2 ||
      !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); }))
    return Bad(f, text, "not a number");
  int v = std::stoi(text);
  // Day of week 7 is Sunday, as in most crons.
  int hi = f.names == kWeekdays.data() ? 7 : f.hi;
  if (v < f.lo || v > hi)
    return Bad(f, text, "out of range " + std::to_string(f.lo) + "-" + std::to_string(hi));
  return v;
}

// Sets the bits of one field; returns whether it was restricted (not `*`).
template <size_t N>
Result<bool> ParseField(const Field& f, const std::string& text, std::bitset<N>& bits) {
  bool restricted = false;
  std::stringstream list(text);
  std::string part;
  while (std::getline(list, part, ',')) {
    int step = 1;
    if (auto slash = part.find('/'); slash != std::string::npos) {
      std::string s = part.substr(slash + 1);
      part.resize(slash);
      if (s.empty() || s.size() > 2 ||
          !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }) ||
          std::stoi(s) == 0)
        return Bad(f, text, "bad step");
      step = std::stoi(s);
    }
    int lo = f.lo, hi = f.hi;
    if (part == "*" || part == "?") {
      if (step == 1) {
        for (int v = f.lo; v <= f.hi; ++v) bits.set(static_cast<size_t>(v));
        continue;
      }
    } else if (auto dash = part.find('-'); dash != std::string::npos) {
      auto a = Value(f, part.substr(0, dash));
      if (!a.ok()) return a.error();
      auto b = Value(f, part.substr(dash + 1));
      if (!b.ok()) return b.error();
      lo = *a;
      hi = *b;
      if (lo > hi) return Bad(f, text, "range runs backwards");
    } else {
      auto a = Value(f, part);
      if (!a.ok()) return a.error();
      lo = *a;
      hi = step == 1 ? *a : f.hi;  // "5/15": from 5 on, every 15
    }
    restricted = true;
    for (int v = lo; v <= hi; v += step) bits.set(static_cast<size_t>(v % static_cast<int>(N)));
  }
  if (text.empty() || !bits.any()) return Bad(f, text, "empty");
  return restricted;
}

}  // namespace

Result<CronSchedule> CronSchedule::Parse(const std::string& raw) {
  std::string text = raw;
  if (text == "@yearly" || text == "@annually") text = "0 0 1 1 *";
  if (text == "@monthly") text = "0 0 1 * *";
  if (text == "@weekly") text = "0 0 * * 0";
  if (text == "@daily" || text == "@midnight") text = "0 0 * * *";
  if (text == "@hourly") text = "0 * * * *";
  std::vector<std::string> fields;
  std::stringstream in(text);
  for (std::string f; in >> f;) fields.push_back(f);
  if (fields.size() != 5)
    return Error::Make(Error::Code::kInvalidArgument,
                       "cron \"" + raw + "\": want five fields (minute hour day month weekday) " +
                           "or @yearly/@monthly/@weekly/@daily/@hourly");
  CronSchedule s;
  const Field minute{"minute", 0, 59, nullptr, 0}, hour{"hour", 0, 23, nullptr, 0},
      day{"day of month", 1, 31, nullptr, 0}, month{"month", 1, 12, kMonths.data(), 12},
      weekday{"day of week", 0, 6, kWeekdays.data(), 7};
  auto m = ParseField(minute, fields[0], s.minutes_);
  if (!m.ok()) return m.error();
  auto h = ParseField(hour, fields[1], s.hours_);
  if (!h.ok()) return h.error();
  auto d = ParseField(day, fields[2], s.days_);
  if (!d.ok()) return d.error();
  auto mo = ParseField(month, fields[3], s.months_);
  if (!mo.ok()) return mo.error();
  auto w = ParseField(weekday, fields[4], s.weekdays_);
  if (!w.ok()) return w.error();
  s.days_restricted_ = *d;
  s.weekdays_restricted_ = *w;
  return s;
}

bool CronSchedule::Fires(std::chrono::system_clock::time_point t) const {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  if (!minutes_.test(static_cast<size_t>(tm.tm_min)) ||
      !hours_.test(static_cast<size_t>(tm.tm_hour)) ||
      !months_.test(static_cast<size_t>(tm.tm_mon) + 1))
    return false;
  bool day = days_.test(static_cast<size_t>(tm.tm_mday));
  bool weekday = weekdays_.test(static_cast<size_t>(tm.tm_wday));
  if (days_restricted_ && weekdays_restricted_) return day || weekday;
  return day && weekday;
}

bool CronSchedule::ActiveAt(std::chrono::system_clock::time_point now,
                            std::chrono::seconds duration) const {
  using std::chrono::minutes;
  auto window = std::min<std::chrono::seconds>(duration, std::chrono::hours(24 * 31));
  auto minute = std::chrono::floor<minutes>(now);
  // Firing minutes f with f <= now < f + duration, newest first.
  for (auto f = minute; now - f < window; f -= minutes(1))
    if (Fires(f)) return true;
  return false;
}

}  // namespace hyperslice::gpu
