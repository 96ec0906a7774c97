// The one conversion between absl::Status and grpc::Status, and the channel
// and server settings every weft daemon uses.
//
// Message sizes are set deliberately: control messages are small, and bulk
// tensors travel through RecvTensor as raw slices, so the limit
// (MaxMessageBytes(), 1 GiB unless the daemon's --max_message_bytes says
// otherwise) is sized to the largest legitimate tensor and turns a runaway
// request into RESOURCE_EXHAUSTED before gRPC buffers it.
//
// Keepalive: both ends ping an idle connection every 30 s and drop it when
// no answer comes within 10 s, so a client whose host vanished (a WatchJob
// stream, a peer's RecvTensor) releases its handler within ~40 s instead of
// when TCP gives up (many minutes). gRPC stops pinging after two pings
// without data and, on the receiving side, punishes pings more frequent
// than 5 min unless told otherwise; both are relaxed here, on both ends,
// since a quiet stream (a job's status between steps) is normal.
//
// Thread-safety: all functions are thread-safe.
#ifndef WEFT_COMMON_GRPC_UTIL_H_
#define WEFT_COMMON_GRPC_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace weft {

inline constexpr int kDefaultMaxMessageBytes = 1 << 30;

// The largest message a channel or server made here sends or receives.
int MaxMessageBytes();
// Sets it for channels and servers made from now on; a daemon calls it once
// at start-up (--max_message_bytes). INVALID_ARGUMENT naming the flag
// outside [4 MiB, 2 GiB - 1].
absl::Status SetMaxMessageBytes(int64_t bytes);
// The keepalive settings above, for channels that build their own arguments.
void AddKeepaliveArgs(grpc::ChannelArguments* args);

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
// Applies weft's limits and keepalive to a server under construction, and
// refuses to share its port with another process (no SO_REUSEPORT).
void ConfigureServer(grpc::ServerBuilder* builder);
// Sets the deadline of `ctx` to now + timeout (nothing for an infinite one).
void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout);

}  // namespace weft

#endif  // WEFT_COMMON_GRPC_UTIL_H_
