// The pieces of a MasterSession's plans, shared by the files that implement
// the session (master_session.cc: creation and lifetime; _plan.cc: building
// and registering plans; _step.cc: running steps and their cleanup). Not
// for use outside the session.
//
// A Plan is immutable once registered and shared by every step of its
// signature; a PlanEntry is the cache slot that the first caller of a
// signature fills.
#ifndef WEFT_MASTER_MASTER_SESSION_INTERNAL_H_
#define WEFT_MASTER_MASTER_SESSION_INTERNAL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "proto/graph.pb.h"
#include "worker/worker_interface.h"

namespace weft {
namespace master {
namespace session_internal {

// One device's share of a signature, registered with its task.
struct Partition {
  std::string device;
  std::string task;
  WorkerInterface* worker = nullptr;
  GraphDef graph_def;                // released once registered
  std::vector<std::string> feeds;    // `_feed/...` placeholders here
  std::vector<std::string> fetches;  // fetched tensors that live here
  std::vector<std::string> targets;  // targets here, and every _Send
  std::string graph_handle;          // set once registered
};

struct Plan {
  std::vector<Partition> parts;
  std::vector<std::string> tasks;  // distinct tasks of `parts`
  // Per partition: whether it is its task's first, which carries the task's
  // deferred cleanups in RunGraph.
  std::vector<bool> carries_cleanup;
  // Per feed (in the signature's order): the partition that takes it (-1 when
  // nothing needs it) and its registered name. Likewise per fetch.
  std::vector<std::pair<int, std::string>> feed_routes;
  std::vector<std::pair<int, std::string>> fetch_routes;
};

// The first caller of a signature builds the plan; the others wait on `ready`.
struct PlanEntry {
  absl::Notification ready;
  absl::Status status;  // set before `ready`
  std::shared_ptr<const Plan> plan;
};

}  // namespace session_internal
}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_MASTER_SESSION_INTERNAL_H_
