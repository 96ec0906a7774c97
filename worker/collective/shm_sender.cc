#include "worker/collective/shm_sender.h"

#include <unistd.h>

#include <cstring>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/peer_metrics.h"

namespace weft {
namespace collective {
namespace {

// How long an offer may wait for a peer's server to come up.
constexpr absl::Duration kAttachTimeout = absl::Seconds(10);
// After an offer failed for a reason that may pass, the next is made no
// sooner than this.
constexpr absl::Duration kAttachRetry = absl::Seconds(1);

class ShmSenderImpl final : public ShmSender, public std::enable_shared_from_this<ShmSenderImpl> {
 public:
  ShmSenderImpl(const Context* context, std::string address, const std::string& task, std::string describe)
      : ctx_(*context),
        address_(std::move(address)),
        describe_(std::move(describe)),
        sent_(PeerTraffic(task, "collective").sent) {}

  ~ShmSenderImpl() override {
    if (pidfd_ >= 0) close(pidfd_);
  }

  void Send(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk,
            StatusCallback done) override {
    mu_.Lock();
    if (stopping_) {
      mu_.Unlock();
      return done(absl::CancelledError(absl::StrCat("collective send to ", describe_, ": transport closing")));
    }
    switch (state_) {
      case State::kNetwork:
        if (refused_ || absl::Now() < retry_after_) {
          mu_.Unlock();
          return ctx_.network->SendAsync(group, dst, key, std::move(chunk), std::move(done));
        }
        [[fallthrough]];
      case State::kNew:
        state_ = State::kAttaching;
        queue_.push_back(Pending{std::make_shared<CollectiveGroup>(group), dst, key, std::move(chunk), std::move(done)});
        mu_.Unlock();
        return StartAttach();
      case State::kAttaching:
        queue_.push_back(Pending{std::make_shared<CollectiveGroup>(group), dst, key, std::move(chunk), std::move(done)});
        mu_.Unlock();
        return;
      case State::kShm:
        break;
    }
    if (chunk.size + chunk.prefix.size() > ring_->MaxPayload()) {
      mu_.Unlock();
      return ctx_.network->SendAsync(group, dst, key, std::move(chunk), std::move(done));
    }
    if (PeerExitedLocked()) {
      // A ring to a process that is gone takes chunks nobody reads. What
      // waited for it fails; this chunk goes into a ring offered to
      // whoever serves the address now (a restarted task), as a broken
      // gRPC stream is reopened by the next send.
      std::vector<Pending> failed = BreakLocked(absl::UnavailableError("its process exited"));
      const absl::Status status = status_of_break_;
      state_ = State::kAttaching;
      queue_.push_back(Pending{std::make_shared<CollectiveGroup>(group), dst, key, std::move(chunk), std::move(done)});
      mu_.Unlock();
      for (Pending& p : failed) p.done(status);
      return StartAttach();
    }
    if (queue_.empty()) {
      // The common case: room in the ring, so this thread copies the chunk
      // in and is done; no other thread is involved.
      absl::StatusOr<bool> wrote = ring_->TryWrite(EncodeChunkTag(key), chunk.prefix, chunk.data, chunk.size);
      if (wrote.ok() && *wrote) {
        mu_.Unlock();
        sent_->Increment(static_cast<double>(chunk.size + chunk.prefix.size()));
        return done(absl::OkStatus());
      }
      if (!wrote.ok()) {
        std::vector<Pending> failed = BreakLocked(wrote.status());
        const absl::Status status = status_of_break_;
        mu_.Unlock();
        for (Pending& p : failed) p.done(status);
        return done(status);
      }
    }
    queue_.push_back(Pending{nullptr, dst, key, std::move(chunk), std::move(done)});
    const bool start_writer = !writer_.joinable();
    if (start_writer) writer_ = std::thread([this] { WriterLoop(); });
    mu_.Unlock();
  }

  bool TrySend(const ChunkKey& key, SendChunk chunk, StatusCallback& done) override {
    mu_.Lock();
    if (stopping_ || state_ == State::kAttaching || (state_ == State::kNetwork && (refused_ || absl::Now() < retry_after_))) {
      mu_.Unlock();
      return false;
    }
    if (state_ != State::kShm || PeerExitedLocked()) {
      // No ring yet (or a dead one): offer one for the sends after this.
      std::vector<Pending> failed;
      absl::Status status;
      if (state_ == State::kShm) {
        failed = BreakLocked(absl::UnavailableError("its process exited"));
        status = status_of_break_;
      }
      state_ = State::kAttaching;
      mu_.Unlock();
      for (Pending& p : failed) p.done(status);
      StartAttach();
      return false;
    }
    if (chunk.prefix.size() >= ring_->MaxPayload()) {
      mu_.Unlock();
      return false;
    }
    // A message over the ring's largest goes in parts (SplitMessage): the
    // first is written here when there is room, the others by the writer.
    std::vector<MessagePart> parts = SplitMessage(key, std::move(chunk), ring_->MaxPayload());
    size_t written = 0;
    if (queue_.empty()) {
      const SendChunk& first = parts.front().chunk;
      absl::StatusOr<bool> wrote = ring_->TryWrite(EncodeChunkTag(parts.front().key), first.prefix, first.data, first.size);
      if (!wrote.ok()) {
        std::vector<Pending> failed = BreakLocked(wrote.status());
        const absl::Status status = status_of_break_;
        mu_.Unlock();
        for (Pending& p : failed) p.done(status);
        return false;
      }
      if (*wrote) {
        written = 1;
        sent_->Increment(static_cast<double>(first.size + first.prefix.size()));
      }
    }
    std::vector<StatusCallback> dones = JoinCallbacks(parts.size(), std::move(done));
    for (size_t i = written; i < parts.size(); ++i) {
      queue_.push_back(Pending{nullptr, 0, parts[i].key, std::move(parts[i].chunk), std::move(dones[i])});
    }
    if (written < parts.size() && !writer_.joinable()) writer_ = std::thread([this] { WriterLoop(); });
    mu_.Unlock();
    if (written == 1) dones[0](absl::OkStatus());
    return true;
  }

  // Fails what waits, closes the ring and joins the writer. Returns once no
  // offer is in flight.
  void Stop() override {
    std::vector<Pending> failed;
    std::function<void()> cancel;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      cancel = cancel_attach_;
      if (ring_ != nullptr) ring_->Close();
      while (!queue_.empty()) {
        failed.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    const absl::Status cancelled =
        absl::CancelledError(absl::StrCat("collective send to ", describe_, ": transport closing"));
    for (Pending& p : failed) p.done(cancelled);
    if (cancel) cancel();
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ShmSenderImpl* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return !p->attach_in_flight_; }, this));
    }
    if (writer_.joinable()) writer_.join();
  }

  bool AttachInFlight() const {
    absl::MutexLock lock(&mu_);
    return attach_in_flight_;
  }

  bool on_shm() const override {
    absl::MutexLock lock(&mu_);
    return state_ == State::kShm;
  }

 private:
  enum class State { kNew, kAttaching, kShm, kNetwork };
  struct Pending {
    std::shared_ptr<const CollectiveGroup> group;  // set while an offer is in flight (for the fallback)
    int dst;
    ChunkKey key;
    SendChunk chunk;
    StatusCallback done;
  };

  void StartAttach() {
    absl::StatusOr<std::unique_ptr<ShmRing>> created = ShmRing::Create(ctx_.ring_bytes);
    if (!created.ok()) return Attached(created.status(), nullptr, 0);
    std::shared_ptr<ShmRing> ring = std::move(*created);
    const ShmRing::Handle& h = ring->handle();
    AttachShmRequest request;
    request.set_host_id(ctx_.host_id);
    request.set_pid(h.pid);
    request.set_memfd(h.memfd);
    request.set_capacity(h.capacity);
    request.set_nonce(reinterpret_cast<const char*>(h.nonce.data()), h.nonce.size());
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
      if (!stopping) attach_in_flight_ = true;
    }
    if (stopping) return Attached(absl::CancelledError("transport closing"), nullptr, 0);
    std::function<void()> cancel = ctx_.offerer->OfferAsync(
        address_, request, kAttachTimeout, [self = shared_from_this(), ring](absl::StatusOr<AttachShmResponse> r) {
          self->Attached(r.status(), ring, r.ok() ? r->pid() : 0);
        });
    bool cancel_now = false;
    {
      absl::MutexLock lock(&mu_);
      if (attach_in_flight_) {
        cancel_attach_ = cancel;
        cancel_now = stopping_;
      }
    }
    if (cancel_now) cancel();
  }

  // The offer's outcome (or why none was made).
  void Attached(const absl::Status& status, std::shared_ptr<ShmRing> ring, int peer_pid) {
    std::vector<Pending> to_network, cancelled;
    {
      absl::MutexLock lock(&mu_);
      attach_in_flight_ = false;
      cancel_attach_ = nullptr;
      if (stopping_) {
        // Stop failed the queue already; anything left is cancelled.
        for (Pending& p : queue_) cancelled.push_back(std::move(p));
        queue_.clear();
      } else if (const int pidfd = status.ok() ? ShmRing::OpenPidfd(peer_pid) : -1; pidfd >= 0) {
        // Watching the reader's process is what tells a ring to a restarted
        // task from a live one: without it (pidfd < 0), the network.
        ring_ = std::move(ring);
        if (pidfd_ >= 0) close(pidfd_);
        pidfd_ = pidfd;
        state_ = State::kShm;
        if (!queue_.empty() && !writer_.joinable()) writer_ = std::thread([this] { WriterLoop(); });
        Logger("worker")->info("tensors and collective chunks to {} go through shared memory ({} MiB ring)", describe_,
                               ring_->capacity() >> 20);
      } else {
        // The peer refused for good (another host, shared memory off there)
        // or the offer failed (not serving yet): the network, for good or
        // for a while.
        const absl::StatusCode c = status.ok() ? absl::StatusCode::kFailedPrecondition : status.code();
        refused_ = c == absl::StatusCode::kFailedPrecondition || c == absl::StatusCode::kUnimplemented ||
                   c == absl::StatusCode::kPermissionDenied || c == absl::StatusCode::kInvalidArgument;
        retry_after_ = absl::Now() + kAttachRetry;
        state_ = State::kNetwork;
        for (Pending& p : queue_) to_network.push_back(std::move(p));
        queue_.clear();
        if (refused_) {
          Logger("worker")->info("tensors and collective chunks to {} go over the network: {}", describe_,
                                 status.ok() ? std::string("its process cannot be watched from here")
                                             : std::string(status.message()));
        }
      }
    }
    const absl::Status closing = absl::CancelledError(absl::StrCat("collective send to ", describe_, ": transport closing"));
    for (Pending& p : cancelled) p.done(closing);
    for (Pending& p : to_network) {
      ctx_.network->SendAsync(*p.group, p.dst, p.key, std::move(p.chunk), std::move(p.done));
    }
  }

  // Empties the queue into the ring as room appears.
  void WriterLoop() {
    auto has_work = +[](ShmSenderImpl* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
      return p->stopping_ || (p->state_ == State::kShm && !p->queue_.empty());
    };
    absl::MutexLock lock(&mu_);
    while (true) {
      mu_.Await(absl::Condition(has_work, this));
      if (stopping_) return;
      Pending& front = queue_.front();
      std::shared_ptr<ShmRing> ring = ring_;
      if (front.chunk.size + front.chunk.prefix.size() > ring->MaxPayload()) {
        Pending p = std::move(front);
        queue_.pop_front();
        mu_.Unlock();
        SendOverNetwork(std::move(p));
        mu_.Lock();
        continue;
      }
      absl::StatusOr<bool> wrote = PeerExitedLocked()
                                       ? absl::StatusOr<bool>(absl::UnavailableError("its process exited"))
                                       : ring->TryWrite(EncodeChunkTag(front.key), front.chunk.prefix, front.chunk.data,
                                                        front.chunk.size);
      if (wrote.ok() && *wrote) {
        StatusCallback done = std::move(front.done);
        const size_t size = front.chunk.size + front.chunk.prefix.size();
        queue_.pop_front();
        mu_.Unlock();
        sent_->Increment(static_cast<double>(size));
        done(absl::OkStatus());
        mu_.Lock();
        continue;
      }
      absl::Status broken = wrote.status();
      if (broken.ok()) {
        const size_t size = front.chunk.size + front.chunk.prefix.size();
        const int pidfd = pidfd_;
        mu_.Unlock();
        const ShmRing::WaitResult w = ring->WaitForSpace(size, pidfd, ctx_.spin, absl::InfiniteDuration());
        mu_.Lock();
        if (ring_ != ring || stopping_) continue;  // replaced, or stopping: look again
        if (w == ShmRing::WaitResult::kPeerGone) {
          broken = absl::UnavailableError("its process exited");
        } else if (w == ShmRing::WaitResult::kClosed) {
          broken = absl::UnavailableError("it closed the shared-memory ring (its log says why)");
        } else {
          continue;
        }
      }
      std::vector<Pending> failed = BreakLocked(broken);
      const absl::Status status = status_of_break_;
      mu_.Unlock();
      for (Pending& p : failed) p.done(status);
      mu_.Lock();
    }
  }

  void SendOverNetwork(Pending p) {
    // Only the queue's chunks taken while on shared memory lack a group;
    // those are never over the ring's limit unless they came during the
    // offer, which set it.
    if (p.group == nullptr) {
      return p.done(absl::InternalError(absl::StrCat("collective chunk to ", describe_, " lost its group")));
    }
    ctx_.network->SendAsync(*p.group, p.dst, p.key, std::move(p.chunk), std::move(p.done));
  }

  // Whether the ring's reader has exited (one poll of its pidfd, ~1 us).
  bool PeerExitedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pidfd_ >= 0 && ShmRing::ProcessExited(pidfd_); }

  // The ring is unusable: closes it and takes what waits for it, to fail
  // with status_of_break_. The next send offers a new ring.
  std::vector<Pending> BreakLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    status_of_break_ = absl::Status(status.code() == absl::StatusCode::kFailedPrecondition
                                        ? absl::StatusCode::kUnavailable
                                        : status.code(),
                                    absl::StrCat("collective send to ", describe_, ": ", status.message()));
    Logger("worker")->warn("{}", std::string(status_of_break_.message()));
    if (ring_ != nullptr) ring_->Close();
    ring_.reset();
    if (pidfd_ >= 0) close(pidfd_);
    pidfd_ = -1;
    state_ = State::kNew;
    std::vector<Pending> failed;
    for (Pending& p : queue_) failed.push_back(std::move(p));
    queue_.clear();
    return failed;
  }

  const Context& ctx_;
  const std::string address_;
  const std::string describe_;  // "task /job:worker/task:1 (rank 1)"
  metrics::Counter* const sent_;

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kNew;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool refused_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time retry_after_ ABSL_GUARDED_BY(mu_);
  bool attach_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> cancel_attach_ ABSL_GUARDED_BY(mu_);  // set while an offer is in flight
  std::shared_ptr<ShmRing> ring_ ABSL_GUARDED_BY(mu_);
  int pidfd_ ABSL_GUARDED_BY(mu_) = -1;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status status_of_break_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;  // started under mu_, joined by Stop
};

}  // namespace

std::shared_ptr<ShmSender> ShmSender::Create(const Context* context, std::string address, const std::string& task,
                                             std::string describe) {
  return std::make_shared<ShmSenderImpl>(context, std::move(address), task, std::move(describe));
}

}  // namespace collective
}  // namespace weft
