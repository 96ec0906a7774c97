#include "worker/collective/socket_collective_transport.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/allocator.h"
#include "common/logging.h"
#include "common/peer_metrics.h"

namespace weft {
namespace collective {

// One accepted connection and its reader.
struct SocketCollectiveTransport::InConn {
  // The accepted socket; the handshake gets a duplicate, so that Shutdown
  // wakes a reader whether it handshakes or reads.
  int fd = -1;
  std::thread reader;
  std::atomic<bool> closing{false};
  std::atomic<bool> finished{false};

  ~InConn() {
    if (reader.joinable()) reader.join();
    if (fd >= 0) close(fd);
  }
  void Shutdown() {
    closing.store(true);
    ::shutdown(fd, SHUT_RDWR);
  }
};

absl::StatusOr<std::unique_ptr<SocketCollectiveTransport>> SocketCollectiveTransport::Create(
    CollectiveTransportInterface* fallback, CollectiveMailbox* mailbox, Options options) {
  absl::StatusOr<std::unique_ptr<TlsListener>> listener = TlsListener::Listen(options.listen_host, options.listen_port);
  if (!listener.ok()) return listener.status();
  return std::unique_ptr<SocketCollectiveTransport>(
      new SocketCollectiveTransport(fallback, mailbox, std::move(options), *std::move(listener)));
}

SocketCollectiveTransport::SocketCollectiveTransport(CollectiveTransportInterface* fallback,
                                                     CollectiveMailbox* mailbox, Options options,
                                                     std::unique_ptr<TlsListener> listener)
    : fallback_(fallback), mailbox_(mailbox), options_(std::move(options)), listener_(std::move(listener)) {
  context_.fallback = fallback_;
  context_.endpoints = options_.endpoints;
  context_.tls = options_.tls;
  context_.connect_timeout = options_.connect_timeout;
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

SocketCollectiveTransport::~SocketCollectiveTransport() {
  std::vector<std::shared_ptr<SocketSender>> peers;
  std::vector<std::unique_ptr<InConn>> incoming;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    for (auto& [address, peer] : peers_) peers.push_back(peer);
    peers_.clear();
  }
  listener_->Close();
  acceptor_.join();  // no connection is added after this
  {
    absl::MutexLock lock(&mu_);
    incoming.swap(incoming_);
  }
  for (auto& in : incoming) in->Shutdown();
  incoming.clear();  // joins the readers
  for (auto& peer : peers) peer->Stop();
}

void SocketCollectiveTransport::SendAsync(const CollectiveGroup& group, int dst, const ChunkKey& key,
                                          SendChunk chunk, StatusCallback done) {
  if (dst < 0 || dst >= group.size()) {
    return done(absl::InvalidArgumentError(absl::StrCat("collective send to ", group.Describe(dst))));
  }
  if (!chunk.prefix.empty()) {
    return done(absl::InternalError("a chunk with a prefix goes only through shared memory"));
  }
  const CollectiveMember& m = group.members[dst];
  std::shared_ptr<SocketSender> peer;
  {
    absl::MutexLock lock(&mu_);
    if (closing_) {
      return done(absl::CancelledError(absl::StrCat("collective send to ", group.Describe(dst), ": transport closing")));
    }
    std::shared_ptr<SocketSender>& slot = peers_[m.address];
    if (slot == nullptr) slot = std::make_shared<SocketSender>(&context_, m.address, m.task, group.Describe(dst));
    peer = slot;
  }
  peer->Send(group, dst, key, std::move(chunk), std::move(done));
}

void SocketCollectiveTransport::AcceptLoop() {
  while (true) {
    absl::StatusOr<int> fd = listener_->AcceptFd();
    if (!fd.ok()) {
      if (fd.status().code() == absl::StatusCode::kCancelled) return;
      Logger("worker")->warn("collective socket listener: {}", std::string(fd.status().message()));
      continue;
    }
    absl::MutexLock lock(&mu_);
    // Reap the readers that ended.
    for (auto it = incoming_.begin(); it != incoming_.end();) {
      it = (*it)->finished.load() ? incoming_.erase(it) : it + 1;
    }
    if (closing_ || static_cast<int>(incoming_.size()) >= options_.max_connections) {
      if (!closing_) {
        Logger("worker")->warn("collective socket refused: {} connections already open", incoming_.size());
      }
      close(*fd);
      continue;
    }
    auto in = std::make_unique<InConn>();
    in->fd = *fd;
    InConn* raw = in.get();
    incoming_.push_back(std::move(in));
    raw->reader = std::thread([this, raw] { ReadLoop(raw); });
  }
}

void SocketCollectiveTransport::ReadLoop(InConn* in) {
  const int fd = fcntl(in->fd, F_DUPFD_CLOEXEC, 0);
  absl::StatusOr<std::unique_ptr<TlsSocket>> accepted =
      fd < 0 ? absl::ResourceExhaustedError(absl::StrCat("dup: ", std::strerror(errno)))
             : TlsSocket::Accept(options_.tls.get(), fd, options_.connect_timeout);
  if (!accepted.ok()) {
    if (!in->closing.load()) {
      Logger("worker")->warn("collective socket refused: {}", std::string(accepted.status().message()));
    }
    ::shutdown(in->fd, SHUT_RDWR);  // the duplicate is closed; this ends the connection now, not at the reaping
    in->finished.store(true);
    return;
  }
  std::unique_ptr<TlsSocket> socket = *std::move(accepted);
  const std::string& sender = socket->peer();
  metrics::Counter* received = PeerTraffic(sender, "collective").received;
  absl::Status s;
  bool between_frames = true;  // an end here loses nothing
  while (true) {
    SocketFrameHeader h;
    between_frames = true;
    s = socket->ReadFull(reinterpret_cast<char*>(&h), sizeof(h));
    if (!s.ok()) break;
    between_frames = false;
    static constexpr char kZero[sizeof(h.pad)] = {};
    if (h.magic != kSocketFrameMagic || h.reserved != 0 || std::memcmp(h.pad, kZero, sizeof(h.pad)) != 0 ||
        h.payload_bytes > options_.max_frame_bytes) {
      s = absl::DataLossError(absl::StrCat("a frame with a bad header (", h.payload_bytes,
                                           " payload bytes claimed, at most ", options_.max_frame_bytes, ")"));
      break;
    }
    const size_t bytes = static_cast<size_t>(h.payload_bytes);
    // Each frame gets a buffer of its own from the caching allocator (a
    // size class it keeps, so no malloc once warm): a chunk that arrives
    // before its receive then waits in the mailbox as it is, uncopied.
    std::shared_ptr<Buffer> buffer(CpuAllocator()->Allocate(bytes), [](Buffer* b) { b->Unref(); });
    char* data = static_cast<char*>(buffer->data());
    s = socket->ReadFull(data, bytes);
    if (!s.ok()) break;
    received->Increment(static_cast<double>(bytes));
    ReceivedChunk chunk;
    chunk.pieces.push_back(absl::string_view(data, bytes));
    chunk.owner = std::move(buffer);
    const ChunkKey key{h.group_key, h.instance_key, h.step_id, h.round, h.chunk, h.src_rank};
    s = mailbox_->Deliver(key, std::move(chunk), sender);
    if (!s.ok()) break;
  }
  if (s.code() != absl::StatusCode::kOutOfRange) {  // not a clean end
    const bool closing = in->closing.load();
    const std::string from = sender.empty() ? std::string("a peer") : sender;
    if (closing) {
      // This process is closing it.
    } else if (between_frames && s.code() == absl::StatusCode::kUnavailable) {
      // The sender went away between frames (a stop without a TLS close,
      // or an exit): nothing is lost here; its sends fail on its side.
      Logger("worker")->info("the collective socket from {} ({}) ended: {}", from, socket->remote(), s.ToString());
    } else {
      Logger("worker")->warn("closing the collective socket from {} ({}): {}", from, socket->remote(), s.ToString());
    }
  }
  socket.reset();  // a TLS close to a peer that is still there
  ::shutdown(in->fd, SHUT_RDWR);
  in->finished.store(true);
}

int SocketCollectiveTransport::NumSocketPeers() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [address, peer] : peers_) n += peer->connected() ? 1 : 0;
  return n;
}

int SocketCollectiveTransport::NumIncomingConnections() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& in : incoming_) n += in->finished.load() ? 0 : 1;
  return n;
}

}  // namespace collective
}  // namespace weft
