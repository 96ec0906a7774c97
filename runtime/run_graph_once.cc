// RunGraphOnce (runtime/executor.h): an executor built for one call.
#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "runtime/executor.h"

namespace weft {

absl::StatusOr<std::vector<Tensor>> RunGraphOnce(const Graph& graph, Device* device,
                                                 const std::vector<std::pair<std::string, Tensor>>& feeds,
                                                 const std::vector<std::string>& fetches,
                                                 const std::vector<std::string>& targets) {
  ExecutorOptions opts;
  std::vector<Tensor> feed_values;
  for (const auto& [name, value] : feeds) {
    opts.feeds.push_back(name);
    feed_values.push_back(value);
  }
  opts.fetches = fetches;
  opts.targets = targets;
  ASSIGN_OR_RETURN(auto exec, Executor::Create(&graph, device, std::move(opts)));
  std::vector<Tensor> out;
  RETURN_IF_ERROR(exec->Run(feed_values, &out));
  return out;
}

}  // namespace weft
