// The cluster a daemon belongs to, from flags or from TF_CONFIG.
//
//   --cluster=worker=h1:p1,h2:p2;ps=h3:p3   with --task=worker:0
//   TF_CONFIG='{"cluster": {"worker": ["h1:p1", "h2:p2"], "ps": ["h3:p3"]},
//               "task": {"type": "worker", "index": 0}}'
//
// TF_CONFIG is the variable Kubeflow's TFJob operator injects. Kubeflow's
// "chief" job maps to weft's master only if the caller asks for it; weft keeps
// job names as given. Every error names the field or the piece of text at
// fault.
//
// Thread-safety: plain values and pure functions.
#ifndef WEFT_COMMON_CLUSTER_SPEC_H_
#define WEFT_COMMON_CLUSTER_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/cluster.pb.h"

namespace weft {

struct TaskSpec {
  std::string job;
  int index = 0;
  // "/job:worker/task:0"
  std::string Name() const;
};

struct ClusterConfig {
  ClusterDef cluster;
  TaskSpec task;  // empty job when the source named no task
};

// "worker=h:p,h:p;ps=h:p". Addresses must be host:port with a port in
// 1..65535; job names are [a-z][a-z0-9_]*; no job may repeat.
absl::StatusOr<ClusterDef> ParseClusterFlag(absl::string_view flag);
// "worker:1" or "/job:worker/task:1".
absl::StatusOr<TaskSpec> ParseTaskFlag(absl::string_view flag);
// The JSON text of TF_CONFIG.
absl::StatusOr<ClusterConfig> ParseTfConfig(absl::string_view json);

// A ClusterDef that did not come from one of the parsers above (one the
// master sends a task): job names as the flag allows them, each once; task
// indices non-negative; every address host:port with a port in 1..65535.
// INVALID_ARGUMENT naming `where` and the job, task or address at fault.
absl::Status CheckClusterDef(const ClusterDef& cluster, absl::string_view where);

// INVALID_ARGUMENT naming `where` unless `address` is "host:port": a DNS
// name or IPv4 address, or an IPv6 one in brackets, and a port 1..65535.
absl::Status CheckHostPort(absl::string_view address, absl::string_view where);
// The address of a task; NOT_FOUND naming the task when the cluster has none.
absl::StatusOr<std::string> TaskAddress(const ClusterDef& cluster, const TaskSpec& task);
// The host of "host:port" or "[v6]:port" (brackets removed).
std::string AddressHost(absl::string_view address);
// Number of tasks in `job` (0 when absent).
int NumTasks(const ClusterDef& cluster, absl::string_view job);
// "worker=h:p,h:p;ps=h:p" (jobs in the order given).
std::string ClusterToFlag(const ClusterDef& cluster);

}  // namespace weft

#endif  // WEFT_COMMON_CLUSTER_SPEC_H_
