// The memory budget of a daemon: how many bytes of tensors it may hold.
//
// A container's limit, not the host's RAM, is what the kernel enforces: a
// daemon that sizes itself from sysconf(_SC_PHYS_PAGES) inside a 4 GiB pod
// is killed long before it refuses anything. The budget is therefore, in
// order: what the daemon was told (--memory_limit, SetMemoryBudget), else
// the memory limit of the process's cgroup (v2 memory.max, or v1
// memory.limit_in_bytes, the smallest along the path to the root, since a
// parent's limit binds its children), else physical memory.
//
// The cgroup files come from outside the program (and from a kernel that
// may be of either generation), so they are read defensively: bounded
// reads, paths that must be absolute and free of "..", numbers checked for
// overflow. Anything malformed counts as "no limit from this file", and the
// reason is returned so the caller can say what it ignored. Tests point
// `root` at a made-up tree instead of "/".
//
// Thread-safety: every function is thread-safe.
#ifndef WEFT_COMMON_MEMORY_BUDGET_H_
#define WEFT_COMMON_MEMORY_BUDGET_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weft {

struct MemoryBudget {
  uint64_t bytes = 0;
  // Where `bytes` came from, for the daemon's start-up log:
  // "--memory_limit", "cgroup v2 /sys/fs/cgroup/x/memory.max", "physical memory".
  std::string source;
  // Files that were present but unusable (malformed, unreadable), each with
  // the reason; they did not lower the budget.
  std::vector<std::string> ignored;
};

// One cgroup limit file's contents: a decimal byte count, or "max" (none,
// v2). v1 reports "none" as a number near 2^63, which also means none.
// INVALID_ARGUMENT for anything else (never echoing the bytes read).
absl::StatusOr<std::optional<uint64_t>> ParseCgroupLimit(absl::string_view contents);

// The memory limit of this process's cgroup as seen under `root` (a
// directory holding proc/self/cgroup and sys/fs/cgroup/...), nullopt when
// there is none. Files that are malformed are listed in `ignored`.
std::optional<uint64_t> CgroupMemoryLimit(const std::string& root, std::string* source,
                                          std::vector<std::string>* ignored);

// Physical memory (sysconf); 1 TiB when the system does not say.
uint64_t PhysicalMemoryBytes();

// The budget from `flag_bytes` when given, else the cgroup under `root`,
// else physical memory. A cgroup limit above physical memory is capped at it.
MemoryBudget DetectMemoryBudget(std::optional<uint64_t> flag_bytes, const std::string& root = "/");

// "4294967296", "512M", "8G", "1.5Gi", "2T" (K/M/G/T in powers of 1024, an
// optional "i" or "B" suffix) to bytes. INVALID_ARGUMENT naming `what` for
// anything else, zero, or a value that does not fit in 64 bits.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text, absl::string_view what);

// The process's budget: the one SetMemoryBudget installed, else
// DetectMemoryBudget(nullopt) on first use. One atomic load after that.
uint64_t MemoryBudgetBytes();
// Installs `bytes` (nonzero) as the process's budget. A daemon calls it once
// at start-up, before it serves.
void SetMemoryBudget(uint64_t bytes);

}  // namespace weft

#endif  // WEFT_COMMON_MEMORY_BUDGET_H_
