#include "worker/grpc_channel_cache.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_util.h"
#include "common/status_macros.h"
#include "graph/device_name.h"

namespace weft {
namespace worker {

std::shared_ptr<grpc::Channel> ChannelCache::Get(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<grpc::Channel>& channel = channels_[address];
  if (channel == nullptr) channel = NewChannel(address, credentials_);
  return channel;
}

absl::StatusOr<std::string> TaskAddress(const ClusterDef& cluster, absl::string_view task) {
  ASSIGN_OR_RETURN(DeviceName name, DeviceName::Parse(task));
  if (name.job.empty() || name.task < 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", task, "' does not name a task (/job:NAME/task:N)"));
  }
  std::vector<std::string> jobs;
  for (const JobDef& job : cluster.job()) {
    if (job.name() == name.job) {
      auto it = job.tasks().find(name.task);
      if (it != job.tasks().end()) return it->second;
    }
    jobs.push_back(absl::StrCat(job.name(), " (", job.tasks_size(), " tasks)"));
  }
  return absl::NotFoundError(absl::StrCat("task ", TaskName(name.job, name.task), " is not in the cluster (",
                                          jobs.empty() ? "no jobs" : absl::StrJoin(jobs, ", "), ")"));
}

}  // namespace worker
}  // namespace weft
