#include "runtime/summary_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/crc32c.h"
#include "common/env.h"
#include "common/fault_injecting_env.h"
#include "gtest/gtest.h"
#include "proto/event.pb.h"
#include "runtime/data/tfrecord.h"

// Counts heap allocations made while `g_counting` is set, so a test can check
// that a step's record reuses the writer's buffers.
namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// Not inlined, so that the compiler does not pair a free() it sees with the
// operator new of a call site (-Wmismatched-new-delete).
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace weft {
namespace {

// The test's own masking, written from the TFRecord format rather than taken
// from common/crc32c.h, so the two are checked against each other.
uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t LE(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[at + i]);
  return v;
}

// A clock the test sets; files go to the real file system.
class ClockEnv : public EnvWrapper {
 public:
  ClockEnv() : EnvWrapper(Env::Default()) {}
  int64_t NowMicros() override { return now_micros; }
  int64_t now_micros = 1700000000123456;
};

std::string FreshDir(const std::string& name) {
  static int counter = 0;
  return JoinPath(::testing::TempDir(), absl::StrCat("summary-", name, "-", ::getpid(), "-", counter++));
}

// Splits an event file into its records, checking the framing and both CRCs
// of every record with the test's own arithmetic. Stops at the first record
// that does not check, reporting it in `*error`.
std::vector<std::string> SplitRecords(const std::string& bytes, std::string* error) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) {
      *error = absl::StrCat("truncated header at ", at);
      return records;
    }
    const uint64_t length = LE(bytes, at, 8);
    if (LE(bytes, at + 8, 4) != Mask(Crc32c(bytes.data() + at, 8))) {
      *error = absl::StrCat("length CRC mismatch at ", at);
      return records;
    }
    if (bytes.size() - at - 12 < length + 4) {
      *error = absl::StrCat("truncated record at ", at);
      return records;
    }
    const std::string data = bytes.substr(at + 12, length);
    if (LE(bytes, at + 12 + length, 4) != Mask(Crc32c(data.data(), data.size()))) {
      *error = absl::StrCat("data CRC mismatch at ", at);
      return records;
    }
    records.push_back(data);
    at += 12 + length + 4;
  }
  return records;
}

std::vector<Event> ReadEvents(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(Env::Default(), path);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  std::string error;
  std::vector<Event> events;
  for (const std::string& r : SplitRecords(bytes.value_or(""), &error)) {
    Event e;
    EXPECT_TRUE(e.ParseFromString(r));
    events.push_back(e);
  }
  EXPECT_EQ(error, "");
  return events;
}

TEST(SummaryWriterTest, WritesTheFileVersionThenOneEventPerStep) {
  ClockEnv env;
  const std::string dir = FreshDir("basic");
  auto writer = SummaryWriter::Create(dir, &env);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::string path = (*writer)->path();
  EXPECT_EQ(DirName(path), dir);
  EXPECT_TRUE(absl::StartsWith(BaseName(path), "events.out.tfevents.1700000000.")) << path;
  env.now_micros += 2500000;
  ASSERT_TRUE((*writer)->WriteScalars(10, {{"train/loss", 0.75f}, {"train/learning_rate", 0.01f}}).ok());
  ASSERT_TRUE((*writer)->WriteScalars(20, {{"train/loss", 0.5f}}).ok());
  ASSERT_TRUE((*writer)->WriteScalars(30, {}).ok());  // nothing to write

  // Flushed after each step: the records are in the file before Close.
  std::vector<Event> events = ReadEvents(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].what_case(), Event::kFileVersion);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_DOUBLE_EQ(events[0].wall_time(), 1700000000.123456);
  EXPECT_EQ(events[1].step(), 10);
  EXPECT_DOUBLE_EQ(events[1].wall_time(), 1700000002.623456);
  ASSERT_EQ(events[1].what_case(), Event::kSummary);
  ASSERT_EQ(events[1].summary().value_size(), 2);
  EXPECT_EQ(events[1].summary().value(0).tag(), "train/loss");
  EXPECT_EQ(events[1].summary().value(0).simple_value(), 0.75f);
  EXPECT_EQ(events[1].summary().value(1).tag(), "train/learning_rate");
  EXPECT_EQ(events[1].summary().value(1).simple_value(), 0.01f);
  EXPECT_EQ(events[2].step(), 20);
  ASSERT_EQ(events[2].summary().value_size(), 1);  // the earlier step's second value is not carried over
  EXPECT_EQ(events[2].summary().value(0).simple_value(), 0.5f);
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_EQ((*writer)->WriteScalars(40, {{"x", 1}}).code(), absl::StatusCode::kFailedPrecondition);

  // The project's TFRecord reader agrees with the framing.
  auto reader = data::TFRecordReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::string record;
  int n = 0;
  for (;;) {
    absl::StatusOr<bool> more = (*reader)->ReadRecord(&record);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ++n;
  }
  EXPECT_EQ(n, 3);

  // Private, like every file and directory weft writes.
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

// The bytes TensorFlow's tensorflow.Event encoding gives, built by hand from
// its field numbers: TensorBoard decodes weft's records as its own.
TEST(SummaryWriterTest, EventsAreWireCompatibleWithTensorFlow) {
  Event e;
  e.set_wall_time(1.5);
  e.set_step(7);
  Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag("a");
  v->set_simple_value(2.0f);
  const std::string want = std::string("\x09\x00\x00\x00\x00\x00\x00\xf8\x3f", 9) +  // 1: double 1.5
                           std::string("\x10\x07", 2) +                              // 2: varint 7
                           std::string("\x2a\x0a", 2) +                              // 5: Summary, 10 bytes
                           std::string("\x0a\x08", 2) +                              //   1: Value, 8 bytes
                           std::string("\x0a\x01" "a", 3) +                          //     1: tag "a"
                           std::string("\x15\x00\x00\x00\x40", 5);                   //     2: float 2.0
  EXPECT_EQ(e.SerializeAsString(), want);
  Event version;
  version.set_file_version("brain.Event:2");
  EXPECT_EQ(version.SerializeAsString(), std::string("\x1a\x0d" "brain.Event:2", 15));  // 3: string
}

TEST(SummaryWriterTest, ACorruptedCrcIsDetected) {
  ClockEnv env;
  auto writer = SummaryWriter::Create(FreshDir("corrupt"), &env);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::string path = (*writer)->path();
  ASSERT_TRUE((*writer)->WriteScalars(1, {{"train/loss", 1.25f}}).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  const std::string good = ReadFileToString(Env::Default(), path).value();
  const size_t second = 12 + LE(good, 0, 8) + 4;  // where the step's record starts

  struct Case {
    size_t offset;     // the byte flipped
    const char* want;  // what the test's own check says
  } cases[] = {
      {second + 12 + 3, "data CRC mismatch"},         // inside the Event
      {good.size() - 1, "data CRC mismatch"},         // the stored data CRC
      {second + 9, "length CRC mismatch"},            // the stored length CRC
      {second, "length CRC mismatch"},                // the length itself
  };
  for (const Case& c : cases) {
    std::string bad = good;
    bad[c.offset] ^= 0x20;
    const std::string bad_path = path + ".bad";
    ASSERT_TRUE(WriteFileAtomically(Env::Default(), bad_path, {bad}).ok());
    std::string error;
    EXPECT_EQ(SplitRecords(bad, &error).size(), 1u) << c.offset;  // the file_version record still checks
    EXPECT_TRUE(absl::StrContains(error, c.want)) << c.offset << ": " << error;
    auto reader = data::TFRecordReader::Open(bad_path);
    ASSERT_TRUE(reader.ok());
    std::string record;
    ASSERT_TRUE((*reader)->ReadRecord(&record).ok());
    absl::StatusOr<bool> more = (*reader)->ReadRecord(&record);
    EXPECT_EQ(more.status().code(), absl::StatusCode::kDataLoss) << c.offset;
  }
}

TEST(SummaryWriterTest, AFailedWriteNamesTheFileAndIsSticky) {
  FaultInjectingEnv env(Env::Default());
  auto writer = SummaryWriter::Create(FreshDir("fault"), &env);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::string path = (*writer)->path();
  FaultInjectingEnv::Faults f;
  f.fail_append_at = 1;
  f.append_errno = ENOSPC;
  env.SetFaults(f);
  absl::Status s = (*writer)->WriteScalars(1, {{"train/loss", 1}});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
  env.ClearFaults();
  s = (*writer)->WriteScalars(2, {{"train/loss", 1}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "earlier error")) << s;
  EXPECT_EQ(env.appends(), 0);  // not appended to after the failure
  EXPECT_EQ(ReadEvents(path).size(), 1u);
}

TEST(SummaryWriterTest, OpenFailuresNameTheFile) {
  const std::string path = JoinPath(FreshDir("missing"), "events.out.tfevents.1.h.1.0");
  auto writer = SummaryWriter::Open(path);
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kNotFound) << writer.status();
  EXPECT_TRUE(absl::StrContains(writer.status().message(), path)) << writer.status();

  FaultInjectingEnv env(Env::Default());
  FaultInjectingEnv::Faults f;
  f.open_for_write_errno = EACCES;
  env.SetFaults(f);
  const std::string dir = FreshDir("denied");
  writer = SummaryWriter::Create(dir, &env);
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kPermissionDenied) << writer.status();
  EXPECT_TRUE(absl::StrContains(writer.status().message(), dir)) << writer.status();
}

TEST(SummaryWriterTest, FileNamesFollowTensorFlowsConventionAndDiffer) {
  ClockEnv env;
  const std::string a = SummaryWriter::NewEventFileName(&env);
  const std::string b = SummaryWriter::NewEventFileName(&env);
  EXPECT_NE(a, b);
  const std::vector<std::string> parts = absl::StrSplit(a, '.');
  ASSERT_GE(parts.size(), 6u) << a;
  EXPECT_EQ(parts[0], "events");
  EXPECT_EQ(parts[1], "out");
  EXPECT_EQ(parts[2], "tfevents");
  EXPECT_EQ(parts[3], "1700000000");
  EXPECT_EQ(parts[parts.size() - 2], absl::StrCat(::getpid()));
  EXPECT_EQ(a.find('/'), std::string::npos);
}

TEST(SummaryWriterTest, AStepReusesTheWritersBuffers) {
  ClockEnv env;
  auto writer = SummaryWriter::Create(FreshDir("alloc"), &env);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::vector<SummaryScalar> scalars = {{"train/loss", 0.5f},
                                              {"train/samples_per_second", 1234.5f},
                                              {"train/step_time_seconds", 0.01f}};
  ASSERT_TRUE((*writer)->WriteScalars(1, scalars).ok());  // sizes the buffers
  g_allocations = 0;
  g_counting = true;
  absl::Status s;
  for (int step = 2; step < 50 && s.ok(); ++step) s = (*writer)->WriteScalars(step, scalars);
  g_counting = false;
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(g_allocations.load(), 0);
  EXPECT_EQ(ReadEvents((*writer)->path()).size(), 50u);
}

}  // namespace
}  // namespace weft
