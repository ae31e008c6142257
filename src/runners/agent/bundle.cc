#include "src/runners/agent/bundle.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <boost/json.hpp>
#include <filesystem>

#include "src/kube/quantity.h"

namespace hyperslice::runners::agent {
namespace json = boost::json;
namespace v1 = ::hyperslice::runners::v1;
namespace {

json::array StrArray(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

// containerd's default capability set (what a Kubernetes container gets without securityContext).
const std::vector<std::string>& DefaultCaps() {
  static const std::vector<std::string> caps = {
      "CAP_CHOWN",   "CAP_DAC_OVERRIDE", "CAP_FSETID",           "CAP_FOWNER",
      "CAP_MKNOD",   "CAP_NET_RAW",      "CAP_SETGID",           "CAP_SETUID",
      "CAP_SETFCAP", "CAP_SETPCAP",      "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
      "CAP_KILL",    "CAP_AUDIT_WRITE"};
  return caps;
}

json::object Mount(const std::string& dest, const std::string& type, const std::string& source,
                   const std::vector<std::string>& options) {
  return {
      {"destination", dest}, {"type", type}, {"source", source}, {"options", StrArray(options)}};
}

// "uid[:gid]" numeric; names would need the image's /etc/passwd and are run as root.
std::pair<int64_t, int64_t> ParseUser(const std::string& user) {
  if (user.empty()) return {0, 0};
  char* end = nullptr;
  int64_t uid = std::strtoll(user.c_str(), &end, 10);
  if (end == user.c_str()) return {0, 0};
  int64_t gid = uid;
  if (*end == ':') gid = std::strtoll(end + 1, nullptr, 10);
  return {uid, gid};
}

}  // namespace

std::vector<std::string> ProcessArgs(const std::vector<std::string>& entrypoint,
                                     const std::vector<std::string>& cmd,
                                     const std::vector<std::string>& command,
                                     const std::vector<std::string>& args) {
  std::vector<std::string> out = command.empty() ? entrypoint : command;
  const auto& tail = !args.empty() ? args : (command.empty() ? cmd : std::vector<std::string>{});
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

Result<std::string> MountSource(const v1::Container& c, const v1::Mount& m,
                                const std::map<std::string, std::string>& volume_dirs) {
  auto dir = volume_dirs.find(m.volume());
  if (dir == volume_dirs.end()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "container " + c.name() + " mounts unknown volume " + m.volume());
  }
  std::string source = dir->second;
  if (!m.sub_path().empty()) {
    auto sub = std::filesystem::path(m.sub_path()).lexically_normal();
    if (sub.is_absolute() || sub.string().rfind("..", 0) == 0) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "subPath " + m.sub_path() + " leaves volume " + m.volume());
    }
    source += "/" + sub.string();
    std::error_code ec;
    if (!std::filesystem::exists(source, ec)) std::filesystem::create_directories(source, ec);
  }
  if (m.container_path().empty() || m.container_path().front() != '/') {
    return Error::Make(Error::Code::kInvalidArgument,
                       "mount path of volume " + m.volume() + " must be absolute");
  }
  return source;
}

Result<CpuMemoryLimits> LimitsOf(const v1::Container& c) {
  CpuMemoryLimits out;
  if (auto it = c.limits().find("memory"); it != c.limits().end()) {
    auto q = kube::Quantity::Parse(it->second);
    if (!q.ok())
      return Error::Make(Error::Code::kInvalidArgument, "memory limit: " + q.error().message);
    out.memory_bytes = q->Value();
  }
  if (auto it = c.limits().find("cpu"); it != c.limits().end()) {
    auto q = kube::Quantity::Parse(it->second);
    if (!q.ok())
      return Error::Make(Error::Code::kInvalidArgument, "cpu limit: " + q.error().message);
    constexpr int64_t kPeriod = 100000;
    out.cpu_period = kPeriod;
    out.cpu_quota = std::max<int64_t>(1000, q->MilliValue() * kPeriod / 1000);
  }
  return out;
}

Result<std::string> RuntimeConfig(const BundleInput& in) {
  const auto& c = *in.container;
  std::vector<std::string> args =
      ProcessArgs(in.image.entrypoint, in.image.cmd, {c.command().begin(), c.command().end()},
                  {c.args().begin(), c.args().end()});
  if (args.empty()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "container " + c.name() + " has no command: the image sets none either");
  }
  // Image env first, then the pod's; a later value of a name replaces the earlier one in place.
  std::vector<std::string> env;
  auto set_env = [&env](const std::string& name, const std::string& value) {
    std::string entry = name;
    entry += '=';
    for (auto& e : env) {
      if (e.compare(0, entry.size(), entry) == 0) {
        e = entry;
        e += value;
        return;
      }
    }
    entry += value;
    env.push_back(std::move(entry));
  };
  bool has_path = false;
  for (const auto& e : in.image.env) {
    auto eq = e.find('=');
    if (eq == std::string::npos) continue;
    has_path |= e.compare(0, 5, "PATH=") == 0;
    set_env(e.substr(0, eq), e.substr(eq + 1));
  }
  if (!has_path) set_env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  set_env("HOSTNAME", in.hostname);
  for (const auto& e : c.env()) set_env(e.name(), e.value());

  std::string cwd = !c.working_dir().empty()        ? c.working_dir()
                    : !in.image.working_dir.empty() ? in.image.working_dir
                                                    : "/";
  auto [uid, gid] = ParseUser(in.image.user);
  json::object process = {
      {"terminal", false},
      {"user", {{"uid", uid}, {"gid", gid}}},
      {"args", StrArray(args)},
      {"env", StrArray(env)},
      {"cwd", cwd},
      {"capabilities",
       {{"bounding", StrArray(DefaultCaps())},
        {"effective", StrArray(DefaultCaps())},
        {"permitted", StrArray(DefaultCaps())}}},
      {"noNewPrivileges", false},
  };

  json::array mounts = {
      Mount("/proc", "proc", "proc", {}),
      Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}),
      Mount("/dev/pts", "devpts", "devpts",
            {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}),
      Mount("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}),
      Mount("/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}),
      Mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
      Mount("/sys/fs/cgroup", "cgroup", "cgroup", {"nosuid", "noexec", "nodev", "relatime", "ro"}),
  };
  for (const auto& m : c.mounts()) {
    HS_ASSIGN_OR_RETURN(std::string source, MountSource(c, m, in.volume_dirs));
    std::vector<std::string> opts = {"rbind", "rprivate"};
    if (m.read_only()) opts.emplace_back("ro");
    mounts.push_back(Mount(m.container_path(), "bind", source, opts));
  }
  for (const auto& [path, dir] : in.agent_binds) {
    mounts.push_back(Mount(path, "bind", dir, {"rbind", "rprivate"}));
  }

  json::object resources;
  json::array dev_rules = {{{"allow", false}, {"access", "rwm"}}};
  // The devices every container needs (null, zero, full, random, urandom, tty, pts, ptmx).
  for (auto [type, major, minor] : std::vector<std::tuple<const char*, int, int>>{{"c", 1, 3},
                                                                                  {"c", 1, 5},
                                                                                  {"c", 1, 7},
                                                                                  {"c", 1, 8},
                                                                                  {"c", 1, 9},
                                                                                  {"c", 5, 0},
                                                                                  {"c", 5, 2},
                                                                                  {"c", 136, -1}}) {
    dev_rules.push_back(
        {{"allow", true}, {"type", type}, {"major", major}, {"minor", minor}, {"access", "rwm"}});
  }
  json::array devices;
  for (const auto& d : in.devices) {
    struct stat st {};
    if (::stat(d.host_path.c_str(), &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "device " + d.host_path + " is not a device node on this runner");
    }
    const char* type = S_ISCHR(st.st_mode) ? "c" : "b";
    int64_t major = major(st.st_rdev), minor = minor(st.st_rdev);
    devices.push_back({{"path", d.container_path},
                       {"type", type},
                       {"major", major},
                       {"minor", minor},
                       {"fileMode", static_cast<int64_t>(st.st_mode & 07777)},
                       {"uid", 0},
                       {"gid", 0}});
    dev_rules.push_back(
        {{"allow", true}, {"type", type}, {"major", major}, {"minor", minor}, {"access", "rwm"}});
  }
  resources["devices"] = dev_rules;
  HS_ASSIGN_OR_RETURN(CpuMemoryLimits limits, LimitsOf(c));
  if (limits.memory_bytes > 0) resources["memory"] = {{"limit", limits.memory_bytes}};
  if (limits.cpu_period > 0) {
    resources["cpu"] = {{"quota", limits.cpu_quota}, {"period", limits.cpu_period}};
  }

  json::array namespaces = {
      {{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}}};
  if (!in.netns_path.empty()) namespaces.push_back({{"type", "network"}, {"path", in.netns_path}});

  json::object linux_ = {
      {"resources", resources},
      {"namespaces", namespaces},
      {"devices", devices},
      {"cgroupsPath", in.cgroups_path},
      {"maskedPaths", StrArray({"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
                                "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                                "/proc/sched_debug", "/sys/firmware", "/proc/scsi"})},
      {"readonlyPaths",
       StrArray({"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"})},
  };
  json::object config = {
      {"ociVersion", "1.0.2"},
      {"process", process},
      {"root", {{"path", "rootfs"}, {"readonly", false}}},
      {"hostname", in.hostname},
      {"mounts", mounts},
      {"linux", linux_},
  };
  return json::serialize(config);
}

}  // namespace hyperslice::runners::agent
