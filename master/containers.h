// Variable containers as the master sees them (a Variable node's attr
// `container`; the workers' side: worker/resource_containers.h).
//
// A user names a container; the master scopes it by the caller's owner
// before any task sees it, so user B's "c" is never user A's "c". The
// workers' name is "<owner>/<name>" ("/<name>" on an insecure master): a
// user's name holds no '/', so no two (owner, name) pairs meet. Only
// interactive sessions use containers; a job's graph may not (its variables
// belong to the job's own session: graph/lowering refuses the attr).
//
// Thread-safety: plain functions; ResetContainersOnEveryTask is safe to call
// from any thread and blocks until every task answered.
#ifndef WEFT_MASTER_CONTAINERS_H_
#define WEFT_MASTER_CONTAINERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "master/worker_cache.h"
#include "proto/graph.pb.h"
#include "proto/master_service.pb.h"
#include "proto/worker_service.pb.h"

namespace weft {
namespace master {

// A user's container name: 1..64 characters of [A-Za-z0-9_.-].
inline constexpr size_t kMaxContainerNameChars = 64;
// Names one Reset may carry.
inline constexpr int kMaxResetContainerNames = 1024;

// INVALID_ARGUMENT naming `where` ("node 'w'") unless `name` is a valid
// user container name.
absl::Status ValidateContainerName(absl::string_view name, absl::string_view where);

// The workers' name of `owner`'s container `name`.
std::string ScopedContainer(absl::string_view owner, absl::string_view name);

// Rewrites every Variable node of `graph` that names a container to the
// owner-scoped name; INVALID_ARGUMENT naming the node for a bad name (the
// graph is then partly rewritten: discard it).
absl::Status ScopeContainers(absl::string_view owner, GraphDef* graph);

// The ResetContainers a Reset from `owner` sends to the tasks: every
// container when `request` names none, else `owner`'s named ones.
// INVALID_ARGUMENT for more than kMaxResetContainerNames names or a bad one.
absl::StatusOr<ResetContainersRequest> TaskResetRequest(absl::string_view owner, const ResetRequest& request);

// Sends `request` to every task of `workers` at once and waits for all.
// OK when every task cleared; else the first failure in task order, naming
// its task, and how many other tasks failed.
absl::Status ResetContainersOnEveryTask(WorkerCacheInterface* workers, const ResetContainersRequest& request);

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_CONTAINERS_H_
