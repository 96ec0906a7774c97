#include "common/grpc_util.h"

#include <memory>
#include <vector>

#include "common/grpc_metrics.h"

#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace weft {

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

absl::Status FromGrpcStatus(const grpc::Status& s, const std::string& peer) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat("task ", peer, ": ", s.error_message()));
}

namespace {

std::atomic<int> g_max_message_bytes{kDefaultMaxMessageBytes};

constexpr int kKeepaliveTimeMs = 30000;
constexpr int kKeepaliveTimeoutMs = 10000;
// Pings closer together than this count as abuse (the peer's GOAWAY "too
// many pings"); below kKeepaliveTimeMs so that our own pings never do.
constexpr int kMinPingIntervalMs = 10000;
// A connection with no call for this long is closed (the client reconnects
// on its next call): a caller that opened a channel and walked away does
// not hold a server's resources forever.
constexpr int kMaxConnectionIdleMs = 30 * 60 * 1000;

}  // namespace

int MaxMessageBytes() { return g_max_message_bytes.load(std::memory_order_relaxed); }

absl::Status SetMaxMessageBytes(int64_t bytes) {
  constexpr int64_t kMin = int64_t{4} << 20;
  constexpr int64_t kMax = 0x7fffffff;
  if (bytes < kMin || bytes > kMax) {
    return absl::InvalidArgumentError(absl::StrCat("--max_message_bytes must be between ", kMin, " and ", kMax,
                                                   " (gRPC's limit), got ", bytes));
  }
  g_max_message_bytes.store(static_cast<int>(bytes), std::memory_order_relaxed);
  return absl::OkStatus();
}

void AddKeepaliveArgs(grpc::ChannelArguments* args) {
  args->SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args->SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  // Keep pinging a stream that is quiet for long (0: no limit).
  args->SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

grpc::ChannelArguments ChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(MaxMessageBytes());
  args.SetMaxSendMessageSize(MaxMessageBytes());
  AddKeepaliveArgs(&args);
  // Reconnect quickly to a restarted task instead of backing off for minutes.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return args;
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& target,
                                          std::shared_ptr<grpc::ChannelCredentials> credentials) {
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(target, credentials, ChannelArgs());
}

void ConfigureServer(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(MaxMessageBytes());
  builder->SetMaxSendMessageSize(MaxMessageBytes());
  // The server pings its clients too: a handler whose client vanished
  // (WatchJob) is cancelled once a ping goes unanswered.
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Accept the clients' 30 s pings on a quiet stream instead of answering
  // the third with GOAWAY.
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, kMinPingIntervalMs);
  builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, kMaxConnectionIdleMs);
  // gRPC sets SO_REUSEPORT by default, so a second daemon started on a port
  // already in use binds it too and the kernel splits connections between
  // the two: a peer's call can reach the wrong task. One port, one daemon.
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Every RPC counted and timed by method and code (/metrics).
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(NewServerMetricsInterceptorFactory());
  builder->experimental().SetInterceptorCreators(std::move(interceptors));
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return;
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
}

}  // namespace weft
