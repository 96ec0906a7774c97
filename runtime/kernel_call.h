// How the executor calls a kernel: errors that name the node, exceptions
// caught at the kernel's edge, and the coarse clock that stamps each
// kernel's start for Executor::RunningKernels.
//
// Internal to the executor (executor.cc).
//
// Thread-safety: plain functions.
#ifndef WEFT_RUNTIME_KERNEL_CALL_H_
#define WEFT_RUNTIME_KERNEL_CALL_H_

#include <time.h>

#include <cstdint>
#include <exception>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/graph.h"

namespace weft {

// `status` prefixed with "node 'name' (Op): " unless it already starts so
// (allocate_output names the node itself).
inline absl::Status NodeError(const Node& node, const absl::Status& status) {
  const std::string prefix = absl::StrCat("node ", node.DebugName(), ": ");
  if (absl::StartsWith(status.message(), prefix)) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// Runs `compute` (a kernel's Compute or ComputeAsync) and turns an exception
// escaping it into an error naming the node: the last line of defence for a
// kernel that allocated with a throwing path or called a library that
// throws, so that one bad request fails its step instead of the process.
// Kernels are expected to report errors with SetStatus; this is not a
// substitute. OK when nothing was thrown.
template <typename Fn>
absl::Status CallKernel(const Node& node, Fn&& compute) {
  try {
    compute();
    return absl::OkStatus();
  } catch (const std::bad_alloc& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("node ", node.DebugName(), ": out of memory in the kernel (", e.what(), ")"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("node ", node.DebugName(), ": the kernel threw: ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat("node ", node.DebugName(), ": the kernel threw a non-standard exception"));
  }
}

// Nanoseconds of the coarse monotonic clock (a few milliseconds' resolution,
// a few nanoseconds a read: cheap enough to stamp every kernel's start);
// never 0, which marks "not running".
inline int64_t CoarseMonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  const int64_t ns = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  return ns > 0 ? ns : 1;
}

}  // namespace weft

#endif  // WEFT_RUNTIME_KERNEL_CALL_H_
