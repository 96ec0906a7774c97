// The collectives through shared-memory rings: one gRPC server per rank on
// 127.0.0.1 (for AttachShm and the network fallback), all in this process,
// which is one host to itself.
#include <unistd.h>

#include <cstring>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_util.h"
#include "common/shm_ring.h"
#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "worker/collective/collective_executor.h"
#include "worker/collective/collective_test_util.h"
#include "worker/collective/grpc_collective_service.h"
#include "worker/collective/grpc_collective_transport.h"
#include "worker/collective/grpc_shm_offerer.h"
#include "worker/collective/shm_collective_transport.h"

namespace weft {
namespace collective {
namespace {

using ::testing::HasSubstr;
using testing::ExpectAllReducesThroughExecutors;
using testing::ExpectNear;
using testing::MakeGroup;
using testing::RandomFloats;
using testing::ReferenceSum;
using testing::RunOnAllRanks;

struct RankOptions {
  bool accept_shm = true;         // register AttachShm's handler
  size_t ring_bytes = 256 << 10;  // small: rings fill up and wrap
  bool reduce_pool = false;       // sum on a pool thread instead of the ring's reader
};

// One rank. Destruction order: executor, shm transport, gRPC transport,
// server, mailbox.
struct ShmRank {
  CollectiveMailbox mailbox;
  GrpcCollectiveService service{&mailbox};
  std::unique_ptr<grpc::Server> server;
  std::string address;
  ThreadPool pool{"reduce", 1};
  std::unique_ptr<GrpcCollectiveTransport> network;
  GrpcShmOfferer offerer;
  std::unique_ptr<ShmCollectiveTransport> shm;
  std::unique_ptr<CollectiveExecutor> executor;

  explicit ShmRank(const RankOptions& o) {
    network = std::make_unique<GrpcCollectiveTransport>();
    ShmCollectiveTransport::Options so;
    so.offerer = &offerer;
    so.ring_bytes = o.ring_bytes;
    shm = std::make_unique<ShmCollectiveTransport>(network.get(), &mailbox, so);
    if (o.accept_shm) {
      service.SetAttachHandler([this](const std::string& caller, const AttachShmRequest& r) {
        return shm->Attach(caller, r);
      });
    }
    grpc::ServerBuilder builder;
    ConfigureServer(&builder);
    ConfigureCollectiveServer(&builder);
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    address = absl::StrCat("127.0.0.1:", port);
    executor = std::make_unique<CollectiveExecutor>(shm.get(), &mailbox,
                                                    CollectiveExecutor::Options{o.reduce_pool ? &pool : nullptr});
  }
  void StopSending() {
    executor.reset();
    shm.reset();
    network.reset();
  }
  ~ShmRank() {
    StopSending();
    if (server != nullptr) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
};

class ShmRanks {
 public:
  ShmRanks(int n, std::vector<std::string>* addresses, const std::vector<RankOptions>& options) {
    for (int r = 0; r < n; ++r) {
      ranks_.push_back(std::make_unique<ShmRank>(options[r % options.size()]));
      addresses->push_back(ranks_.back()->address);
    }
  }
  ~ShmRanks() {
    for (auto& r : ranks_) r->StopSending();
  }
  ShmRank& operator[](int r) { return *ranks_[r]; }

 private:
  std::vector<std::unique_ptr<ShmRank>> ranks_;
};

// All-reduces tensors of awkward sizes on every rank and checks each sum.
void CheckAllReduces(int n, ShmRanks& ranks, const std::vector<std::string>& addresses, size_t chunk_bytes) {
  ExpectAllReducesThroughExecutors(addresses, chunk_bytes, {1, n + 1, 1009, 1 << 20, 3 << 20},
                                   [&](int r) { return ranks[r].executor.get(); });
  if (::testing::Test::HasFatalFailure()) return;
  for (int r = 0; r < n; ++r) EXPECT_EQ(ranks[r].mailbox.NumEntries(), 0u) << r;
}

class ShmAllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmAllReduceTest, MatchesReferenceSumThroughRings) {
  const int n = GetParam();
  std::vector<std::string> addresses;
  ShmRanks ranks(n, &addresses, {RankOptions{}});
  // 64 KiB chunks into 256 KiB rings: the 12 MiB tensors fill every ring
  // many times over, so writers wait for room and payloads wrap.
  CheckAllReduces(n, ranks, addresses, 64 << 10);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(ranks[r].shm->NumShmPeers(), 1) << "rank " << r << " sends to its next rank through a ring";
    EXPECT_EQ(ranks[r].shm->NumIncomingRings(), 1) << "rank " << r << " reads its previous rank's ring";
  }
}

TEST_P(ShmAllReduceTest, SumsOnAPoolThreadFromCopies) {
  const int n = GetParam();
  std::vector<std::string> addresses;
  RankOptions o;
  o.reduce_pool = true;  // chunks outlive the reader's call: each is copied
  ShmRanks ranks(n, &addresses, {o});
  CheckAllReduces(n, ranks, addresses, 64 << 10);
}

TEST_P(ShmAllReduceTest, ChunksOverTheRingsLimitTakeTheNetwork) {
  const int n = GetParam();
  std::vector<std::string> addresses;
  ShmRanks ranks(n, &addresses, {RankOptions{}});
  // 1 MiB chunks do not fit a 256 KiB ring; small tensors' chunks do: both
  // paths carry chunks of one collective.
  CheckAllReduces(n, ranks, addresses, 1 << 20);
}

TEST_P(ShmAllReduceTest, PeersThatRefuseGetEverythingOverTheNetwork) {
  const int n = GetParam();
  std::vector<std::string> addresses;
  RankOptions refuses;
  refuses.accept_shm = false;
  // Every other rank refuses rings: the ring mixes both transports.
  ShmRanks ranks(n, &addresses, {refuses, RankOptions{}});
  CheckAllReduces(n, ranks, addresses, 64 << 10);
  for (int r = 0; r < n; ++r) {
    const bool next_accepts = ((r + 1) % n) % 2 == 1;
    EXPECT_EQ(ranks[r].shm->NumShmPeers(), next_accepts ? 1 : 0) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmAllReduceTest, ::testing::Values(2, 3, 4));

// A RecvTensor reply over half a ring (TrySendThroughRing) goes as parts
// under chunk 0, 1, 2, ... that together are the prefix and the payload.
TEST(ShmMessagePartsTest, AMessageOverHalfARingArrivesAsPartsInOrder) {
  std::vector<std::string> addresses;
  ShmRanks ranks(2, &addresses, {RankOptions{}});
  const Tensor value = RandomFloats(180 << 10, 7, 0);  // 720 KiB through 256 KiB rings
  const std::string prefix = "a header";
  const ChunkKey key = RecvTensorChunkKey(/*pull_id=*/9, /*step_id=*/4);
  auto sent = std::make_shared<absl::Notification>();
  auto sent_status = std::make_shared<absl::Status>(absl::UnknownError("unset"));
  // The first try only offers the ring; the reply would take gRPC.
  bool through_ring = false;
  for (int attempt = 0; attempt < 500 && !through_ring; ++attempt) {
    SendChunk chunk;
    chunk.pin = value;
    chunk.data = static_cast<const char*>(value.raw_data());
    chunk.size = value.TotalBytes();
    chunk.prefix = prefix;
    StatusCallback done = [sent, sent_status](const absl::Status& s) {
      EXPECT_FALSE(sent->HasBeenNotified()) << "done ran twice";
      *sent_status = s;
      sent->Notify();
    };
    through_ring = ranks[0].shm->TrySendThroughRing(addresses[1], "/job:worker/task:1", key, std::move(chunk), done);
    if (!through_ring) {
      EXPECT_NE(done, nullptr) << "done taken by a send that returned false";
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  ASSERT_TRUE(through_ring) << "the ring was never accepted";
  std::string received;
  const size_t max_part = (size_t{256} << 10) / 2 - ShmRing::kHeaderBytes;
  int parts = 0;
  for (bool more = true; more; ++parts) {
    ChunkKey part_key = key;
    part_key.chunk = parts;
    absl::Notification got;
    ranks[1].mailbox.RecvAsync(
        part_key,
        [&](const absl::Status& s, ReceivedChunk c) {
          EXPECT_TRUE(s.ok()) << s;
          EXPECT_LE(c.size(), max_part) << "part " << parts << " is larger than a ring message";
          for (absl::string_view p : c.pieces) received.append(p.data(), p.size());
          got.Notify();
        },
        "");
    ASSERT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(30))) << "part " << parts << " never arrived";
    more = received.size() < prefix.size() + value.TotalBytes();
  }
  EXPECT_EQ(parts, 6) << "720 KiB and a header in parts of at most " << max_part << " bytes";
  ASSERT_EQ(received.size(), prefix.size() + value.TotalBytes());
  EXPECT_EQ(received.substr(0, prefix.size()), prefix);
  EXPECT_EQ(std::memcmp(received.data() + prefix.size(), value.raw_data(), value.TotalBytes()), 0);
  ASSERT_TRUE(sent->WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(sent_status->ok()) << *sent_status;
  EXPECT_EQ(ranks[1].mailbox.NumEntries(), 0u);
}

// AttachShm's checks, called as the service would with an authenticated
// caller.
class AttachTest : public ::testing::Test {
 protected:
  AttachTest() : shm_(&network_, &mailbox_, Options()) {}
  static ShmCollectiveTransport::Options Options() {
    ShmCollectiveTransport::Options o;
    o.max_incoming_rings = 2;
    return o;
  }
  AttachShmRequest RequestFor(const ShmRing& ring) {
    const ShmRing::Handle& h = ring.handle();
    AttachShmRequest r;
    r.set_host_id(ShmHostId());
    r.set_pid(h.pid);
    r.set_memfd(h.memfd);
    r.set_capacity(h.capacity);
    r.set_nonce(reinterpret_cast<const char*>(h.nonce.data()), h.nonce.size());
    return r;
  }
  std::unique_ptr<ShmRing> NewRing() { return std::move(*ShmRing::Create(ShmRing::kMinCapacity)); }
  // Whether the chunk under the zero key, of `bytes` bytes from `sender`,
  // reaches the mailbox.
  bool ChunkArrives(size_t bytes, const std::string& sender) {
    auto got = std::make_shared<absl::Notification>();  // outlives a timed-out wait
    mailbox_.RecvAsync(
        ChunkKey{},
        [got, bytes](const absl::Status& s, ReceivedChunk c) {
          EXPECT_TRUE(s.ok()) << s;
          EXPECT_EQ(c.size(), bytes);
          got->Notify();
        },
        sender);
    return got->WaitForNotificationWithTimeout(absl::Seconds(30));
  }

  CollectiveMailbox mailbox_;
  GrpcCollectiveTransport network_;
  ShmCollectiveTransport shm_;
};

TEST_F(AttachTest, AcceptsARingOfThisHost) {
  auto ring = NewRing();
  auto attached = shm_.Attach("/job:worker/task:1", RequestFor(*ring));
  ASSERT_TRUE(attached.ok()) << attached.status();
  EXPECT_EQ(attached->pid(), getpid());
  EXPECT_EQ(shm_.NumIncomingRings(), 1);
  // A chunk through it lands in the mailbox under the caller's name.
  ShmRing::Tag tag{};
  ASSERT_TRUE(*ring->TryWrite(tag, "abcd", 4));
  EXPECT_TRUE(ChunkArrives(4, "/job:worker/task:1"));
}

TEST_F(AttachTest, ChunksWrittenJustBeforeTheSenderClosesArrive) {
  auto ring = NewRing();
  ASSERT_TRUE(shm_.Attach("/job:worker/task:1", RequestFor(*ring)).ok());
  absl::SleepFor(absl::Milliseconds(50));  // the reader has gone to sleep on the empty ring
  // The last chunk of a collective, then the sender shuts down at once.
  ShmRing::Tag tag{};
  ASSERT_TRUE(*ring->TryWrite(tag, "last", 4));
  ring->Close();
  EXPECT_TRUE(ChunkArrives(4, "/job:worker/task:1")) << "a chunk written before Close was dropped";
}

TEST_F(AttachTest, RefusesAnotherHost) {
  auto ring = NewRing();
  AttachShmRequest r = RequestFor(*ring);
  r.set_host_id("another-boot/net:1/pid:1");
  auto refused = shm_.Attach("/job:worker/task:1", r);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("another host"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("task /job:worker/task:1"));
}

TEST_F(AttachTest, RefusesARingThatIsNotTheOneAnnounced) {
  auto ring = NewRing();
  AttachShmRequest short_nonce = RequestFor(*ring);
  short_nonce.set_nonce("abc");
  EXPECT_EQ(shm_.Attach("t", short_nonce).status().code(), absl::StatusCode::kInvalidArgument);

  AttachShmRequest wrong_nonce = RequestFor(*ring);
  std::string nonce = wrong_nonce.nonce();
  nonce[3] ^= 0x10;
  wrong_nonce.set_nonce(nonce);
  EXPECT_EQ(shm_.Attach("t", wrong_nonce).status().code(), absl::StatusCode::kPermissionDenied);

  AttachShmRequest huge = RequestFor(*ring);
  huge.set_capacity(uint64_t{1} << 40);
  EXPECT_EQ(shm_.Attach("t", huge).status().code(), absl::StatusCode::kInvalidArgument);

  AttachShmRequest no_process = RequestFor(*ring);
  no_process.set_pid(0);
  EXPECT_EQ(shm_.Attach("t", no_process).status().code(), absl::StatusCode::kFailedPrecondition);

  AttachShmRequest not_a_ring = RequestFor(*ring);
  not_a_ring.set_memfd(0);  // stdin
  EXPECT_FALSE(shm_.Attach("t", not_a_ring).ok());
  EXPECT_EQ(shm_.NumIncomingRings(), 0);
}

TEST_F(AttachTest, RefusesRingsBeyondTheLimit) {
  auto a = NewRing(), b = NewRing(), c = NewRing();
  ASSERT_TRUE(shm_.Attach("t", RequestFor(*a)).ok());
  ASSERT_TRUE(shm_.Attach("t", RequestFor(*b)).ok());
  auto refused = shm_.Attach("t", RequestFor(*c));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  // A ring whose producer closed it frees its place.
  a->Close();
  for (int i = 0; i < 3000 && shm_.NumIncomingRings() > 1; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(shm_.Attach("t", RequestFor(*c)).ok());
}

// A RecvTensor request through a ring goes to the request handler under
// the ring's authenticated sender, never to the mailbox.
TEST_F(AttachTest, ARequestGoesToTheHandlerUnderTheRingsSender) {
  struct Got {
    absl::Notification done;
    std::string sender, request;
    ChunkKey key;
  };
  auto got = std::make_shared<Got>();
  shm_.SetRequestHandler([got](const std::string& sender, const ChunkKey& key, std::string request) {
    got->sender = sender;
    got->key = key;
    got->request = std::move(request);
    got->done.Notify();
  });
  auto ring = NewRing();
  ASSERT_TRUE(shm_.Attach("/job:worker/task:1", RequestFor(*ring)).ok());
  // Attached, but nothing has come through yet: its sender may not know.
  EXPECT_FALSE(shm_.HasRingFrom("/job:worker/task:1"));
  ASSERT_TRUE(*ring->TryWrite(EncodeChunkTag(RecvTensorRequestChunkKey(7, 3)), "request", 7));
  ASSERT_TRUE(got->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(shm_.HasRingFrom("/job:worker/task:1"));
  EXPECT_FALSE(shm_.HasRingFrom("/job:worker/task:2"));
  EXPECT_EQ(got->sender, "/job:worker/task:1");
  EXPECT_EQ(got->key, RecvTensorRequestChunkKey(7, 3));
  EXPECT_EQ(got->request, "request");
  EXPECT_EQ(mailbox_.NumEntries(), 0u);
}

// A request over the limit, or one this task cannot serve (no handler), is
// a peer's fault: its ring closes, so the requester's writes fail.
TEST_F(AttachTest, ARequestTooLargeOrUnservedClosesItsRing) {
  int handled = 0;
  for (bool with_handler : {true, false}) {
    SCOPED_TRACE(with_handler ? "too large" : "no handler");
    ShmCollectiveTransport shm(&network_, &mailbox_, Options());
    if (with_handler) shm.SetRequestHandler([&](const std::string&, const ChunkKey&, std::string) { ++handled; });
    auto ring = NewRing();
    ASSERT_TRUE(shm.Attach("/job:worker/task:1", RequestFor(*ring)).ok());
    const std::string request(with_handler ? kMaxRecvTensorRequestBytes + 1 : 10, 'r');
    ASSERT_TRUE(*ring->TryWrite(EncodeChunkTag(RecvTensorRequestChunkKey(1, 1)), request.data(), request.size()));
    for (int i = 0; i < 3000 && shm.NumIncomingRings() > 0; ++i) absl::SleepFor(absl::Milliseconds(10));
    EXPECT_EQ(shm.NumIncomingRings(), 0);
    EXPECT_FALSE(shm.HasRingFrom("/job:worker/task:1"));
    EXPECT_FALSE(ring->TryWrite(ShmRing::Tag{}, "more", 4).ok()) << "the requester can still write";
  }
  EXPECT_EQ(handled, 0);
}

// The ring from a task closing (it exited) fails the RecvTensor replies
// still awaited from that task with UNAVAILABLE naming it; a collective's
// receive keeps waiting.
TEST_F(AttachTest, ARingThatClosesFailsTheRepliesAwaitedThroughIt) {
  auto ring = NewRing();
  ASSERT_TRUE(shm_.Attach("/job:ps/task:0", RequestFor(*ring)).ok());
  auto reply = std::make_shared<absl::Notification>();
  auto reply_status = std::make_shared<absl::Status>();
  mailbox_.RecvAsync(
      RecvTensorChunkKey(4, 2),
      [reply, reply_status](const absl::Status& s, ReceivedChunk) {
        *reply_status = s;
        reply->Notify();
      },
      "/job:ps/task:0");
  bool chunk_called = false;
  mailbox_.RecvAsync(ChunkKey{5, 1, 2, 0, 0, 0}, [&](const absl::Status&, ReceivedChunk) { chunk_called = true; },
                     "/job:ps/task:0");
  ring->Close();
  ASSERT_TRUE(reply->WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(reply_status->code(), absl::StatusCode::kUnavailable) << *reply_status;
  EXPECT_THAT(std::string(reply_status->message()), HasSubstr("/job:ps/task:0"));
  EXPECT_FALSE(chunk_called);
  mailbox_.CleanupStep(2);  // fails the collective's receive while `chunk_called` lives
  EXPECT_TRUE(chunk_called);
}

// The service refuses callers that are not cluster members before the
// handler sees anything; that check is grpc_collective_test's (Exchange) and
// the secure-cluster tests'. Here: without a handler, AttachShm is refused
// and a sender keeps to the network (PeersThatRefuse... above).

}  // namespace
}  // namespace collective
}  // namespace weft
