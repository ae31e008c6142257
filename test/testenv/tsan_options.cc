// ThreadSanitizer defaults for the test binaries that use gRPC (deviceplugin_unit_test, the
// simulated VMs' tests: their kubelet side of the device-plugin API); compiled to nothing without
// TSan. Listed in each such executable's sources (a static library member would not be linked:
// nothing references the hook).
//
// Debian's gRPC (libgrpc, libgrpc++, libgpr) and its dependencies (Abseil, protobuf, upb, c-ares,
// RE2) are not built with -fsanitize=thread. Their locks (absl::Mutex, futex-based) are invisible
// to TSan, so memory those libraries touch through intercepted calls (memcpy, free, operator
// delete made from their own code) looks unsynchronised with our threads: about a thousand false
// reports per run, all inside or against library internals.
//
// ignore_noninstrumented_modules=1 makes the interceptors ignore accesses made on behalf of
// uninstrumented libraries, and nothing else: every access compiled in this tree (the plugin, the
// tests, the generated api.pb code, inlined grpcpp and protobuf headers) is still checked, against
// every thread including gRPC's (verified by planting unsynchronised fields written by the watcher
// thread and read by gRPC handler threads: reported). A suppressions file cannot say this:
// `called_from_lib` must name each library exactly (Abseil alone is ~45 of them) and `race:`
// patterns would also match our own handlers, whose stacks contain gRPC frames.
// TSAN_OPTIONS from the environment (scripts/test.sh: halt_on_error, second_deadlock_stack) is
// applied on top of this.
#if defined(__SANITIZE_THREAD__)
#define HS_TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HS_TSAN_BUILD 1
#endif
#endif

#ifdef HS_TSAN_BUILD
// NOLINTNEXTLINE(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp): TSan's hook.
extern "C" const char* __tsan_default_options() { return "ignore_noninstrumented_modules=1"; }
#endif
