#include "worker/collective/collective_mailbox.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace weft {
namespace collective {
namespace {

ReceivedChunk Chunk(const std::string& bytes) {
  auto owner = std::make_shared<std::string>(bytes);
  ReceivedChunk c;
  c.pieces.emplace_back(*owner);
  c.owner = owner;
  return c;
}

ChunkKey Key(int64_t step, int round, int chunk = 0) { return ChunkKey{1, 2, step, round, chunk, 0}; }

TEST(CollectiveMailboxTest, AForgedChunkNeverTakesTheExpectedSendersPlace) {
  CollectiveMailbox mailbox(/*check_senders=*/true);
  const std::string real = "/job:worker/task:1", forger = "/job:worker/task:2";
  // Forged first, under the very key the collective waits on: it is kept
  // apart and the receive still waits for the real sender.
  EXPECT_TRUE(mailbox.Deliver(Key(1, 0), Chunk("forged"), forger).ok());
  std::string got;
  mailbox.RecvAsync(
      Key(1, 0),
      [&](const absl::Status& s, ReceivedChunk c) {
        ASSERT_TRUE(s.ok()) << s;
        got = std::string(c.pieces[0]);
      },
      real);
  EXPECT_EQ(got, "");
  EXPECT_TRUE(mailbox.Deliver(Key(1, 0), Chunk("real"), real).ok());
  EXPECT_EQ(got, "real");
  // A forged chunk after the real one: dropped at the step's cleanup.
  EXPECT_TRUE(mailbox.Deliver(Key(1, 1), Chunk("forged again"), forger).ok());
  mailbox.CleanupStep(1);
  EXPECT_EQ(mailbox.NumEntries(), 0u);
}

// A sender's transport closing fails the receives of one group that wait
// on that sender, and nothing else; a later receive still waits.
TEST(CollectiveMailboxTest, AbortReceivesFromFailsOneSendersWaitersInOneGroup) {
  CollectiveMailbox mailbox(/*check_senders=*/true);
  const std::string gone = "/job:ps/task:0", other = "/job:worker/task:1";
  const ChunkKey reply{-1, 7, 3, 0, 0, 0}, other_reply{-1, 8, 3, 0, 0, 0}, chunk{5, 1, 3, 0, 0, 0};
  const absl::Status waiting = absl::UnknownError("still waiting");
  absl::Status reply_status = waiting, other_status = waiting, chunk_status = waiting;
  auto record = [](absl::Status* out) { return [out](const absl::Status& s, ReceivedChunk) { *out = s; }; };
  mailbox.RecvAsync(reply, record(&reply_status), gone);
  mailbox.RecvAsync(other_reply, record(&other_status), other);
  mailbox.RecvAsync(chunk, record(&chunk_status), gone);
  mailbox.AbortReceivesFrom(gone, -1, absl::UnavailableError("ring from /job:ps/task:0 closed"));
  EXPECT_EQ(reply_status.code(), absl::StatusCode::kUnavailable) << reply_status;
  EXPECT_EQ(other_status, waiting);
  EXPECT_EQ(chunk_status, waiting);
  EXPECT_EQ(mailbox.NumEntries(), 2u);
  // Nothing remembered: a new receive from the same sender is served.
  const ChunkKey later{-1, 9, 3, 0, 0, 0};
  absl::Status later_status = waiting;
  mailbox.RecvAsync(later, record(&later_status), gone);
  EXPECT_TRUE(mailbox.Deliver(later, Chunk("reply"), gone).ok());
  EXPECT_TRUE(later_status.ok()) << later_status;
  mailbox.CleanupStep(3);
  EXPECT_EQ(mailbox.NumEntries(), 0u);
}

TEST(CollectiveMailboxTest, WithoutSenderChecksSendersAreIgnored) {
  CollectiveMailbox mailbox;  // insecure clusters: no identities to compare
  EXPECT_TRUE(mailbox.Deliver(Key(1, 0), Chunk("x"), "").ok());
  bool got = false;
  mailbox.RecvAsync(Key(1, 0), [&](const absl::Status& s, ReceivedChunk) { got = s.ok(); }, "/job:worker/task:1");
  EXPECT_TRUE(got);
}

TEST(CollectiveMailboxTest, DeliverThenReceiveAndReceiveThenDeliver) {
  CollectiveMailbox mailbox;
  EXPECT_TRUE(mailbox.Deliver(Key(1, 0), Chunk("early")).ok());
  std::string got;
  mailbox.RecvAsync(Key(1, 0), [&](const absl::Status& s, ReceivedChunk c) {
    ASSERT_TRUE(s.ok()) << s;
    got = std::string(c.pieces[0]);
  });
  EXPECT_EQ(got, "early");
  mailbox.RecvAsync(Key(1, 1), [&](const absl::Status& s, ReceivedChunk c) {
    ASSERT_TRUE(s.ok()) << s;
    got = std::string(c.pieces[0]);
  });
  EXPECT_EQ(mailbox.NumEntries(), 1u);
  EXPECT_TRUE(mailbox.Deliver(Key(1, 1), Chunk("late")).ok());
  EXPECT_EQ(got, "late");
  EXPECT_EQ(mailbox.NumEntries(), 0u);
}

TEST(CollectiveMailboxTest, AbortStepWakesWaitersDropsChunksUntilCleanup) {
  CollectiveMailbox mailbox;
  absl::Status woken;
  mailbox.RecvAsync(Key(5, 0), [&](const absl::Status& s, ReceivedChunk) { woken = s; });
  EXPECT_TRUE(mailbox.Deliver(Key(5, 1), Chunk("x")).ok());
  EXPECT_TRUE(mailbox.Deliver(Key(6, 0), Chunk("other step")).ok());
  mailbox.AbortStep(5, absl::AbortedError("step 5 failed on task 3"));
  EXPECT_EQ(woken.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(woken.message(), "step 5 failed on task 3");

  EXPECT_TRUE(mailbox.Deliver(Key(5, 2), Chunk("late arrival")).ok());  // dropped
  absl::Status later;
  mailbox.RecvAsync(Key(5, 3), [&](const absl::Status& s, ReceivedChunk) { later = s; });
  EXPECT_EQ(later.code(), absl::StatusCode::kAborted);

  // Step 6 is untouched.
  bool got6 = false;
  mailbox.RecvAsync(Key(6, 0), [&](const absl::Status& s, ReceivedChunk) { got6 = s.ok(); });
  EXPECT_TRUE(got6);

  EXPECT_EQ(mailbox.NumEntries(), 1u);  // the remembered abort
  mailbox.CleanupStep(5);
  EXPECT_EQ(mailbox.NumEntries(), 0u);
}

TEST(CollectiveMailboxTest, AbortCollectiveLeavesOtherCollectivesAlone) {
  CollectiveMailbox mailbox;
  absl::Status a, b;
  bool b_called = false;
  mailbox.RecvAsync(ChunkKey{1, 2, 9, 0, 0, 0}, [&](const absl::Status& s, ReceivedChunk) { a = s; });
  mailbox.RecvAsync(ChunkKey{1, 3, 9, 0, 0, 0}, [&](const absl::Status& s, ReceivedChunk) {
    b = s;
    b_called = true;
  });
  mailbox.AbortCollective(ChunkKey{1, 2, 9, 5, 5, 5}, absl::DeadlineExceededError("late"));
  EXPECT_EQ(a.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(b_called);
  EXPECT_TRUE(mailbox.Deliver(ChunkKey{1, 3, 9, 0, 0, 0}, Chunk("y")).ok());
  EXPECT_TRUE(b_called);
  EXPECT_TRUE(b.ok());
  mailbox.CleanupStep(9);
  EXPECT_EQ(mailbox.NumEntries(), 0u);
}

TEST(CollectiveMailboxTest, AbortCoversEverythingUntilReset) {
  CollectiveMailbox mailbox;
  absl::Status s1, s2;
  mailbox.RecvAsync(Key(1, 0), [&](const absl::Status& s, ReceivedChunk) { s1 = s; });
  mailbox.Abort(absl::CancelledError("shutting down"));
  EXPECT_EQ(s1.code(), absl::StatusCode::kCancelled);
  mailbox.RecvAsync(Key(2, 0), [&](const absl::Status& s, ReceivedChunk) { s2 = s; });
  EXPECT_EQ(s2.code(), absl::StatusCode::kCancelled);
  mailbox.Reset();
  EXPECT_TRUE(mailbox.Deliver(Key(3, 0), Chunk("z")).ok());
  EXPECT_EQ(mailbox.NumEntries(), 1u);
}


TEST(CollectiveMailboxTest, UnsolicitedChunksBeyondTheQuotaAreRefused) {
  CollectiveMailbox mailbox(/*check_senders=*/false, /*max_buffered_bytes=*/10);
  EXPECT_TRUE(mailbox.Deliver(Key(1, 0, 0), Chunk("123456")).ok());
  EXPECT_EQ(mailbox.BufferedBytes(), 6u);
  absl::Status refused = mailbox.Deliver(Key(1, 0, 1), Chunk("12345"));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(std::string(refused.message()).find("--max_pending_collective_bytes"), std::string::npos) << refused;
  EXPECT_EQ(mailbox.BufferedBytes(), 6u);  // nothing of the refused chunk kept
  EXPECT_EQ(mailbox.NumEntries(), 1u);
  // A chunk larger than the whole quota is refused even into an empty mailbox.
  CollectiveMailbox small(false, 4);
  EXPECT_EQ(small.Deliver(Key(1, 0), Chunk("12345")).code(), absl::StatusCode::kResourceExhausted);

  // A chunk whose receive waits is never buffered, so never refused.
  std::string got;
  mailbox.RecvAsync(Key(1, 0, 2), [&](const absl::Status& s, ReceivedChunk c) {
    ASSERT_TRUE(s.ok()) << s;
    for (absl::string_view p : c.pieces) got.append(p.data(), p.size());
  });
  EXPECT_TRUE(mailbox.Deliver(Key(1, 0, 2), Chunk("abcdefghijkl")).ok());
  EXPECT_EQ(got, "abcdefghijkl");

  // Taking the buffered chunk frees its bytes: the refused one now fits.
  mailbox.RecvAsync(Key(1, 0, 0), [](const absl::Status& s, ReceivedChunk) { EXPECT_TRUE(s.ok()) << s; });
  EXPECT_EQ(mailbox.BufferedBytes(), 0u);
  EXPECT_TRUE(mailbox.Deliver(Key(1, 0, 1), Chunk("12345")).ok());
  EXPECT_EQ(mailbox.BufferedBytes(), 5u);
  // So does dropping a step.
  mailbox.CleanupStep(1);
  EXPECT_EQ(mailbox.BufferedBytes(), 0u);
}

}  // namespace
}  // namespace collective
}  // namespace weft
