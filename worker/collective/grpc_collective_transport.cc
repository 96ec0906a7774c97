#include "worker/collective/grpc_collective_transport.h"

#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/peer_metrics.h"
#include "grpcpp/generic/generic_stub.h"
#include "worker/collective/grpc_chunk_coding.h"

namespace weft {
namespace collective {
namespace {
constexpr char kExchangeMethod[] = "/weft.CollectiveService/Exchange";
}  // namespace

std::vector<std::pair<std::string, int>> BulkTransferChannelArgs() {
  return {
      // Frames up to 1 MiB instead of 16 KiB: one DATA frame header and one
      // wake-up per chunk-sized write, not 64.
      {GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 1 << 20},
      // A fixed 64 MiB flow-control window: a stream never stalls waiting
      // for window updates, and BDP probing (which starts at 64 KiB and
      // grows only over many round trips) is off. Measured on loopback,
      // 2 ranks, 64 MiB: 630 ms -> 350 ms per all-reduce before the malloc
      // settings of bench/allreduce (see BENCHMARKS.md).
      {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20},
      {GRPC_ARG_HTTP2_BDP_PROBE, 0},
  };
}

// One Exchange stream to one peer address. Holds the write queue; gRPC owns
// the reactor's lifetime until OnDone, the transport's `live_` owns it after.
class GrpcCollectiveTransport::PeerStream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  PeerStream(GrpcCollectiveTransport* transport, const std::shared_ptr<grpc::Channel>& channel, std::string address,
             std::string peer, const std::string& peer_task)
      : transport_(transport),
        stub_(channel),
        address_(std::move(address)),
        peer_(std::move(peer)),
        sent_(PeerTraffic(peer_task, "collective").sent) {
    // A peer that has not started yet is waited for; the collective's own
    // deadline bounds the wait.
    ctx_.set_wait_for_ready(true);
    stub_.PrepareBidiStreamingCall(&ctx_, kExchangeMethod, grpc::StubOptions(), this);
    StartRead(&response_);
  }

  void Start() { StartCall(); }

  void Send(grpc::ByteBuffer message, StatusCallback done) {
    sent_->Increment(static_cast<double>(message.Length()));
    grpc::ByteBuffer* first = nullptr;
    absl::Status refused;
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || closing_) {
        refused = finished_ ? status_ : absl::CancelledError(absl::StrCat("stream to ", peer_, " is closing"));
      } else {
        queue_.push_back(Pending{std::move(message), std::move(done)});
        if (!writing_) {
          writing_ = true;
          first = &queue_.front().message;
        }
      }
    }
    if (!refused.ok()) return done(refused);
    if (first != nullptr) StartWrite(first);
  }

  // Ends the stream once its queue has drained. True when it has never
  // written anything yet chunks wait (its peer may never come): cancel it.
  bool Close() {
    bool writes_done = false, stuck = false;
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
      if (!finished_ && !writing_ && !writes_done_started_) writes_done = writes_done_started_ = true;
      stuck = !finished_ && !queue_.empty() && !wrote_any_;
    }
    if (writes_done) StartWritesDone();
    return stuck;
  }
  void Cancel() { ctx_.TryCancel(); }

  void OnWriteDone(bool ok) override {
    if (!ok) return;  // the stream broke; OnDone fails what is queued
    StatusCallback done;
    grpc::ByteBuffer* next = nullptr;
    bool writes_done = false;
    {
      absl::MutexLock lock(&mu_);
      wrote_any_ = true;
      done = std::move(queue_.front().done);
      queue_.pop_front();
      if (!queue_.empty()) {
        next = &queue_.front().message;
      } else {
        writing_ = false;
        if (closing_ && !writes_done_started_) writes_done = writes_done_started_ = true;
      }
    }
    if (next != nullptr) {
      StartWrite(next);
    } else if (writes_done) {
      StartWritesDone();
    }
    done(absl::OkStatus());
  }

  void OnReadDone(bool ok) override {
    if (ok) StartRead(&response_);  // the service sends nothing; ignore it if it does
  }

  void OnDone(const grpc::Status& s) override {
    absl::Status status =
        s.ok() ? absl::UnavailableError(absl::StrCat("collective stream to ", peer_, " at ", address_, " ended"))
               : FromGrpcStatus(s, absl::StrCat(peer_, " at ", address_));
    std::deque<Pending> failed;
    {
      absl::MutexLock lock(&mu_);
      finished_ = true;
      status_ = status;
      failed.swap(queue_);
    }
    for (Pending& p : failed) p.done(status);
    transport_->StreamDone(this);  // may delete this
  }

 private:
  struct Pending {
    grpc::ByteBuffer message;
    StatusCallback done;
  };

  GrpcCollectiveTransport* const transport_;
  grpc::GenericStub stub_;
  const std::string address_;
  const std::string peer_;  // "task /job:worker/task:1 (rank 1)"
  metrics::Counter* const sent_;  // bytes to the peer (common/peer_metrics.h)
  grpc::ClientContext ctx_;
  grpc::ByteBuffer response_;

  absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);  // front is being written while writing_
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool wrote_any_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_started_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

GrpcCollectiveTransport::GrpcCollectiveTransport(Options options) : options_(options) {}

GrpcCollectiveTransport::~GrpcCollectiveTransport() {
  std::vector<std::shared_ptr<PeerStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    streams_.clear();
    for (auto& [ptr, stream] : live_) streams.push_back(stream);
  }
  for (auto& s : streams) {
    if (s->Close()) s->Cancel();
  }
  auto all_done = +[](GrpcCollectiveTransport* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->live_.empty(); };
  {
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(all_done, this), options_.close_timeout)) return;
  }
  for (auto& s : streams) s->Cancel();
  streams.clear();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(all_done, this));
}

void GrpcCollectiveTransport::SendAsync(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk,
                                        StatusCallback done) {
  if (dst < 0 || dst >= group.size()) {
    return done(absl::InvalidArgumentError(absl::StrCat("collective send to ", group.Describe(dst))));
  }
  if (!chunk.prefix.empty()) {
    return done(absl::InternalError("a chunk with a prefix goes only through shared memory"));
  }
  std::shared_ptr<PeerStream> stream = StreamTo(group.members[dst].address, group.Describe(dst), group.members[dst].task);
  if (stream == nullptr) {
    return done(absl::CancelledError(absl::StrCat("collective send to ", group.Describe(dst), ": transport closing")));
  }
  stream->Send(EncodeChunk(key, std::move(chunk)), std::move(done));
}

std::shared_ptr<GrpcCollectiveTransport::PeerStream> GrpcCollectiveTransport::StreamTo(const std::string& address,
                                                                                       const std::string& peer,
                                                                                       const std::string& peer_task) {
  std::shared_ptr<PeerStream> stream;
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return nullptr;
    auto it = streams_.find(address);
    if (it != streams_.end()) return it->second;
    std::shared_ptr<grpc::Channel>& channel = channels_[address];
    if (channel == nullptr) {
      grpc::ChannelArguments args;  // weft's NewChannel settings plus the bulk ones
      args.SetMaxReceiveMessageSize(MaxMessageBytes());
      args.SetMaxSendMessageSize(MaxMessageBytes());
      AddKeepaliveArgs(&args);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
      for (const auto& [name, value] : BulkTransferChannelArgs()) args.SetInt(name, value);
      channel = grpc::CreateCustomChannel(
          address, options_.credentials != nullptr ? options_.credentials : grpc::InsecureChannelCredentials(), args);
    }
    stream = std::make_shared<PeerStream>(this, channel, address, peer, peer_task);
    streams_[address] = stream;
    live_[stream.get()] = stream;
  }
  stream->Start();
  return stream;
}

void GrpcCollectiveTransport::StreamDone(PeerStream* stream) {
  std::shared_ptr<PeerStream> keep;  // destroyed after the lock is released
  absl::MutexLock lock(&mu_);
  for (auto it = streams_.begin(); it != streams_.end(); ++it) {
    if (it->second.get() == stream) {
      streams_.erase(it);
      break;
    }
  }
  auto it = live_.find(stream);
  if (it == live_.end()) return;
  keep = std::move(it->second);
  live_.erase(it);
}

}  // namespace collective
}  // namespace weft
