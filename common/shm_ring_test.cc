#include "common/shm_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

constexpr size_t kCapacity = ShmRing::kMinCapacity;

ShmRing::Tag TagOf(const std::string& s) {
  ShmRing::Tag tag{};
  std::memcpy(tag.data(), s.data(), std::min(s.size(), tag.size()));
  return tag;
}

std::string Joined(const ShmRing::Message& m) {
  std::string out;
  for (absl::string_view p : m.pieces) out.append(p.data(), p.size());
  return out;
}

struct Pair {
  std::unique_ptr<ShmRing> producer;
  std::unique_ptr<ShmRing> consumer;
};

Pair MakePair(size_t capacity = kCapacity) {
  Pair p;
  auto producer = ShmRing::Create(capacity);
  EXPECT_TRUE(producer.ok()) << producer.status();
  p.producer = std::move(*producer);
  auto consumer = ShmRing::Open(p.producer->handle(), "test producer");
  EXPECT_TRUE(consumer.ok()) << consumer.status();
  p.consumer = std::move(*consumer);
  return p;
}

TEST(ShmRingTest, MessagesArriveInOrderAcrossTheWrap) {
  Pair p = MakePair();
  // Messages of odd sizes go round the ring several times, so payloads
  // wrap at many offsets.
  size_t sent_bytes = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string payload(1000 + 37 * i, static_cast<char>('a' + i % 26));
    auto wrote = p.producer->TryWrite(TagOf(absl::StrCat("m", i)), payload.data(), payload.size());
    ASSERT_TRUE(wrote.ok()) << wrote.status();
    ASSERT_TRUE(*wrote) << i;
    sent_bytes += payload.size();
    ShmRing::Message m;
    auto got = p.consumer->Peek(&m);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(*got);
    EXPECT_EQ(std::string(m.tag.data(), absl::StrCat("m", i).size()), absl::StrCat("m", i));
    EXPECT_EQ(Joined(m), payload) << i;
    p.consumer->Release(m);
  }
  EXPECT_GT(sent_bytes, 3 * kCapacity);
  ShmRing::Message m;
  EXPECT_FALSE(*p.consumer->Peek(&m));
}

TEST(ShmRingTest, AFullRingRefusesUntilReleased) {
  Pair p = MakePair();
  const std::string payload(p.producer->MaxPayload(), 'x');
  EXPECT_TRUE(*p.producer->TryWrite(TagOf("a"), payload.data(), payload.size()));
  EXPECT_TRUE(*p.producer->TryWrite(TagOf("b"), payload.data(), payload.size()));
  EXPECT_FALSE(*p.producer->TryWrite(TagOf("c"), "y", 1));
  ShmRing::Message m;
  ASSERT_TRUE(*p.consumer->Peek(&m));
  p.consumer->Release(m);
  EXPECT_TRUE(*p.producer->TryWrite(TagOf("c"), "y", 1));
  auto too_big = p.producer->TryWrite(TagOf("d"), payload.data(), payload.size() + 1);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShmRingTest, WaitersWakeAcrossThreads) {
  Pair p = MakePair();
  constexpr int kMessages = 2000;
  std::thread consumer([&] {
    for (int i = 0; i < kMessages; ++i) {
      ShmRing::Message m;
      while (true) {
        auto got = p.consumer->Peek(&m);
        ASSERT_TRUE(got.ok()) << got.status();
        if (*got) break;
        // No spinning: every wait sleeps on the futex.
        ASSERT_EQ(p.consumer->WaitForData(-1, absl::ZeroDuration(), absl::Seconds(30)),
                  ShmRing::WaitResult::kReady);
      }
      ASSERT_EQ(m.payload_bytes, 4096u + i % 7);
      EXPECT_EQ(Joined(m)[0], static_cast<char>(i % 100));
      p.consumer->Release(m);
    }
  });
  std::string payload(4096 + 6, 0);
  for (int i = 0; i < kMessages; ++i) {
    payload[0] = static_cast<char>(i % 100);
    while (true) {
      auto wrote = p.producer->TryWrite(TagOf("x"), payload.data(), 4096 + i % 7);
      ASSERT_TRUE(wrote.ok()) << wrote.status();
      if (*wrote) break;
      ASSERT_EQ(p.producer->WaitForSpace(4096 + i % 7, -1, absl::ZeroDuration(), absl::Seconds(30)),
                ShmRing::WaitResult::kReady);
    }
  }
  consumer.join();
}

TEST(ShmRingTest, CloseWakesASleeper) {
  Pair p = MakePair();
  std::thread closer([&] { p.producer->Close(); });
  EXPECT_EQ(p.consumer->WaitForData(-1, absl::ZeroDuration(), absl::InfiniteDuration()),
            ShmRing::WaitResult::kClosed);
  closer.join();
  ShmRing::Message m;
  EXPECT_EQ(p.consumer->Peek(&m).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(p.producer->TryWrite(TagOf("a"), "a", 1).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ShmRingTest, TimeoutWithoutData) {
  Pair p = MakePair();
  EXPECT_EQ(p.consumer->WaitForData(-1, absl::Microseconds(10), absl::Milliseconds(1)),
            ShmRing::WaitResult::kTimeout);
}

TEST(ShmRingTest, APeerThatExitsIsNoticed) {
  Pair p = MakePair();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  const int pidfd = ShmRing::OpenPidfd(child);
  ASSERT_GE(pidfd, 0);
  // Not reaped yet: a zombie has exited all the same.
  EXPECT_EQ(p.consumer->WaitForData(pidfd, absl::ZeroDuration(), absl::Seconds(30)),
            ShmRing::WaitResult::kPeerGone);
  close(pidfd);
  int status = 0;
  waitpid(child, &status, 0);
}

// The producer is the peer here: whatever it writes into the shared memory,
// the consumer reports DATA_LOSS and never reads outside the mapping.
TEST(ShmRingTest, ACorruptProducerIsDataLoss) {
  for (int variant = 0; variant < 3; ++variant) {
    Pair p = MakePair();
    ASSERT_TRUE(*p.producer->TryWrite(TagOf("a"), "hello", 5));
    // Reach the shared memory as the peer would: its own mapping.
    void* raw = mmap(nullptr, 4096 + kCapacity, PROT_READ | PROT_WRITE, MAP_SHARED, p.producer->handle().memfd, 0);
    ASSERT_NE(raw, MAP_FAILED);
    auto* bytes = static_cast<char*>(raw);
    if (variant == 0) {
      uint64_t head = uint64_t{1} << 40;  // far beyond the capacity
      std::memcpy(bytes + 64, &head, sizeof(head));
    } else if (variant == 1) {
      uint64_t huge = uint64_t{1} << 62;  // a payload length past the ring
      std::memcpy(bytes + 4096 + 8, &huge, sizeof(huge));
    } else {
      std::memset(bytes + 4096, 0x5a, 4);  // the message magic
    }
    ShmRing::Message m;
    auto got = p.consumer->Peek(&m);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << variant;
    EXPECT_TRUE(p.consumer->closed());
    munmap(raw, 4096 + kCapacity);
  }
}

TEST(ShmRingTest, ACorruptConsumerIsDataLoss) {
  Pair p = MakePair();
  void* raw = mmap(nullptr, 4096 + kCapacity, PROT_READ | PROT_WRITE, MAP_SHARED, p.producer->handle().memfd, 0);
  ASSERT_NE(raw, MAP_FAILED);
  uint64_t tail = 12345;  // released bytes that were never written
  std::memcpy(static_cast<char*>(raw) + 128, &tail, sizeof(tail));
  auto wrote = p.producer->TryWrite(TagOf("a"), "a", 1);
  EXPECT_EQ(wrote.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(wrote.status().message()), HasSubstr("consumer's position"));
  munmap(raw, 4096 + kCapacity);
}

TEST(ShmRingTest, OpenRefusesWhatIsNotTheAnnouncedRing) {
  auto producer = ShmRing::Create(kCapacity);
  ASSERT_TRUE(producer.ok());
  ShmRing::Handle h = (*producer)->handle();

  ShmRing::Handle wrong_nonce = h;
  wrong_nonce.nonce[0] ^= 1;
  EXPECT_EQ(ShmRing::Open(wrong_nonce, "p").status().code(), absl::StatusCode::kPermissionDenied);

  ShmRing::Handle wrong_size = h;
  wrong_size.capacity = kCapacity * 2;
  EXPECT_EQ(ShmRing::Open(wrong_size, "p").status().code(), absl::StatusCode::kInvalidArgument);

  ShmRing::Handle odd_size = h;
  odd_size.capacity = kCapacity + 64;
  EXPECT_EQ(ShmRing::Open(odd_size, "p").status().code(), absl::StatusCode::kInvalidArgument);

  ShmRing::Handle no_such_fd = h;
  no_such_fd.memfd = 1 << 20;
  EXPECT_EQ(ShmRing::Open(no_such_fd, "p").status().code(), absl::StatusCode::kFailedPrecondition);

  // A memfd of the right size that is not sealed: its owner could shrink it
  // under the consumer's mapping.
  int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, 4096 + kCapacity), 0);
  ShmRing::Handle not_sealed = h;
  not_sealed.memfd = unsealed;
  auto refused = ShmRing::Open(not_sealed, "p");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("sealed"));
  close(unsealed);

  // A regular descriptor that is not a memfd at all.
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  ShmRing::Handle not_memfd = h;
  not_memfd.memfd = devnull;
  EXPECT_FALSE(ShmRing::Open(not_memfd, "p").ok());
  close(devnull);

  EXPECT_TRUE(ShmRing::Open(h, "p").ok());
}

}  // namespace
}  // namespace weft
