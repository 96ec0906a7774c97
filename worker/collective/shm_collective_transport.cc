#include "worker/collective/shm_collective_transport.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/peer_metrics.h"

namespace weft {
namespace collective {
namespace {

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
struct ShmCollectiveTransport::InRing {
  std::unique_ptr<ShmRing> ring;
  int pidfd = -1;
  std::string sender;
  metrics::Counter* received = nullptr;
  std::thread reader;
  std::atomic<bool> finished{false};
  // A message came through: the sender's end is writing into this ring.
  std::atomic<bool> delivered{false};

  ~InRing() {
    if (reader.joinable()) reader.join();
    if (pidfd >= 0) close(pidfd);
  }
};

ShmCollectiveTransport::ShmCollectiveTransport(CollectiveTransportInterface* network, CollectiveMailbox* mailbox,
                                               Options options)
    : mailbox_(mailbox), options_(std::move(options)), host_id_(ShmHostId()) {
  context_.network = network;
  context_.offerer = options_.offerer;
  context_.ring_bytes = options_.ring_bytes;
  context_.spin = options_.spin;
  context_.host_id = host_id_;
}

ShmCollectiveTransport::~ShmCollectiveTransport() {
  std::vector<std::shared_ptr<ShmSender>> peers;
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

std::shared_ptr<ShmSender> ShmCollectiveTransport::PeerFor(const std::string& address, const std::string& task,
                                                           const std::string& describe) {
  absl::MutexLock lock(&mu_);
  if (closing_) return nullptr;
  std::shared_ptr<ShmSender>& peer = peers_[address];
  if (peer == nullptr) peer = ShmSender::Create(&context_, address, task, describe);
  return peer;
}

bool ShmCollectiveTransport::TrySendThroughRing(const std::string& address, const std::string& task,
                                                const ChunkKey& key, SendChunk chunk, StatusCallback& done) {
  std::shared_ptr<ShmSender> peer = PeerFor(address, task, absl::StrCat("task ", task));
  return peer != nullptr && peer->TrySend(key, std::move(chunk), done);
}

void ShmCollectiveTransport::SendAsync(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk,
                                       StatusCallback done) {
  if (dst < 0 || dst >= group.size()) {
    return done(absl::InvalidArgumentError(absl::StrCat("collective send to ", group.Describe(dst))));
  }
  std::shared_ptr<ShmSender> peer =
      PeerFor(group.members[dst].address, group.members[dst].task, group.Describe(dst));
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
    in->received->Increment(static_cast<double>(message.payload_bytes));
    if (!in->delivered.load(std::memory_order_relaxed)) in->delivered.store(true);
    const ChunkKey key = DecodeChunkTag(message.tag);
    absl::Status delivered;
    if (key.group_key == kRecvTensorRequestGroupKey) {
      delivered = HandleRequest(*in, key, message);  // releases the message
    } else {
      ReceivedChunk chunk;
      chunk.pieces.assign(message.pieces.begin(), message.pieces.end());
      chunk.borrowed = true;
      delivered = mailbox_->Deliver(key, std::move(chunk), in->sender);
      in->ring->Release(message);
    }
    if (!delivered.ok()) {
      // Over the mailbox's quota, or a bad request: the sender's next chunks fail.
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
  // After `finished`: a pull that found this ring running waits already
  // and fails here; a later one sees it gone and asks over gRPC.
  if (!in->sender.empty()) {
    mailbox_->AbortReceivesFrom(in->sender, kRecvTensorGroupKey,
                                absl::UnavailableError(absl::StrCat("the shared-memory ring from task ", in->sender,
                                                                    " closed before its RecvTensor reply came")));
  }
}

absl::Status ShmCollectiveTransport::HandleRequest(const InRing& in, const ChunkKey& key,
                                                   const ShmRing::Message& message) {
  std::string request;
  const bool fits = message.payload_bytes <= kMaxRecvTensorRequestBytes;
  if (fits) {
    request.reserve(message.payload_bytes);
    for (absl::string_view piece : message.pieces) request.append(piece.data(), piece.size());
  }
  in.ring->Release(message);
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("a RecvTensor request of ", message.payload_bytes,
                                                   " bytes, over the limit of ", kMaxRecvTensorRequestBytes));
  }
  if (in.sender.empty() || !request_handler_) {
    return absl::FailedPreconditionError("a RecvTensor request, which this task takes only over gRPC");
  }
  request_handler_(in.sender, key, std::move(request));
  return absl::OkStatus();
}

bool ShmCollectiveTransport::HasRingFrom(const std::string& task) const {
  absl::MutexLock lock(&mu_);
  for (const auto& in : incoming_) {
    if (in->sender == task && !in->finished.load() && in->delivered.load()) return true;
  }
  return false;
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
