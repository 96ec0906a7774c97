#include "graph/device_name.h"

#include <cctype>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace weft {
namespace {

bool IsJobName(absl::string_view s) {
  if (s.empty() || !absl::ascii_islower(s[0])) return false;
  for (char c : s) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_' && c != '-') return false;
  }
  return true;
}

bool IsTypeName(absl::string_view s) {
  if (s.empty() || !absl::ascii_isalpha(s[0])) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return true;
}

// A non-negative decimal that fits an int.
bool ParseIndex(absl::string_view s, int* out) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return absl::SimpleAtoi(s, out);
}

// "TYPE" and "N" or "*" into type (upper case) and id (-1 for "*").
bool ParseDevice(absl::string_view type, absl::string_view id, DeviceName* d) {
  if (!IsTypeName(type)) return false;
  d->type = absl::AsciiStrToUpper(type);
  if (id == "*") {
    d->id = -1;
    return true;
  }
  return ParseIndex(id, &d->id);
}

}  // namespace

absl::StatusOr<DeviceName> DeviceName::Parse(absl::string_view name) {
  DeviceName d;
  if (name.empty()) return d;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed device name '", name, "': ", why,
        " (expected e.g. '/job:worker/task:0/device:CPU:0', '/job:ps', '/device:CPU:1' or '/cpu:0')"));
  };
  if (name[0] != '/') return bad("it must start with '/'");
  bool seen_job = false, seen_replica = false, seen_task = false, seen_device = false;
  const std::vector<absl::string_view> parts = absl::StrSplit(name.substr(1), '/');
  for (absl::string_view part : parts) {
    if (part.empty()) return bad("empty component");
    const std::vector<absl::string_view> f = absl::StrSplit(part, ':');
    auto once = [&](bool* seen) {
      const bool first = !*seen;
      *seen = true;
      return first;
    };
    if (f[0] == "job") {
      if (!once(&seen_job)) return bad("more than one job");
      if (f.size() != 2 || !IsJobName(f[1])) {
        return bad(absl::StrCat("'", part, "' is not job:NAME with NAME of [a-z0-9_-] starting with a letter"));
      }
      d.job = std::string(f[1]);
    } else if (f[0] == "replica") {
      if (!once(&seen_replica)) return bad("more than one replica");
      if (f.size() != 2 || f[1] != "0") return bad(absl::StrCat("'", part, "': only replica:0 is supported"));
    } else if (f[0] == "task") {
      if (!once(&seen_task)) return bad("more than one task");
      if (f.size() != 2 || !ParseIndex(f[1], &d.task)) {
        return bad(absl::StrCat("'", part, "' is not task:N with N a non-negative integer"));
      }
    } else if (f[0] == "device") {
      if (!once(&seen_device)) return bad("more than one device");
      if (f.size() != 3 || !ParseDevice(f[1], f[2], &d)) {
        return bad(absl::StrCat("'", part, "' is not device:TYPE:N (N an integer or '*')"));
      }
    } else if (f.size() == 2 && IsTypeName(f[0])) {
      // Shorthand "/cpu:0", "/GPU:1".
      if (!once(&seen_device)) return bad("more than one device");
      if (!ParseDevice(f[0], f[1], &d)) return bad(absl::StrCat("'", part, "' is not TYPE:N"));
    } else {
      return bad(absl::StrCat("unknown component '", part, "'"));
    }
  }
  return d;
}

std::string DeviceName::ToString() const {
  std::string s;
  if (!job.empty()) absl::StrAppend(&s, "/job:", job);
  if (task >= 0) absl::StrAppend(&s, "/task:", task);
  if (!type.empty() || id >= 0) {
    absl::StrAppend(&s, "/device:", type.empty() ? "*" : type, ":", id >= 0 ? std::to_string(id) : "*");
  }
  return s;
}

bool DeviceName::IsCompatible(const DeviceName& requested, const DeviceName& full) {
  return (requested.job.empty() || requested.job == full.job) && (requested.task < 0 || requested.task == full.task) &&
         (requested.type.empty() || requested.type == full.type) && (requested.id < 0 || requested.id == full.id);
}

absl::StatusOr<DeviceName> DeviceName::Merge(const DeviceName& a, const DeviceName& b) {
  auto conflict = [&](absl::string_view part) {
    return absl::InvalidArgumentError(
        absl::StrCat("devices '", a.ToString(), "' and '", b.ToString(), "' name different ", part, "s"));
  };
  DeviceName m = a;
  if (!b.job.empty()) {
    if (!m.job.empty() && m.job != b.job) return conflict("job");
    m.job = b.job;
  }
  if (b.task >= 0) {
    if (m.task >= 0 && m.task != b.task) return conflict("task");
    m.task = b.task;
  }
  if (!b.type.empty()) {
    if (!m.type.empty() && m.type != b.type) return conflict("device type");
    m.type = b.type;
  }
  if (b.id >= 0) {
    if (m.id >= 0 && m.id != b.id) return conflict("device id");
    m.id = b.id;
  }
  return m;
}

std::string TaskName(absl::string_view job, int task) { return absl::StrCat("/job:", job, "/task:", task); }

}  // namespace weft
