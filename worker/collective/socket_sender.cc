#include "worker/collective/socket_sender.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cluster_spec.h"
#include "common/logging.h"
#include "common/peer_metrics.h"

namespace weft {
namespace collective {
namespace {

// Frames up to this size are copied into one buffer and written at once.
constexpr size_t kCoalesceBytes = 16 << 10;

SocketFrameHeader HeaderFor(const ChunkKey& k, size_t bytes) {
  SocketFrameHeader h{};
  h.magic = kSocketFrameMagic;
  h.payload_bytes = bytes;
  h.group_key = k.group_key;
  h.instance_key = k.instance_key;
  h.step_id = k.step_id;
  h.round = k.round;
  h.chunk = k.chunk;
  h.src_rank = k.src_rank;
  return h;
}

// Whether a SocketEndpoint error means "never over a socket" (not "not yet").
bool RefusedForGood(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition || s.code() == absl::StatusCode::kUnimplemented ||
         s.code() == absl::StatusCode::kPermissionDenied || s.code() == absl::StatusCode::kInvalidArgument;
}

}  // namespace

SocketSender::SocketSender(const Context* context, std::string address, std::string task, std::string describe)
    : ctx_(*context),
      address_(std::move(address)),
      task_(std::move(task)),
      describe_(std::move(describe)),
      sent_(PeerTraffic(task_, "collective").sent) {}

SocketSender::~SocketSender() { Stop(); }

void SocketSender::Send(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk, StatusCallback done) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      return done(absl::CancelledError(absl::StrCat("collective send to ", describe_, ": transport closing")));
    }
    if (!refused_) {
      queue_.push_back(Pending{key, std::move(chunk), std::move(done)});
      if (!writer_.joinable()) writer_ = std::thread([this] { WriterLoop(); });
      return;
    }
  }
  ctx_.fallback->SendAsync(group, dst, key, std::move(chunk), std::move(done));
}

void SocketSender::Stop() {
  std::deque<Pending> failed;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (socket_ != nullptr) socket_->Shutdown();
    failed.swap(queue_);
  }
  FailAll(&failed, absl::CancelledError(absl::StrCat("collective send to ", describe_, ": transport closing")));
  if (writer_.joinable()) writer_.join();
}

bool SocketSender::connected() const {
  absl::MutexLock lock(&mu_);
  return socket_ != nullptr;
}

void SocketSender::FailAll(std::deque<Pending>* pending, const absl::Status& s) {
  for (Pending& p : *pending) p.done(s);
  pending->clear();
}

// Asks the peer for its port and connects, in attempts of at most a
// second (so that Stop is never kept waiting longer) spaced by a backoff
// from 50 ms to 1 s, until Context::connect_timeout. Sets refused_ when
// the peer will never take a socket.
absl::StatusOr<std::unique_ptr<TlsSocket>> SocketSender::Connect() {
  const absl::Time deadline = absl::Now() + ctx_.connect_timeout;
  absl::Status last = absl::DeadlineExceededError("no attempt");
  absl::Duration backoff = absl::Milliseconds(50);  // between attempts that failed at once (a refused port)
  for (bool first = true; !Stopping(); first = false) {
    if (!first) {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), std::min(backoff, deadline - absl::Now()));
      backoff = std::min(2 * backoff, absl::Seconds(1));
      if (stopping_) break;
    }
    const absl::Duration attempt = std::min(absl::Seconds(1), deadline - absl::Now());
    if (attempt <= absl::ZeroDuration()) break;
    absl::StatusOr<int> port = ctx_.endpoints->SocketPort(address_, attempt);
    if (port.ok()) {
      // With TLS the server's certificate must name the task the group
      // expects; in plaintext there is nobody to check.
      absl::StatusOr<std::unique_ptr<TlsSocket>> made =
          TlsSocket::Connect(ctx_.tls.get(), AddressHost(address_), *port, task_, attempt);
      if (made.ok() || made.status().code() == absl::StatusCode::kUnauthenticated) return made;
      last = made.status();
    } else if (RefusedForGood(port.status())) {
      Logger("worker")->info("collective chunks to {} go over gRPC: {}", describe_, std::string(port.status().message()));
      absl::MutexLock lock(&mu_);
      refused_ = true;
      return port.status();
    } else {
      last = port.status();
    }
  }
  return last;
}

bool SocketSender::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

void SocketSender::WriterLoop() {
  std::deque<Pending> batch;
  std::unique_ptr<TlsSocket> socket;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](SocketSender* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stopping_ || !p->queue_.empty(); }, this));
      if (stopping_) break;
      batch.swap(queue_);
    }
    if (socket == nullptr) {
      absl::StatusOr<std::unique_ptr<TlsSocket>> made = Connect();
      if (!made.ok()) {
        if (Refused()) {
          for (Pending& p : batch) ctx_.fallback->SendAsync(GroupOf(p), 0, p.key, std::move(p.chunk), std::move(p.done));
          batch.clear();
          RequeueToFallback();
          break;
        }
        FailAll(&batch, absl::UnavailableError(absl::StrCat("collective send to ", describe_, " at ", address_, ": ",
                                                            made.status().message())));
        continue;
      }
      socket = *std::move(made);
      Logger("worker")->info("collective chunks to {} go over a {} socket ({})", describe_,
                             ctx_.tls != nullptr ? "TLS" : "plaintext", socket->remote());
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
      socket_ = socket.get();
    }
    absl::Status s = WriteBatch(socket.get(), &batch);
    if (!s.ok()) {
      {
        absl::MutexLock lock(&mu_);
        socket_ = nullptr;
      }
      socket.reset();  // the next chunk connects again
    }
  }
  FailAll(&batch, absl::CancelledError(absl::StrCat("collective send to ", describe_, ": transport closing")));
  absl::MutexLock lock(&mu_);
  socket_ = nullptr;
}

// Writes each chunk of `batch` as a frame; on an error fails the rest.
absl::Status SocketSender::WriteBatch(TlsSocket* socket, std::deque<Pending>* batch) {
  while (!batch->empty()) {
    Pending& p = batch->front();
    const size_t bytes = p.chunk.size;
    const SocketFrameHeader header = HeaderFor(p.key, bytes);
    const absl::string_view head(reinterpret_cast<const char*>(&header), sizeof(header));
    const absl::string_view payload(p.chunk.data, p.chunk.size);
    absl::Status s;
    if (bytes <= kCoalesceBytes) {
      // A small frame goes out as one write (one TLS record, one segment);
      // a large one's payload is written from the tensor itself.
      small_.assign(head.data(), head.size());
      small_.append(payload.data(), payload.size());
      s = socket->WriteAll({absl::string_view(small_)});
    } else {
      const absl::string_view pieces[2] = {head, payload};
      s = socket->WriteAll(pieces);
    }
    if (!s.ok()) {
      FailAll(batch, absl::UnavailableError(absl::StrCat("collective send to ", describe_, ": ", s.message())));
      return s;
    }
    sent_->Increment(static_cast<double>(bytes));
    StatusCallback done = std::move(p.done);
    batch->pop_front();  // drops the pin before `done`, as the other transports do
    done(absl::OkStatus());
  }
  return absl::OkStatus();
}

bool SocketSender::Refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

// After a refusal: what was queued meanwhile goes to the fallback too.
void SocketSender::RequeueToFallback() {
  std::deque<Pending> rest;
  {
    absl::MutexLock lock(&mu_);
    rest.swap(queue_);
  }
  for (Pending& p : rest) ctx_.fallback->SendAsync(GroupOf(p), 0, p.key, std::move(p.chunk), std::move(p.done));
}

// The fallback needs a group naming this destination; the chunk's rank
// within it is 0.
CollectiveGroup SocketSender::GroupOf(const Pending& p) const {
  CollectiveGroup g;
  g.group_key = p.key.group_key;
  g.members.push_back(CollectiveMember{task_, address_});
  return g;
}

}  // namespace collective
}  // namespace weft
