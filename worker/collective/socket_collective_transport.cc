#include "worker/collective/socket_collective_transport.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/peer_metrics.h"

namespace weft {
namespace collective {
namespace {

constexpr uint32_t kFrameMagic = 0x31736677;  // "wfs1"
// Frames up to this size are copied into one buffer and written at once.
constexpr size_t kCoalesceBytes = 16 << 10;

// A frame's header on the wire, followed by payload_bytes of payload.
struct FrameHeader {
  uint32_t magic;
  uint32_t reserved;  // zero
  uint64_t payload_bytes;
  int64_t group_key, instance_key, step_id;
  int32_t round, chunk, src_rank;
  char pad[12];  // zero
};
static_assert(sizeof(FrameHeader) == 64);

FrameHeader HeaderFor(const ChunkKey& k, size_t bytes) {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.payload_bytes = bytes;
  h.group_key = k.group_key;
  h.instance_key = k.instance_key;
  h.step_id = k.step_id;
  h.round = k.round;
  h.chunk = k.chunk;
  h.src_rank = k.src_rank;
  return h;
}

// "host" of "host:port" or "[v6]:port".
std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = address.substr(0, colon == std::string::npos ? address.size() : colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

// Whether a SocketEndpoint error means "never over a socket" (not "not yet").
bool RefusedForGood(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition || s.code() == absl::StatusCode::kUnimplemented ||
         s.code() == absl::StatusCode::kPermissionDenied || s.code() == absl::StatusCode::kInvalidArgument;
}

}  // namespace

// One destination: its connection (once made), the chunks waiting for it
// and the writer thread that sends them in order.
class SocketCollectiveTransport::Peer {
 public:
  Peer(const Options* options, CollectiveTransportInterface* fallback, std::string address, std::string task,
       std::string describe)
      : options_(*options),
        fallback_(fallback),
        address_(std::move(address)),
        task_(std::move(task)),
        describe_(std::move(describe)),
        sent_(PeerTraffic(task_, "collective").sent) {}

  void Send(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk, StatusCallback done) {
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
    fallback_->SendAsync(group, dst, key, std::move(chunk), std::move(done));
  }

  // Fails what waits with CANCELLED, shuts the connection and joins the
  // writer.
  void Stop() {
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

  bool connected() const {
    absl::MutexLock lock(&mu_);
    return socket_ != nullptr;
  }

 private:
  struct Pending {
    ChunkKey key;
    SendChunk chunk;
    StatusCallback done;
  };

  static void FailAll(std::deque<Pending>* pending, const absl::Status& s) {
    for (Pending& p : *pending) p.done(s);
    pending->clear();
  }

  // Asks the peer for its port and connects. Sets refused_ when the peer
  // will never take a socket.
  absl::StatusOr<std::unique_ptr<TlsSocket>> Connect() {
    absl::StatusOr<int> port = options_.endpoints->SocketPort(address_, options_.connect_timeout);
    if (!port.ok()) {
      if (RefusedForGood(port.status())) {
        Logger("worker")->info("collective chunks to {} go over gRPC: {}", describe_, std::string(port.status().message()));
        absl::MutexLock lock(&mu_);
        refused_ = true;
      }
      return port.status();
    }
    // With TLS the server's certificate must name the task the group
    // expects; in plaintext there is nobody to check.
    return TlsSocket::Connect(options_.tls.get(), HostOf(address_), *port, task_, options_.connect_timeout);
  }

  void WriterLoop() {
    std::deque<Pending> batch;
    std::unique_ptr<TlsSocket> socket;
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](Peer* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stopping_ || !p->queue_.empty(); }, this));
        if (stopping_) break;
        batch.swap(queue_);
      }
      if (socket == nullptr) {
        absl::StatusOr<std::unique_ptr<TlsSocket>> made = Connect();
        if (!made.ok()) {
          if (Refused()) {
            for (Pending& p : batch) fallback_->SendAsync(GroupOf(p), 0, p.key, std::move(p.chunk), std::move(p.done));
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
                               options_.tls != nullptr ? "TLS" : "plaintext", socket->remote());
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
  absl::Status WriteBatch(TlsSocket* socket, std::deque<Pending>* batch) {
    while (!batch->empty()) {
      Pending& p = batch->front();
      const size_t bytes = p.chunk.prefix.size() + p.chunk.size;
      const FrameHeader header = HeaderFor(p.key, bytes);
      const absl::string_view head(reinterpret_cast<const char*>(&header), sizeof(header));
      const absl::string_view payload(p.chunk.data, p.chunk.size);
      absl::Status s;
      if (bytes <= kCoalesceBytes) {
        // A small frame goes out as one write (one TLS record, one segment);
        // a large one's payload is written from the tensor itself.
        small_.assign(head.data(), head.size());
        small_.append(p.chunk.prefix);
        small_.append(payload.data(), payload.size());
        s = socket->WriteAll({absl::string_view(small_)});
      } else {
        const absl::string_view pieces[3] = {head, p.chunk.prefix, payload};
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

  bool Refused() const {
    absl::MutexLock lock(&mu_);
    return refused_;
  }
  // After a refusal: what was queued meanwhile goes to the fallback too.
  void RequeueToFallback() {
    std::deque<Pending> rest;
    {
      absl::MutexLock lock(&mu_);
      rest.swap(queue_);
    }
    for (Pending& p : rest) fallback_->SendAsync(GroupOf(p), 0, p.key, std::move(p.chunk), std::move(p.done));
  }
  // The fallback needs a group naming this destination; the chunk's rank
  // within it is 0.
  CollectiveGroup GroupOf(const Pending& p) const {
    CollectiveGroup g;
    g.group_key = p.key.group_key;
    g.members.push_back(CollectiveMember{task_, address_});
    return g;
  }

  const Options& options_;
  CollectiveTransportInterface* const fallback_;
  const std::string address_;
  const std::string task_;
  const std::string describe_;
  metrics::Counter* const sent_;
  std::thread writer_;  // started under mu_, joined by Stop
  std::string small_;   // the writer's: a small frame, whole (capacity kept)

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool refused_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  TlsSocket* socket_ ABSL_GUARDED_BY(mu_) = nullptr;  // the writer's, for Stop's Shutdown
};

// One accepted connection and its reader.
struct SocketCollectiveTransport::InConn {
  int fd = -1;  // until the handshake takes it
  absl::Mutex mu;
  TlsSocket* socket ABSL_GUARDED_BY(mu) = nullptr;  // the reader's, for the destructor's Shutdown
  bool closing ABSL_GUARDED_BY(mu) = false;
  std::thread reader;
  std::atomic<bool> finished{false};

  ~InConn() {
    if (reader.joinable()) reader.join();
  }
  void Shutdown() {
    absl::MutexLock lock(&mu);
    closing = true;
    if (socket != nullptr) socket->Shutdown();
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
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

SocketCollectiveTransport::~SocketCollectiveTransport() {
  std::vector<std::shared_ptr<Peer>> peers;
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
  const CollectiveMember& m = group.members[dst];
  std::shared_ptr<Peer> peer;
  {
    absl::MutexLock lock(&mu_);
    if (closing_) {
      return done(absl::CancelledError(absl::StrCat("collective send to ", group.Describe(dst), ": transport closing")));
    }
    std::shared_ptr<Peer>& slot = peers_[m.address];
    if (slot == nullptr) slot = std::make_shared<Peer>(&options_, fallback_, m.address, m.task, group.Describe(dst));
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
  absl::StatusOr<std::unique_ptr<TlsSocket>> accepted =
      TlsSocket::Accept(options_.tls.get(), in->fd, options_.connect_timeout);
  if (!accepted.ok()) {
    Logger("worker")->warn("collective socket refused: {}", std::string(accepted.status().message()));
    in->finished.store(true);
    return;
  }
  std::unique_ptr<TlsSocket> socket = *std::move(accepted);
  {
    absl::MutexLock lock(&in->mu);
    in->socket = socket.get();
    if (in->closing) socket->Shutdown();
  }
  const std::string& sender = socket->peer();
  metrics::Counter* received = PeerTraffic(sender, "collective").received;
  std::unique_ptr<char[]> buffer;  // reused: grows to the largest frame
  size_t capacity = 0;
  absl::Status s;
  bool between_frames = true;  // an end here loses nothing
  while (true) {
    FrameHeader h;
    between_frames = true;
    s = socket->ReadFull(reinterpret_cast<char*>(&h), sizeof(h));
    if (!s.ok()) break;
    between_frames = false;
    static constexpr char kZero[sizeof(h.pad)] = {};
    if (h.magic != kFrameMagic || h.reserved != 0 || std::memcmp(h.pad, kZero, sizeof(h.pad)) != 0 ||
        h.payload_bytes > options_.max_frame_bytes) {
      s = absl::DataLossError(absl::StrCat("a frame with a bad header (", h.payload_bytes,
                                           " payload bytes claimed, at most ", options_.max_frame_bytes, ")"));
      break;
    }
    const size_t bytes = static_cast<size_t>(h.payload_bytes);
    if (bytes > capacity) {
      capacity = std::max(bytes, std::min(2 * capacity, options_.max_frame_bytes));
      buffer = std::make_unique<char[]>(capacity);
    }
    s = socket->ReadFull(buffer.get(), bytes);
    if (!s.ok()) break;
    received->Increment(static_cast<double>(bytes));
    ReceivedChunk chunk;
    chunk.pieces.push_back(absl::string_view(buffer.get(), bytes));
    chunk.borrowed = true;  // the buffer is the next frame's
    const ChunkKey key{h.group_key, h.instance_key, h.step_id, h.round, h.chunk, h.src_rank};
    s = mailbox_->Deliver(key, std::move(chunk), sender);
    if (!s.ok()) break;
  }
  if (s.code() != absl::StatusCode::kOutOfRange) {  // not a clean end
    bool closing;
    {
      absl::MutexLock lock(&in->mu);
      closing = in->closing;
      in->socket = nullptr;
    }
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
  } else {
    absl::MutexLock lock(&in->mu);
    in->socket = nullptr;
  }
  socket.reset();
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
