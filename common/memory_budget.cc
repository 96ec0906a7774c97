#include "common/memory_budget.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace weft {
namespace {

// /proc/self/cgroup lists one line per hierarchy; a limit file holds one
// number. Anything longer is not one of them.
constexpr size_t kMaxCgroupListBytes = 64 << 10;
constexpr size_t kMaxLimitFileBytes = 4 << 10;
// cgroup v1 writes "no limit" as LONG_MAX rounded down to a page; anything
// this large is no limit any machine has.
constexpr uint64_t kV1Unlimited = uint64_t{1} << 62;

enum class ReadResult { kOk, kMissing, kError };

// Reads at most `limit` bytes of `path`; kError (with `why`) for a file that
// is larger, unreadable, or not a regular file.
ReadResult ReadSmallFile(const std::string& path, size_t limit, std::string* out, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return ReadResult::kMissing;
    *why = absl::StrCat(path, ": cannot open: ", std::strerror(errno));
    return ReadResult::kError;
  }
  out->clear();
  char buf[4096];
  ReadResult result = ReadResult::kOk;
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      *why = absl::StrCat(path, ": cannot read: ", std::strerror(errno));
      result = ReadResult::kError;
      break;
    }
    if (out->size() + static_cast<size_t>(n) > limit) {
      *why = absl::StrCat(path, ": longer than ", limit, " bytes");
      result = ReadResult::kError;
      break;
    }
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return result;
}

// A cgroup path as /proc/self/cgroup gives it: absolute, no "." or ".."
// components (which would walk out of the cgroup mount), printable.
bool IsSafeCgroupPath(absl::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  for (char c : path) {
    if (!absl::ascii_isprint(static_cast<unsigned char>(c))) return false;
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "." || part == "..") return false;
  }
  return true;
}

// `path` and each of its ancestors up to "/", deepest first.
std::vector<std::string> SelfAndAncestors(absl::string_view path) {
  std::vector<std::string> out;
  std::string p(absl::StripSuffix(path, "/"));
  while (!p.empty()) {
    out.push_back(p);
    p.resize(p.rfind('/'));
  }
  out.push_back("");  // the mount's root
  return out;
}

// The smallest limit in `file` along `cgroup_path`'s ancestors under `mount`.
void SmallestLimitAlong(const std::string& mount, absl::string_view cgroup_path, const char* file,
                        const char* generation, std::optional<uint64_t>* best, std::string* source,
                        std::vector<std::string>* ignored) {
  for (const std::string& dir : SelfAndAncestors(cgroup_path)) {
    const std::string path = absl::StrCat(mount, dir, "/", file);
    std::string contents, why;
    switch (ReadSmallFile(path, kMaxLimitFileBytes, &contents, &why)) {
      case ReadResult::kMissing:
        continue;
      case ReadResult::kError:
        ignored->push_back(std::move(why));
        continue;
      case ReadResult::kOk:
        break;
    }
    absl::StatusOr<std::optional<uint64_t>> limit = ParseCgroupLimit(contents);
    if (!limit.ok()) {
      ignored->push_back(absl::StrCat(path, ": ", limit.status().message()));
      continue;
    }
    if (limit->has_value() && (!best->has_value() || **limit < **best)) {
      *best = *limit;
      *source = absl::StrCat("cgroup ", generation, " ", path);
    }
  }
}

std::atomic<uint64_t> g_budget{0};

}  // namespace

absl::StatusOr<std::optional<uint64_t>> ParseCgroupLimit(absl::string_view contents) {
  absl::string_view v = absl::StripAsciiWhitespace(contents);
  if (v == "max") return std::optional<uint64_t>();
  uint64_t bytes = 0;
  const bool digits = !v.empty() && v.size() <= 20 &&
                      std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || !absl::SimpleAtoi(v, &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a memory limit (a byte count or \"max\"; ", contents.size(), " bytes of something else)"));
  }
  if (bytes >= kV1Unlimited) return std::optional<uint64_t>();
  return std::optional<uint64_t>(bytes);
}

std::optional<uint64_t> CgroupMemoryLimit(const std::string& root, std::string* source,
                                          std::vector<std::string>* ignored) {
  const std::string base = root.empty() || root.back() != '/' ? root + "/" : root;
  const std::string list_path = base + "proc/self/cgroup";
  std::string list, why;
  switch (ReadSmallFile(list_path, kMaxCgroupListBytes, &list, &why)) {
    case ReadResult::kMissing:
      return std::nullopt;
    case ReadResult::kError:
      ignored->push_back(std::move(why));
      return std::nullopt;
    case ReadResult::kOk:
      break;
  }
  std::optional<uint64_t> best;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(list, '\n', absl::SkipEmpty())) {
    ++line_no;
    // "hierarchy-id:controllers:path"; the path may itself hold ':'.
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) {
      ignored->push_back(absl::StrCat(list_path, " line ", line_no, ": not \"id:controllers:path\""));
      continue;
    }
    const absl::string_view id = parts[0], controllers = parts[1], path = parts[2];
    if (!IsSafeCgroupPath(path)) {
      ignored->push_back(absl::StrCat(list_path, " line ", line_no, ": the cgroup path is not a clean absolute path"));
      continue;
    }
    if (id == "0" && controllers.empty()) {
      SmallestLimitAlong(base + "sys/fs/cgroup", path, "memory.max", "v2", &best, source, ignored);
      continue;
    }
    for (absl::string_view c : absl::StrSplit(controllers, ',')) {
      if (c == "memory") {
        SmallestLimitAlong(base + "sys/fs/cgroup/memory", path, "memory.limit_in_bytes", "v1", &best, source,
                           ignored);
      }
    }
  }
  return best;
}

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return uint64_t{1} << 40;
  const uint64_t p = static_cast<uint64_t>(pages), s = static_cast<uint64_t>(page_size);
  if (p > UINT64_MAX / s) return UINT64_MAX;
  return p * s;
}

MemoryBudget DetectMemoryBudget(std::optional<uint64_t> flag_bytes, const std::string& root) {
  MemoryBudget budget;
  if (flag_bytes.has_value() && *flag_bytes > 0) {
    budget.bytes = *flag_bytes;
    budget.source = "--memory_limit";
    return budget;
  }
  const uint64_t physical = PhysicalMemoryBytes();
  std::string source;
  std::optional<uint64_t> cgroup = CgroupMemoryLimit(root, &source, &budget.ignored);
  if (cgroup.has_value() && *cgroup > 0 && *cgroup < physical) {
    budget.bytes = *cgroup;
    budget.source = std::move(source);
  } else {
    budget.bytes = physical;
    budget.source = "physical memory";
  }
  return budget;
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text, absl::string_view what) {
  absl::string_view v = absl::StripAsciiWhitespace(text);
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", why, " (want bytes, or a number with K, M, G or T)"));
  };
  if (v.size() > 32) return bad("too long");
  v = absl::StripSuffix(v, "B");
  v = absl::StripSuffix(v, "i");
  uint64_t unit = 1;
  if (!v.empty()) {
    switch (absl::ascii_toupper(static_cast<unsigned char>(v.back()))) {
      case 'K': unit = uint64_t{1} << 10; break;
      case 'M': unit = uint64_t{1} << 20; break;
      case 'G': unit = uint64_t{1} << 30; break;
      case 'T': unit = uint64_t{1} << 40; break;
      default: break;
    }
    if (unit != 1) v.remove_suffix(1);
  }
  if (v.empty() || !std::all_of(v.begin(), v.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; })) {
    return bad("not a size");
  }
  double number = 0;
  if (!absl::SimpleAtod(v, &number) || !std::isfinite(number) || number <= 0) return bad("not a positive size");
  const long double bytes = static_cast<long double>(number) * static_cast<long double>(unit);
  if (bytes >= 18446744073709551615.0L) return bad("larger than 2^64 bytes");
  if (bytes < 1) return bad("less than one byte");
  return static_cast<uint64_t>(bytes);
}

uint64_t MemoryBudgetBytes() {
  uint64_t bytes = g_budget.load(std::memory_order_relaxed);
  if (bytes != 0) return bytes;
  static const uint64_t detected = DetectMemoryBudget(std::nullopt).bytes;
  // A concurrent SetMemoryBudget wins over detection.
  uint64_t expected = 0;
  g_budget.compare_exchange_strong(expected, detected, std::memory_order_relaxed);
  return g_budget.load(std::memory_order_relaxed);
}

void SetMemoryBudget(uint64_t bytes) {
  if (bytes != 0) g_budget.store(bytes, std::memory_order_relaxed);
}

}  // namespace weft
