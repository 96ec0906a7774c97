// Channels to the tasks of a cluster, one per address, shared by every stub.
//
// gRPC multiplexes calls over a channel, and a channel costs a connection and
// threads' attention; weft makes one per peer address and reuses it
// (common/grpc_util.h NewChannel gives its settings).
//
// Thread-safety: thread-safe.
#ifndef WEFT_WORKER_GRPC_CHANNEL_CACHE_H_
#define WEFT_WORKER_GRPC_CHANNEL_CACHE_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/cluster.pb.h"

namespace weft {
namespace worker {

class ChannelCache {
 public:
  // Channels over `credentials` (null: plaintext).
  explicit ChannelCache(std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr)
      : credentials_(std::move(credentials)) {}

  // The channel to "host:port", created on first use.
  std::shared_ptr<grpc::Channel> Get(const std::string& address);

 private:
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

// The address of `task` ("/job:ps/task:0", or any device name on it) in
// `cluster`; NOT_FOUND naming the task and listing the cluster's jobs.
absl::StatusOr<std::string> TaskAddress(const ClusterDef& cluster, absl::string_view task);

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_GRPC_CHANNEL_CACHE_H_
