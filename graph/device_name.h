// Device names, in TensorFlow's syntax.
//
// A full name says where a node runs: "/job:ps/task:0/device:CPU:0". A
// request may leave any part out ("/job:worker", "/device:CPU:1",
// "/job:worker/task:1"; "" leaves everything to placement). Components may
// come in any order but at most once each. Accepted spellings:
//
//   /job:NAME          NAME is [a-z][a-z0-9_-]*
//   /replica:0         accepted for TensorFlow compatibility and dropped
//   /task:N
//   /device:TYPE:N     TYPE is [A-Za-z][A-Za-z0-9_]*, upper-cased on parsing;
//                      N may be '*' (any)
//   /TYPE:N            shorthand, e.g. "/cpu:0" == "/device:CPU:0"
//
// ToString() writes the canonical form: job, task, device, in that order,
// omitting unset parts, so equal devices have equal strings.
//
// Thread-safety: plain values; the functions are pure.
#ifndef WEFT_GRAPH_DEVICE_NAME_H_
#define WEFT_GRAPH_DEVICE_NAME_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weft {

struct DeviceName {
  std::string job;   // "" = any job
  int task = -1;     // -1 = any task
  std::string type;  // "" = any type; else upper case ("CPU", "GPU")
  int id = -1;       // -1 = any device of the type

  // INVALID_ARGUMENT naming `name` and the offending component.
  static absl::StatusOr<DeviceName> Parse(absl::string_view name);

  // Canonical "/job:J/task:T/device:TYPE:ID" with unset parts left out;
  // "" when nothing is set.
  std::string ToString() const;

  // Every part is set: the name of one concrete device.
  bool IsFullySpecified() const { return !job.empty() && task >= 0 && !type.empty() && id >= 0; }
  bool IsEmpty() const { return job.empty() && task < 0 && type.empty() && id < 0; }

  // True when every part that `requested` sets equals that part of `full`,
  // i.e. `full` satisfies the request.
  static bool IsCompatible(const DeviceName& requested, const DeviceName& full);

  // The union of the parts of `a` and `b`; INVALID_ARGUMENT naming both when
  // they set a part to different values.
  static absl::StatusOr<DeviceName> Merge(const DeviceName& a, const DeviceName& b);

  bool operator==(const DeviceName& o) const {
    return job == o.job && task == o.task && type == o.type && id == o.id;
  }
  bool operator!=(const DeviceName& o) const { return !(*this == o); }
};

// "/job:worker/task:0": the prefix that names a task's devices.
std::string TaskName(absl::string_view job, int task);

}  // namespace weft

#endif  // WEFT_GRAPH_DEVICE_NAME_H_
