// The one conversion between absl::Status and grpc::Status, and the channel
// and server settings every weft daemon uses.
//
// Message sizes are set deliberately: control messages are small, and bulk
// tensors travel through RecvTensor as raw slices, so the limit
// (kMaxMessageBytes, 2 GiB - 1) exists only to turn a runaway request into a
// RESOURCE_EXHAUSTED error instead of an allocation of any size.
//
// Thread-safety: all functions are thread-safe.
#ifndef WEFT_COMMON_GRPC_UTIL_H_
#define WEFT_COMMON_GRPC_UTIL_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace weft {

inline constexpr int kMaxMessageBytes = 0x7fffffff;

grpc::Status ToGrpcStatus(const absl::Status& s);
absl::Status FromGrpcStatus(const grpc::Status& s);
// FromGrpcStatus with the peer named: "task /job:worker/task:1: <message>".
absl::Status FromGrpcStatus(const grpc::Status& s, const std::string& peer);

// A channel to "host:port" with weft's limits and keepalive, over
// `credentials` (common/grpc_security.h TransportSecurity::ChannelCredentials);
// without them, plaintext (in-process tests and --insecure).
std::shared_ptr<grpc::Channel> NewChannel(const std::string& target,
                                          std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);
// weft's channel arguments (what NewChannel uses), to add to.
grpc::ChannelArguments ChannelArgs();
// Applies weft's limits to a server under construction, and refuses to share
// its port with another process (no SO_REUSEPORT).
void ConfigureServer(grpc::ServerBuilder* builder);
// Sets the deadline of `ctx` to now + timeout (nothing for an infinite one).
void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout);

}  // namespace weft

#endif  // WEFT_COMMON_GRPC_UTIL_H_
