#include "common/shm_ring.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

constexpr uint64_t kRingMagic = 0x31676e6972746677;  // "wftring1"
constexpr uint32_t kMessageMagic = 0x6d74666d;       // "mftm"
constexpr size_t kDataOffset = 4096;                 // the control block's page

// A message's header as it lies in the ring.
struct WireHeader {
  uint32_t magic;
  uint32_t reserved;
  uint64_t payload_bytes;
  char tag[ShmRing::kTagBytes];
};
static_assert(sizeof(WireHeader) == ShmRing::kHeaderBytes);

size_t RoundUp64(size_t n) { return (n + 63) & ~size_t{63}; }

std::string Errno(int e) { return std::strerror(e); }

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const struct timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: the word is shared with another process.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

// The control block at the start of the memfd. Positions count bytes ever
// written (head, the producer's) and ever released (tail, the consumer's);
// each side writes only its own. The `*_sleeping` flags announce a sleeper
// on the matching futex word.
struct ShmRing::Control {
  uint64_t magic;
  uint64_t capacity;
  uint8_t nonce[16];
  alignas(64) std::atomic<uint64_t> head;
  std::atomic<uint32_t> consumer_sleeping;
  std::atomic<uint32_t> data_futex;
  alignas(64) std::atomic<uint64_t> tail;
  std::atomic<uint32_t> producer_sleeping;
  std::atomic<uint32_t> space_futex;
  alignas(64) std::atomic<uint32_t> closed;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free to be address-free");

absl::StatusOr<std::unique_ptr<ShmRing>> ShmRing::Create(size_t capacity) {
  if (capacity < kMinCapacity || capacity > kMaxCapacity || (capacity & (capacity - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory ring capacity ", capacity,
                                                   " is not a power of two in [", kMinCapacity, ", ", kMaxCapacity,
                                                   "]"));
  }
  static_assert(sizeof(Control) <= kDataOffset);
  std::unique_ptr<ShmRing> ring(new ShmRing());
  ring->capacity_ = capacity;
  ring->map_bytes_ = kDataOffset + capacity;
  int fd = memfd_create("weft-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("memfd_create: ", Errno(errno)));
  ring->handle_.memfd = fd;
  if (ftruncate(fd, static_cast<off_t>(ring->map_bytes_)) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("sizing a shared-memory ring of ", ring->map_bytes_,
                                                     " bytes: ", Errno(errno)));
  }
  // The consumer checks these: no side can shrink the memory under the
  // other's mapping.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return absl::InternalError(absl::StrCat("sealing a shared-memory ring: ", Errno(errno)));
  }
  ring->map_ = mmap(nullptr, ring->map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (ring->map_ == MAP_FAILED) {
    ring->map_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat("mapping a shared-memory ring: ", Errno(errno)));
  }
  ring->control_ = new (ring->map_) Control();
  ring->data_ = static_cast<char*>(ring->map_) + kDataOffset;
  Nonce nonce;
  if (getrandom(nonce.data(), nonce.size(), 0) != static_cast<ssize_t>(nonce.size())) {
    return absl::InternalError(absl::StrCat("getrandom: ", Errno(errno)));
  }
  ring->control_->capacity = capacity;
  std::memcpy(ring->control_->nonce, nonce.data(), nonce.size());
  ring->control_->magic = kRingMagic;
  ring->handle_.pid = getpid();
  ring->handle_.capacity = capacity;
  ring->handle_.nonce = nonce;
  return ring;
}

absl::StatusOr<std::unique_ptr<ShmRing>> ShmRing::Open(const Handle& handle, absl::string_view peer) {
  const size_t capacity = handle.capacity;
  if (capacity < kMinCapacity || capacity > kMaxCapacity || (capacity & (capacity - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory ring from ", peer, ": capacity ", capacity,
                                                   " is not a power of two in [", kMinCapacity, ", ", kMaxCapacity,
                                                   "]"));
  }
  if (handle.pid <= 0 || handle.memfd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory ring from ", peer, ": bad pid ", handle.pid, " or descriptor ", handle.memfd));
  }
  std::unique_ptr<ShmRing> ring(new ShmRing());
  ring->capacity_ = capacity;
  ring->map_bytes_ = kDataOffset + capacity;
  const std::string path = absl::StrCat("/proc/", handle.pid, "/fd/", handle.memfd);
  // O_NOFOLLOW cannot apply to /proc's magic links; the checks below decide.
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory ring from ", peer, ": cannot open ", path, ": ", Errno(errno)));
  }
  ring->handle_ = handle;
  ring->handle_.memfd = fd;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      static_cast<uint64_t>(st.st_size) != ring->map_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory ring from ", peer, ": ", path,
                                                   " is not a memfd of this user of ", ring->map_bytes_, " bytes"));
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory ring from ", peer, ": ", path, " is not sealed against resizing"));
  }
  ring->map_ = mmap(nullptr, ring->map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (ring->map_ == MAP_FAILED) {
    ring->map_ = nullptr;
    return absl::ResourceExhaustedError(
        absl::StrCat("mapping a shared-memory ring from ", peer, ": ", Errno(errno)));
  }
  ring->control_ = static_cast<Control*>(ring->map_);
  ring->data_ = static_cast<char*>(ring->map_) + kDataOffset;
  // volatile-free reads: the producer finished these before it told us.
  if (ring->control_->magic != kRingMagic || ring->control_->capacity != capacity ||
      std::memcmp(ring->control_->nonce, handle.nonce.data(), handle.nonce.size()) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("shared-memory ring from ", peer, ": ", path,
                                                    " is not the ring announced (magic, size or nonce differ)"));
  }
  ring->head_ = ring->tail_ = ring->control_->tail.load(std::memory_order_acquire);
  if (ring->control_->head.load(std::memory_order_acquire) != ring->tail_) {
    // A fresh ring is empty; the producer writes nothing before we attach.
    return absl::InvalidArgumentError(absl::StrCat("shared-memory ring from ", peer, " is not empty when opened"));
  }
  return ring;
}

ShmRing::~ShmRing() {
  if (control_ != nullptr) Close();
  if (map_ != nullptr) munmap(map_, map_bytes_);
  if (handle_.memfd >= 0) close(handle_.memfd);
}

void ShmRing::Close() {
  if (control_ == nullptr) return;
  control_->closed.store(1, std::memory_order_seq_cst);
  for (std::atomic<uint32_t>* w : {&control_->data_futex, &control_->space_futex}) {
    w->fetch_add(1, std::memory_order_seq_cst);
    Futex(w, FUTEX_WAKE, INT32_MAX, nullptr);
  }
}

bool ShmRing::closed() const { return control_->closed.load(std::memory_order_acquire) != 0; }

absl::StatusOr<bool> ShmRing::TryWrite(const Tag& tag, absl::string_view prefix, const char* data, size_t bytes) {
  if (closed()) return absl::FailedPreconditionError("the shared-memory ring is closed");
  if (bytes > MaxPayload() || prefix.size() > MaxPayload() - bytes) {
    return absl::InvalidArgumentError(absl::StrCat("a message of ", prefix.size() + bytes,
                                                   " bytes exceeds the ring's limit of ", MaxPayload()));
  }
  const uint64_t tail = control_->tail.load(std::memory_order_acquire);
  if (tail > head_ || head_ - tail > capacity_) {
    Close();
    return absl::DataLossError(absl::StrCat("shared-memory ring: the consumer's position ", tail,
                                            " is impossible against the producer's ", head_));
  }
  tail_ = tail;
  const size_t total = prefix.size() + bytes;
  const size_t need = kHeaderBytes + RoundUp64(total);
  if (capacity_ - (head_ - tail) < need) return false;
  const size_t at = head_ & (capacity_ - 1);
  WireHeader header;
  header.magic = kMessageMagic;
  header.reserved = 0;
  header.payload_bytes = total;
  std::memcpy(header.tag, tag.data(), kTagBytes);
  std::memcpy(data_ + at, &header, sizeof(header));
  // The payload, wrapping at the end of the data area.
  size_t pos = (at + kHeaderBytes) & (capacity_ - 1);
  for (absl::string_view piece : {prefix, absl::string_view(data, bytes)}) {
    const size_t first = std::min(piece.size(), capacity_ - pos);
    if (first > 0) std::memcpy(data_ + pos, piece.data(), first);
    if (piece.size() > first) std::memcpy(data_, piece.data() + first, piece.size() - first);
    pos = (pos + piece.size()) & (capacity_ - 1);
  }
  head_ += need;
  control_->head.store(head_, std::memory_order_release);
  // Dekker with the consumer's announce-then-recheck: either it sees the new
  // head, or this sees its flag.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (control_->consumer_sleeping.load(std::memory_order_relaxed) != 0 &&
      control_->consumer_sleeping.exchange(0, std::memory_order_seq_cst) != 0) {
    control_->data_futex.fetch_add(1, std::memory_order_seq_cst);
    Futex(&control_->data_futex, FUTEX_WAKE, 1, nullptr);
  }
  return true;
}

absl::StatusOr<bool> ShmRing::Peek(Message* message) {
  const uint64_t head = control_->head.load(std::memory_order_acquire);
  if (head == tail_) {
    if (closed()) return absl::FailedPreconditionError("the shared-memory ring is closed");
    return false;
  }
  const uint64_t available = head - tail_;
  if (head < tail_ || available > capacity_ || available < kHeaderBytes) {
    Close();
    return absl::DataLossError(absl::StrCat("shared-memory ring: the producer's position ", head,
                                            " is impossible against the consumer's ", tail_));
  }
  const size_t at = tail_ & (capacity_ - 1);
  WireHeader header;
  std::memcpy(&header, data_ + at, sizeof(header));  // one copy: the peer may change the original
  if (header.magic != kMessageMagic || header.payload_bytes > MaxPayload() ||
      kHeaderBytes + RoundUp64(header.payload_bytes) > available) {
    Close();
    return absl::DataLossError(absl::StrCat("shared-memory ring: malformed message at ", tail_, " (",
                                            header.payload_bytes, " bytes claimed, ", available, " available)"));
  }
  std::memcpy(message->tag.data(), header.tag, kTagBytes);
  message->payload_bytes = header.payload_bytes;
  message->pieces.clear();
  const size_t bytes = header.payload_bytes;
  const size_t payload_at = (at + kHeaderBytes) & (capacity_ - 1);
  const size_t first = std::min(bytes, capacity_ - payload_at);
  if (first > 0) message->pieces.emplace_back(data_ + payload_at, first);
  if (bytes > first) message->pieces.emplace_back(data_, bytes - first);
  return true;
}

void ShmRing::Release(const Message& message) {
  tail_ += kHeaderBytes + RoundUp64(message.payload_bytes);
  control_->tail.store(tail_, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (control_->producer_sleeping.load(std::memory_order_relaxed) != 0 &&
      control_->producer_sleeping.exchange(0, std::memory_order_seq_cst) != 0) {
    control_->space_futex.fetch_add(1, std::memory_order_seq_cst);
    Futex(&control_->space_futex, FUTEX_WAKE, 1, nullptr);
  }
}

bool ShmRing::Ready(bool producer, size_t bytes) const {
  if (control_->closed.load(std::memory_order_acquire) != 0) return true;
  if (producer) {
    const uint64_t tail = control_->tail.load(std::memory_order_acquire);
    // An impossible position counts as ready: TryWrite reports it.
    return tail > head_ || head_ - tail > capacity_ ||
           capacity_ - (head_ - tail) >= kHeaderBytes + RoundUp64(bytes);
  }
  return control_->head.load(std::memory_order_acquire) != tail_;
}

ShmRing::WaitResult ShmRing::WaitForSpace(size_t bytes, int peer_pidfd, absl::Duration spin,
                                          absl::Duration timeout) {
  return Wait(/*producer=*/true, bytes, peer_pidfd, spin, timeout);
}

ShmRing::WaitResult ShmRing::WaitForData(int peer_pidfd, absl::Duration spin, absl::Duration timeout) {
  return Wait(/*producer=*/false, 0, peer_pidfd, spin, timeout);
}

ShmRing::WaitResult ShmRing::Wait(bool producer, size_t bytes, int peer_pidfd, absl::Duration spin,
                                  absl::Duration timeout) {
  auto result = [&]() { return closed() ? WaitResult::kClosed : WaitResult::kReady; };
  if (Ready(producer, bytes)) return result();
  const absl::Time start = absl::Now();
  const absl::Time spin_until = start + spin;
  // Spinning reads only this process's cache line copy until it changes.
  for (int i = 0; spin > absl::ZeroDuration(); ++i) {
    for (int j = 0; j < 64; ++j) {
      if (Ready(producer, bytes)) return result();
      CpuRelax();
    }
    if (absl::Now() >= spin_until) break;
  }
  const absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : start + timeout;
  std::atomic<uint32_t>& sleeping = producer ? control_->producer_sleeping : control_->consumer_sleeping;
  std::atomic<uint32_t>& word = producer ? control_->space_futex : control_->data_futex;
  while (true) {
    const uint32_t seen = word.load(std::memory_order_seq_cst);
    sleeping.store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (Ready(producer, bytes)) {
      sleeping.store(0, std::memory_order_relaxed);
      return result();
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      sleeping.store(0, std::memory_order_relaxed);
      return WaitResult::kTimeout;
    }
    const absl::Duration slice = std::min(deadline - now, kPollInterval);
    const struct timespec ts = absl::ToTimespec(slice);
    Futex(&word, FUTEX_WAIT, seen, &ts);  // EAGAIN when woken before sleeping: fine
    if (Ready(producer, bytes)) {
      sleeping.store(0, std::memory_order_relaxed);
      return result();
    }
    if (peer_pidfd >= 0 && ProcessExited(peer_pidfd)) {
      sleeping.store(0, std::memory_order_relaxed);
      return WaitResult::kPeerGone;
    }
  }
}

int ShmRing::OpenPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

bool ShmRing::ProcessExited(int pidfd) {
  struct pollfd p = {pidfd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;  // a pidfd becomes readable when its process exits
}

}  // namespace weft
