#include "worker/collective/shm_collective_transport.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
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

// A chunk's key in a ring message's tag.
struct TagKey {
  int64_t group_key, instance_key, step_id;
  int32_t round, chunk, src_rank;
};
static_assert(sizeof(TagKey) <= ShmRing::kTagBytes);

ShmRing::Tag EncodeTag(const ChunkKey& k) {
  ShmRing::Tag tag{};
  const TagKey t{k.group_key, k.instance_key, k.step_id, k.round, k.chunk, k.src_rank};
  std::memcpy(tag.data(), &t, sizeof(t));
  return tag;
}

ChunkKey DecodeTag(const ShmRing::Tag& tag) {
  TagKey t;
  std::memcpy(&t, tag.data(), sizeof(t));
  return ChunkKey{t.group_key, t.instance_key, t.step_id, t.round, t.chunk, t.src_rank};
}

bool NamespaceInode(const char* path, uint64_t* inode) {
  struct stat st;
  if (stat(path, &st) != 0) return false;
  *inode = st.st_ino;
  return true;
}

}  // namespace

std::string ShmHostId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  uint64_t net = 0, pid = 0;
  if (!std::getline(in, boot) || !NamespaceInode("/proc/self/ns/net", &net) ||
      !NamespaceInode("/proc/self/ns/pid", &pid)) {
    return "";  // unknown: never equal to anyone's
  }
  return absl::StrCat(absl::StripAsciiWhitespace(boot), "/net:", net, "/pid:", pid);
}

// One destination: its ring (once attached), the chunks waiting for it, and
// the writer thread that empties a full ring's queue.
class ShmCollectiveTransport::OutPeer : public std::enable_shared_from_this<OutPeer> {
 public:
  OutPeer(ShmCollectiveTransport* transport, std::string address, std::string task, std::string describe)
      : transport_(transport),
        address_(std::move(address)),
        task_(task),
        describe_(std::move(describe)),
        sent_(PeerTraffic(task, "collective").sent) {}

  ~OutPeer() {
    if (pidfd_ >= 0) close(pidfd_);
  }

  void Send(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk, StatusCallback done) {
    mu_.Lock();
    if (stopping_) {
      mu_.Unlock();
      return done(absl::CancelledError(absl::StrCat("collective send to ", describe_, ": transport closing")));
    }
    switch (state_) {
      case State::kNetwork:
        if (refused_ || absl::Now() < retry_after_) {
          mu_.Unlock();
          return transport_->network_->SendAsync(group, dst, key, std::move(chunk), std::move(done));
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
    if (chunk.size > ring_->MaxPayload()) {
      mu_.Unlock();
      return transport_->network_->SendAsync(group, dst, key, std::move(chunk), std::move(done));
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
      absl::StatusOr<bool> wrote = ring_->TryWrite(EncodeTag(key), chunk.data, chunk.size);
      if (wrote.ok() && *wrote) {
        mu_.Unlock();
        sent_->Increment(static_cast<double>(chunk.size));
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

  // Fails what waits, closes the ring and joins the writer. Returns once no
  // offer is in flight.
  void Stop() {
    std::vector<Pending> failed;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      if (attach_ctx_ != nullptr) attach_ctx_->TryCancel();
      if (ring_ != nullptr) ring_->Close();
      while (!queue_.empty()) {
        failed.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    const absl::Status cancelled =
        absl::CancelledError(absl::StrCat("collective send to ", describe_, ": transport closing"));
    for (Pending& p : failed) p.done(cancelled);
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](OutPeer* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return !p->attach_in_flight_; }, this));
    }
    if (writer_.joinable()) writer_.join();
  }

  bool AttachInFlight() const {
    absl::MutexLock lock(&mu_);
    return attach_in_flight_;
  }

  bool on_shm() const {
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
  struct AttachCall {
    grpc::ClientContext ctx;
    AttachShmRequest request;
    AttachShmResponse response;
  };

  void StartAttach() {
    absl::StatusOr<std::unique_ptr<ShmRing>> created = ShmRing::Create(transport_->options_.ring_bytes);
    if (!created.ok()) return Attached(created.status(), nullptr, 0);
    std::shared_ptr<ShmRing> ring = std::move(*created);
    auto call = std::make_shared<AttachCall>();
    const ShmRing::Handle& h = ring->handle();
    call->request.set_host_id(transport_->host_id_);
    call->request.set_pid(h.pid);
    call->request.set_memfd(h.memfd);
    call->request.set_capacity(h.capacity);
    call->request.set_nonce(reinterpret_cast<const char*>(h.nonce.data()), h.nonce.size());
    call->ctx.set_wait_for_ready(true);  // the peer may not be serving yet
    call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + kAttachTimeout));
    {
      absl::MutexLock lock(&mu_);
      if (!stopping_) {
        if (channel_ == nullptr) {
          channel_ = NewChannel(address_, transport_->options_.credentials);
          stub_ = CollectiveService::NewStub(channel_);
        }
        attach_in_flight_ = true;
        attach_ctx_ = &call->ctx;
      }
    }
    if (!AttachInFlight()) {
      return Attached(absl::CancelledError("transport closing"), nullptr, 0);
    }
    stub_->async()->AttachShm(&call->ctx, &call->request, &call->response,
                              [self = shared_from_this(), call, ring](grpc::Status s) {
                                self->Attached(FromGrpcStatus(s, absl::StrCat(self->describe_, " at ", self->address_)),
                                               ring, call->response.pid());
                              });
  }

  // The offer's outcome (or why none was made).
  void Attached(const absl::Status& status, std::shared_ptr<ShmRing> ring, int peer_pid) {
    std::vector<Pending> to_network, cancelled;
    {
      absl::MutexLock lock(&mu_);
      attach_in_flight_ = false;
      attach_ctx_ = nullptr;
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
        Logger("worker")->info("collective chunks to {} go through shared memory ({} MiB ring)", describe_,
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
          Logger("worker")->info("collective chunks to {} go over the network: {}", describe_,
                                 status.ok() ? std::string("its process cannot be watched from here")
                                             : std::string(status.message()));
        }
      }
    }
    const absl::Status closing = absl::CancelledError(absl::StrCat("collective send to ", describe_, ": transport closing"));
    for (Pending& p : cancelled) p.done(closing);
    for (Pending& p : to_network) {
      transport_->network_->SendAsync(*p.group, p.dst, p.key, std::move(p.chunk), std::move(p.done));
    }
  }

  // Empties the queue into the ring as room appears.
  void WriterLoop() {
    auto has_work = +[](OutPeer* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
      return p->stopping_ || (p->state_ == State::kShm && !p->queue_.empty());
    };
    absl::MutexLock lock(&mu_);
    while (true) {
      mu_.Await(absl::Condition(has_work, this));
      if (stopping_) return;
      Pending& front = queue_.front();
      std::shared_ptr<ShmRing> ring = ring_;
      if (front.chunk.size > ring->MaxPayload()) {
        Pending p = std::move(front);
        queue_.pop_front();
        mu_.Unlock();
        SendOverNetwork(std::move(p));
        mu_.Lock();
        continue;
      }
      absl::StatusOr<bool> wrote = PeerExitedLocked()
                                       ? absl::StatusOr<bool>(absl::UnavailableError("its process exited"))
                                       : ring->TryWrite(EncodeTag(front.key), front.chunk.data, front.chunk.size);
      if (wrote.ok() && *wrote) {
        StatusCallback done = std::move(front.done);
        const size_t size = front.chunk.size;
        queue_.pop_front();
        mu_.Unlock();
        sent_->Increment(static_cast<double>(size));
        done(absl::OkStatus());
        mu_.Lock();
        continue;
      }
      absl::Status broken = wrote.status();
      if (broken.ok()) {
        const size_t size = front.chunk.size;
        const int pidfd = pidfd_;
        mu_.Unlock();
        const ShmRing::WaitResult w = ring->WaitForSpace(size, pidfd, transport_->options_.spin, absl::InfiniteDuration());
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
    transport_->network_->SendAsync(*p.group, p.dst, p.key, std::move(p.chunk), std::move(p.done));
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

  ShmCollectiveTransport* const transport_;
  const std::string address_;
  const std::string task_;
  const std::string describe_;  // "task /job:worker/task:1 (rank 1)"
  metrics::Counter* const sent_;

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kNew;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool refused_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time retry_after_ ABSL_GUARDED_BY(mu_);
  bool attach_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* attach_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::shared_ptr<grpc::Channel> channel_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<CollectiveService::Stub> stub_;  // set once, with channel_
  std::shared_ptr<ShmRing> ring_ ABSL_GUARDED_BY(mu_);
  int pidfd_ ABSL_GUARDED_BY(mu_) = -1;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status status_of_break_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;  // started under mu_, joined by Stop
};

struct ShmCollectiveTransport::InRing {
  std::unique_ptr<ShmRing> ring;
  int pidfd = -1;
  std::string sender;
  metrics::Counter* received = nullptr;
  std::thread reader;
  std::atomic<bool> finished{false};

  ~InRing() {
    if (reader.joinable()) reader.join();
    if (pidfd >= 0) close(pidfd);
  }
};

ShmCollectiveTransport::ShmCollectiveTransport(CollectiveTransportInterface* network, CollectiveMailbox* mailbox,
                                               Options options)
    : network_(network), mailbox_(mailbox), options_(std::move(options)), host_id_(ShmHostId()) {}

ShmCollectiveTransport::~ShmCollectiveTransport() {
  std::vector<std::shared_ptr<OutPeer>> peers;
  std::vector<std::unique_ptr<InRing>> incoming;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    for (auto& [address, peer] : peers_) peers.push_back(peer);
    peers_.clear();
    // Wakes the readers (a reader drops its ring under mu_ when it ends).
    for (auto& in : incoming_) {
      if (in->ring != nullptr) in->ring->Close();
    }
    incoming.swap(incoming_);
  }
  for (auto& peer : peers) peer->Stop();
  incoming.clear();  // ~InRing joins each reader
}

std::shared_ptr<ShmCollectiveTransport::OutPeer> ShmCollectiveTransport::PeerFor(const CollectiveGroup& group,
                                                                                 int dst) {
  const CollectiveMember& m = group.members[dst];
  absl::MutexLock lock(&mu_);
  if (closing_) return nullptr;
  std::shared_ptr<OutPeer>& peer = peers_[m.address];
  if (peer == nullptr) peer = std::make_shared<OutPeer>(this, m.address, m.task, group.Describe(dst));
  return peer;
}

void ShmCollectiveTransport::SendAsync(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk,
                                       StatusCallback done) {
  if (dst < 0 || dst >= group.size()) {
    return done(absl::InvalidArgumentError(absl::StrCat("collective send to ", group.Describe(dst))));
  }
  std::shared_ptr<OutPeer> peer = PeerFor(group, dst);
  if (peer == nullptr) {
    return done(absl::CancelledError(absl::StrCat("collective send to ", group.Describe(dst), ": transport closing")));
  }
  peer->Send(group, dst, key, std::move(chunk), std::move(done));
}

absl::StatusOr<AttachShmResponse> ShmCollectiveTransport::Attach(const std::string& caller,
                                                                 const AttachShmRequest& request) {
  const std::string who = caller.empty() ? std::string("an unauthenticated peer") : absl::StrCat("task ", caller);
  if (host_id_.empty() || request.host_id() != host_id_) {
    return absl::FailedPreconditionError(absl::StrCat("shared memory offered by ", who, " from another host (",
                                                      request.host_id().substr(0, 120), "; this is ", host_id_,
                                                      ")"));
  }
  ShmRing::Handle handle;
  if (request.nonce().size() != handle.nonce.size()) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory offered by ", who, ": nonce of ",
                                                   request.nonce().size(), " bytes, expected ", handle.nonce.size()));
  }
  handle.pid = request.pid();
  handle.memfd = request.memfd();
  handle.capacity = request.capacity();
  std::memcpy(handle.nonce.data(), request.nonce().data(), handle.nonce.size());
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return absl::UnavailableError("collective transport closing");
    // Reap the readers of rings whose peers have gone.
    for (auto it = incoming_.begin(); it != incoming_.end();) {
      it = (*it)->finished.load() ? incoming_.erase(it) : it + 1;
    }
    if (static_cast<int>(incoming_.size()) >= options_.max_incoming_rings) {
      return absl::ResourceExhaustedError(absl::StrCat("shared memory offered by ", who, ": ", incoming_.size(),
                                                       " rings are attached already, the limit"));
    }
  }
  // The pidfd first: if the pid is the caller's now (the ring's nonce says
  // so below), the pidfd names that same process, not a later one.
  const int pidfd = handle.pid > 0 ? ShmRing::OpenPidfd(handle.pid) : -1;
  if (pidfd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory offered by ", who, ": process ", handle.pid, " is not visible here"));
  }
  absl::StatusOr<std::unique_ptr<ShmRing>> ring = ShmRing::Open(handle, who);
  if (!ring.ok()) {
    close(pidfd);
    return ring.status();
  }
  auto in = std::make_unique<InRing>();
  in->ring = std::move(*ring);
  in->pidfd = pidfd;
  in->sender = caller;
  in->received = PeerTraffic(caller, "collective").received;
  InRing* raw = in.get();
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return absl::UnavailableError("collective transport closing");
    incoming_.push_back(std::move(in));
    raw->reader = std::thread([this, raw] { ReadLoop(raw); });
  }
  AttachShmResponse response;
  response.set_pid(getpid());
  return response;
}

void ShmCollectiveTransport::ReadLoop(InRing* in) {
  ShmRing::Message message;
  bool sender_gone = false;
  while (true) {
    // Messages written before the sender closed the ring or exited are
    // still delivered: the last chunks of a collective often come just
    // before the sender stops. Peek fails once a closed ring is empty.
    absl::StatusOr<bool> got = in->ring->Peek(&message);
    if (!got.ok()) {
      if (got.status().code() == absl::StatusCode::kDataLoss) {
        Logger("worker")->warn("shared-memory ring from task {}: {}", in->sender, std::string(got.status().message()));
      }
      break;
    }
    if (!*got) {
      if (sender_gone) break;
      sender_gone =
          in->ring->WaitForData(in->pidfd, options_.spin, absl::InfiniteDuration()) == ShmRing::WaitResult::kPeerGone;
      continue;
    }
    ReceivedChunk chunk;
    chunk.pieces.assign(message.pieces.begin(), message.pieces.end());
    chunk.borrowed = true;
    in->received->Increment(static_cast<double>(message.payload_bytes));
    absl::Status delivered = mailbox_->Deliver(DecodeTag(message.tag), std::move(chunk), in->sender);
    in->ring->Release(message);
    if (!delivered.ok()) {
      // Over the mailbox's quota: the sender's next chunks fail.
      Logger("worker")->warn("closing the shared-memory ring from task {}: {}", in->sender, std::string(delivered.message()));
      in->ring->Close();
      break;
    }
  }
  // Unmap now, not at the next Attach: a dead peer's ring is memory
  // nobody will read again.
  std::unique_ptr<ShmRing> ring;
  {
    absl::MutexLock lock(&mu_);
    ring = std::move(in->ring);
    in->finished.store(true);
  }
}

int ShmCollectiveTransport::NumShmPeers() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [address, peer] : peers_) n += peer->on_shm() ? 1 : 0;
  return n;
}

int ShmCollectiveTransport::NumIncomingRings() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& in : incoming_) n += in->finished.load() ? 0 : 1;
  return n;
}

}  // namespace collective
}  // namespace weft
