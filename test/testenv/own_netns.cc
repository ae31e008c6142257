// See own_netns.h. Not part of hs_testenv: a static initializer in a library is dropped unless
// referenced, and this one must run before main (before any thread: unshare moves the calling
// thread only, and threads started later inherit its namespace).
#include "test/testenv/own_netns.h"

#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hyperslice::testenv {
namespace {

std::string Enter() {
  if (::unshare(CLONE_NEWNET) != 0) {
    return std::string("cannot make a network namespace for the test: ") + std::strerror(errno);
  }
  // A new namespace's loopback is down.
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  bool up = fd >= 0 && ::ioctl(fd, SIOCGIFFLAGS, &ifr) == 0;
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);  // NOLINT(hicpp-signed-bitwise)
  up = up && ::ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
  if (fd >= 0) ::close(fd);
  return up ? ""
            : std::string("cannot bring up the test namespace's loopback: ") + std::strerror(errno);
}

const std::string kError = Enter();  // NOLINT(cert-err58-cpp): before main on purpose

}  // namespace

const std::string& OwnNetworkNamespaceError() { return kError; }

}  // namespace hyperslice::testenv
