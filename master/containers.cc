#include "master/containers.h"

#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "master/cluster_probe.h"

namespace weft {
namespace master {

absl::Status ValidateContainerName(absl::string_view name, absl::string_view where) {
  bool ok = !name.empty() && name.size() <= kMaxContainerNameChars;
  for (char c : name) {
    ok = ok && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-');
  }
  if (ok) return absl::OkStatus();
  // Not echoed whole: the name may be long or unprintable.
  return absl::InvalidArgumentError(absl::StrCat(where, ": container '", name.substr(0, kMaxContainerNameChars),
                                                 name.size() > kMaxContainerNameChars ? "...' (" : "' (",
                                                 name.size(), " bytes) must be 1..", kMaxContainerNameChars,
                                                 " characters of [A-Za-z0-9_.-]"));
}

std::string ScopedContainer(absl::string_view owner, absl::string_view name) {
  return absl::StrCat(owner, "/", name);
}

absl::Status ScopeContainers(absl::string_view owner, GraphDef* graph) {
  for (NodeDef& node : *graph->mutable_node()) {
    if (node.op() != "Variable") continue;
    ASSIGN_OR_RETURN(std::string container, GetStringAttrOr(node, "container", ""));
    if (container.empty()) continue;
    RETURN_IF_ERROR(ValidateContainerName(container, absl::StrCat("variable node '", node.name(), "'")));
    (*node.mutable_attr())["container"].set_s(ScopedContainer(owner, container));
  }
  return absl::OkStatus();
}

absl::StatusOr<ResetContainersRequest> TaskResetRequest(absl::string_view owner, const ResetRequest& request) {
  ResetContainersRequest out;
  if (request.container().empty()) {
    out.set_all(true);
    return out;
  }
  if (request.container_size() > kMaxResetContainerNames) {
    return absl::InvalidArgumentError(absl::StrCat("Reset names ", request.container_size(),
                                                   " containers, more than ", kMaxResetContainerNames));
  }
  for (int i = 0; i < request.container_size(); ++i) {
    RETURN_IF_ERROR(ValidateContainerName(request.container(i), absl::StrCat("Reset's container ", i)));
    out.add_container(ScopedContainer(owner, request.container(i)));
  }
  return out;
}

absl::Status ResetContainersOnEveryTask(WorkerCacheInterface* workers, const ResetContainersRequest& request) {
  const std::vector<std::string> tasks = workers->ListTasks();
  std::vector<ResetContainersResponse> responses(tasks.size());
  const std::vector<absl::Status> statuses = FanOut(tasks.size(), [&](size_t i, StatusCallback done) {
    WorkerInterface* w = workers->GetOrCreateWorker(tasks[i]);
    if (w == nullptr) return done(absl::NotFoundError("the worker cache has no client for the task"));
    w->ResetContainersAsync(&request, &responses[i], std::move(done));
  });
  absl::Status first;
  int failed = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (statuses[i].ok()) continue;
    if (failed++ == 0) first = WithTask(statuses[i], tasks[i]);
  }
  if (failed <= 1) return first;
  return absl::Status(first.code(), absl::StrCat(first.message(), " (and ", failed - 1,
                                                 " more tasks did not clear their containers)"));
}

}  // namespace master
}  // namespace weft
