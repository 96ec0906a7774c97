#include "runtime/data/tfrecord.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "common/env.h"
#include "common/fault_injecting_env.h"
#include "gtest/gtest.h"
#include "runtime/data/failing_read_env.h"
#include "runtime/data/test_files.h"

namespace weft {
namespace data {
namespace {

using ::weft::data::testing::FailingReadEnv;
using ::weft::data::testing::ReadFile;
using ::weft::data::testing::TempPath;
using ::weft::data::testing::WriteFile;

const std::vector<std::string>& Records() {
  static const auto* records = new std::vector<std::string>{"first", "", std::string(1000, 'x'),
                                                            std::string("last\0one", 8)};
  return *records;
}

std::string WriteRecords(const std::string& name) {
  const std::string path = TempPath(name);
  auto writer = TFRecordWriter::Open(path);
  EXPECT_TRUE(writer.ok()) << writer.status();
  for (const std::string& r : Records()) EXPECT_TRUE((*writer)->Write(r).ok());
  EXPECT_TRUE((*writer)->Close().ok());
  return path;
}

// Reads records until the end or an error; returns the error (OK at the end).
absl::Status ReadAll(const std::string& path, std::vector<std::string>* out) {
  auto reader = TFRecordReader::Open(path);
  if (!reader.ok()) return reader.status();
  std::string record;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->ReadRecord(&record);
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
    out->push_back(record);
  }
}

// Byte offset of record i in a file written from Records().
uint64_t OffsetOf(size_t i) {
  uint64_t off = 0;
  for (size_t k = 0; k < i; ++k) off += 16 + Records()[k].size();
  return off;
}

void ExpectDataLoss(const absl::Status& s, const std::string& path, const std::string& what,
                    uint64_t offset) {
  ASSERT_FALSE(s.ok()) << "expected " << what;
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  EXPECT_NE(s.message().find(what), std::string::npos) << s;
  EXPECT_NE(s.message().find("byte offset " + std::to_string(offset) + ":"), std::string::npos)
      << s;
}

TEST(TFRecordTest, RoundTripAndLayout) {
  const std::string path = WriteRecords("round.tfrecord");
  std::vector<std::string> got;
  ASSERT_TRUE(ReadAll(path, &got).ok());
  EXPECT_EQ(got, Records());

  // The bytes are TensorFlow's layout: LE length, masked CRCs.
  const std::string bytes = ReadFile(path);
  ASSERT_EQ(bytes.size(), OffsetOf(Records().size()));
  uint64_t len;
  std::memcpy(&len, bytes.data(), 8);
  EXPECT_EQ(len, 5u);
  uint32_t len_crc, data_crc;
  std::memcpy(&len_crc, bytes.data() + 8, 4);
  std::memcpy(&data_crc, bytes.data() + 17, 4);
  EXPECT_EQ(len_crc, MaskCrc32c(Crc32c(bytes.data(), 8)));
  EXPECT_EQ(data_crc, MaskCrc32c(Crc32c("first", 5)));
}

TEST(TFRecordTest, ReaderTracksOffsetAndStopsCleanly) {
  const std::string path = WriteRecords("offsets.tfrecord");
  auto reader = TFRecordReader::Open(path);
  ASSERT_TRUE(reader.ok());
  std::string record;
  for (size_t i = 0; i < Records().size(); ++i) {
    EXPECT_EQ((*reader)->offset(), OffsetOf(i));
    ASSERT_EQ((*reader)->ReadRecord(&record).value_or(false), true);
  }
  EXPECT_EQ((*reader)->ReadRecord(&record).value_or(true), false);
  EXPECT_EQ((*reader)->ReadRecord(&record).value_or(true), false);  // stays at the end
}

TEST(TFRecordTest, CorruptLengthCrc) {
  const std::string path = WriteRecords("badlen.tfrecord");
  std::string bytes = ReadFile(path);
  bytes[OffsetOf(2) + 1] ^= 0x10;  // a length byte of the third record
  WriteFile(path, bytes);
  std::vector<std::string> got;
  ExpectDataLoss(ReadAll(path, &got), path, "length field's CRC does not match", OffsetOf(2));
  EXPECT_EQ(got.size(), 2u);  // the records before it are intact
}

TEST(TFRecordTest, CorruptDataCrcAndStickyError) {
  const std::string path = WriteRecords("baddata.tfrecord");
  std::string bytes = ReadFile(path);
  bytes[OffsetOf(2) + 12 + 500] ^= 0x01;  // inside the third record's data
  WriteFile(path, bytes);
  std::vector<std::string> got;
  ExpectDataLoss(ReadAll(path, &got), path, "data CRC of the 1000-byte record does not match",
                 OffsetOf(2));
  EXPECT_EQ(got.size(), 2u);

  auto reader = TFRecordReader::Open(path);
  ASSERT_TRUE(reader.ok());
  std::string record;
  for (int i = 0; i < 2; ++i) ASSERT_TRUE((*reader)->ReadRecord(&record).ok());
  EXPECT_FALSE((*reader)->ReadRecord(&record).ok());
  EXPECT_FALSE((*reader)->ReadRecord(&record).ok());  // the error sticks
}

TEST(TFRecordTest, TruncatedInsideDataOrHeader) {
  const std::string full = ReadFile(WriteRecords("trunc-src.tfrecord"));
  const std::string in_data = TempPath("trunc-data.tfrecord");
  WriteFile(in_data, full.substr(0, OffsetOf(2) + 12 + 100));
  std::vector<std::string> got;
  ExpectDataLoss(ReadAll(in_data, &got), in_data, "truncated record", OffsetOf(2));
  EXPECT_EQ(got.size(), 2u);

  const std::string in_header = TempPath("trunc-header.tfrecord");
  WriteFile(in_header, full.substr(0, OffsetOf(1) + 5));
  got.clear();
  ExpectDataLoss(ReadAll(in_header, &got), in_header, "5 bytes into the 12-byte record header",
                 OffsetOf(1));
  EXPECT_EQ(got.size(), 1u);

  const std::string no_footer = TempPath("trunc-footer.tfrecord");
  WriteFile(no_footer, full.substr(0, OffsetOf(1) - 2));
  got.clear();
  ExpectDataLoss(ReadAll(no_footer, &got), no_footer, "truncated record", 0);
}

// A record header with a valid length CRC: what a damaged or hostile file
// that still passes the first check looks like.
std::string HeaderFor(uint64_t length) {
  std::string h(12, '\0');
  for (int i = 0; i < 8; ++i) h[i] = static_cast<char>(length >> (8 * i));
  const uint32_t crc = MaskCrc32c(Crc32c(h.data(), 8));
  for (int i = 0; i < 4; ++i) h[8 + i] = static_cast<char>(crc >> (8 * i));
  return h;
}

TEST(TFRecordTest, HugeLengthIsRejectedBeforeTheBufferGrows) {
  // Issue 17: the reader sized its buffer from the length field before
  // checking it. A 2^40-byte length in a 20-byte file must fail cleanly,
  // leaving the caller's buffer as it was.
  const std::string path = TempPath("huge-length.tfrecord");
  WriteFile(path, HeaderFor(uint64_t{1} << 40) + "tiny");
  auto reader = TFRecordReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::string record = "untouched";
  absl::StatusOr<bool> more = (*reader)->ReadRecord(&record);
  ExpectDataLoss(more.status(), path, "the length field gives 1099511627776 bytes", 0);
  EXPECT_EQ(record, "untouched");

  // A length that wraps offset + length: 2^64 - 1.
  WriteFile(path, HeaderFor(~uint64_t{0}) + "tiny");
  reader = TFRecordReader::Open(path);
  ASSERT_TRUE(reader.ok());
  ExpectDataLoss((*reader)->ReadRecord(&record).status(), path, "truncated record", 0);
  EXPECT_EQ(record, "untouched");
}

TEST(TFRecordTest, LengthOverTheCapIsRejectedEvenWhenTheFileHoldsIt) {
  // A sparse file big enough to hold the record the header claims: the cap,
  // not the file size, stops it.
  const std::string path = TempPath("over-cap.tfrecord");
  const uint64_t length = kMaxTFRecordBytes + 1;
  WriteFile(path, HeaderFor(length));
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(12 + length + 4)), 0);
  auto reader = TFRecordReader::Open(path);
  ASSERT_TRUE(reader.ok());
  std::string record;
  ExpectDataLoss((*reader)->ReadRecord(&record).status(), path, "over the limit", 0);
  EXPECT_TRUE(record.empty());
}

TEST(TFRecordTest, ErrorsDoNotEchoTheFilesBytes) {
  // A text file read as a TFRecord: the message must not quote its bytes,
  // neither as text nor as the "stored" CRC.
  const std::string path = TempPath("secret.txt");
  WriteFile(path, "password=hunter2\nmore text here\n");
  std::vector<std::string> got;
  const absl::Status s = ReadAll(path, &got);
  ASSERT_FALSE(s.ok());
  const std::string rest = testing::WithoutPath(std::string(s.message()), path);
  EXPECT_EQ(rest.find("hunter2"), std::string::npos) << s;
  EXPECT_EQ(rest.find("stored"), std::string::npos) << s;
}

TEST(TFRecordTest, WriterRefusesRecordsReadersWouldReject) {
  auto writer = TFRecordWriter::Open(TempPath("too-big.tfrecord"));
  ASSERT_TRUE(writer.ok());
  // A view of the right size over a small buffer: Write must refuse before
  // touching the bytes.
  const char small[1] = {0};
  const absl::Status s =
      (*writer)->Write(absl::string_view(small, static_cast<size_t>(kMaxTFRecordBytes) + 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE((*writer)->Close().ok());
}

TEST(TFRecordTest, MissingFile) {
  const std::string path = TempPath("nope.tfrecord");
  auto reader = TFRecordReader::Open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(reader.status().message().find(path), std::string::npos);
}

TEST(ImageExampleTest, EncodeDecode) {
  const std::vector<uint8_t> pixels = {1, 2, 3, 250, 255, 0};
  std::string record = "prefix";
  EncodeImageExample(0x01020304u, pixels, &record);
  ASSERT_EQ(record.size(), 6u + 4u + 6u);
  EXPECT_EQ(record.substr(6, 4), std::string("\x04\x03\x02\x01", 4));  // label, little-endian

  uint32_t label = 0;
  std::vector<uint8_t> out(6);
  ASSERT_TRUE(
      DecodeImageExample(absl::string_view(record).substr(6), &label, absl::MakeSpan(out)).ok());
  EXPECT_EQ(label, 0x01020304u);
  EXPECT_EQ(out, pixels);

  std::vector<uint8_t> wrong(5);
  absl::Status s =
      DecodeImageExample(absl::string_view(record).substr(6), &label, absl::MakeSpan(wrong));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("holds 10 bytes"), std::string::npos) << s;
}

TEST(ImageExampleTest, FileRoundTripAndShapeMismatch) {
  const std::string path = TempPath("examples.tfrecord");
  const std::vector<uint8_t> pixels = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  const std::vector<int32_t> labels = {7, 0, 3};
  ASSERT_TRUE(WriteImageExamples(path, pixels, labels).ok());

  std::vector<uint8_t> got_pixels = {99};  // appended to, not replaced
  std::vector<int32_t> got_labels;
  ASSERT_TRUE(ReadImageExamples(path, 4, &got_pixels, &got_labels).ok());
  EXPECT_EQ(got_labels, labels);
  ASSERT_EQ(got_pixels.size(), 13u);
  EXPECT_EQ(std::vector<uint8_t>(got_pixels.begin() + 1, got_pixels.end()), pixels);

  got_pixels.clear();
  got_labels.clear();
  absl::Status s = ReadImageExamples(path, 6, &got_pixels, &got_labels);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(path + ": record 0 at byte offset 0"), std::string::npos) << s;
  // Nothing is appended for a record of the wrong size.
  EXPECT_TRUE(got_pixels.empty());
  EXPECT_TRUE(got_labels.empty());

  EXPECT_FALSE(WriteImageExamples(path, pixels, {1, -1, 2}).ok());
  EXPECT_FALSE(WriteImageExamples(path, pixels, {1, 2, 3, 4, 5}).ok());
}

// ---- Reads and writes through an Env ----

// `n` image examples of `elems` pixels in one file; returns its path.
std::string WriteExamples(const std::string& name, int n, int elems) {
  std::vector<uint8_t> pixels(static_cast<size_t>(n) * elems);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 31 + 7);
  for (int i = 0; i < n; ++i) labels[i] = i % 10;
  const std::string path = TempPath(name);
  EXPECT_TRUE(WriteImageExamples(path, pixels, labels).ok());
  return path;
}

TEST(TFRecordEnvTest, AnIoErrorPartWayIsAnErrorNamingTheFileNeverAShortRead) {
  // 200 records of 4 + 784 + 16 bytes: 160,800 bytes, three 64 KiB chunks.
  const std::string path = WriteExamples("eio.tfrecord", 200, 784);
  FailingReadEnv env(Env::Default());
  std::vector<uint8_t> pixels;
  std::vector<int32_t> labels;
  ASSERT_TRUE(ReadImageExamples(path, 784, &pixels, &labels, &env).ok());
  ASSERT_EQ(labels.size(), 200u);

  env.FailReadsFrom(100000);
  pixels.clear();
  labels.clear();
  const absl::Status s = ReadImageExamples(path, 784, &pixels, &labels, &env);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  EXPECT_NE(s.message().find("read error"), std::string::npos) << s;
  EXPECT_NE(s.message().find("[injected]"), std::string::npos) << s;
  // The records before the failed chunk were read, none after it.
  EXPECT_LT(labels.size(), 200u);
  EXPECT_EQ(labels.size(), 65536u / 804u);
}

TEST(TFRecordEnvTest, TheFaultInjectingEnvReachesReaderAndWriter) {
  const std::string path = WriteExamples("fi.tfrecord", 3, 4);
  FaultInjectingEnv env(Env::Default());
  FaultInjectingEnv::Faults f;
  f.open_for_read_errno = EIO;
  env.SetFaults(f);
  auto reader = TFRecordReader::Open(path, &env);
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.status().message().find(path), std::string::npos) << reader.status();
  EXPECT_NE(reader.status().message().find("[injected]"), std::string::npos) << reader.status();

  // The disk fills part-way through the file: Close, which writes what is
  // buffered, reports it naming the file.
  f = FaultInjectingEnv::Faults();
  f.space_left = 30;
  env.SetFaults(f);
  const std::string out = TempPath("full.tfrecord");
  const absl::Status w = WriteImageExamples(out, std::vector<uint8_t>(12, 1), {1, 2, 3}, &env);
  EXPECT_EQ(w.code(), absl::StatusCode::kDataLoss) << w;
  EXPECT_NE(w.message().find(out), std::string::npos) << w;
}

// ---- Counting records from their headers ----

TEST(CountRecordsTest, CountsFromTheLengthFieldsWithoutReadingPayloads) {
  const std::string path = WriteExamples("count.tfrecord", 200, 784);
  FailingReadEnv env(Env::Default());
  auto n = CountRecords(path, &env);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 200);
  EXPECT_EQ(env.bytes_read(), 200 * 12);  // the headers alone

  const std::string empty = TempPath("count-empty.tfrecord");
  WriteFile(empty, "");
  n = CountRecords(empty);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0);
}

TEST(CountRecordsTest, DamagedOrTruncatedFilesAreRefusedNamingFileAndOffset) {
  const std::string full = ReadFile(WriteRecords("count-src.tfrecord"));
  const std::string in_data = TempPath("count-trunc.tfrecord");
  WriteFile(in_data, full.substr(0, OffsetOf(2) + 12 + 100));
  ExpectDataLoss(CountRecords(in_data).status(), in_data, "truncated record", OffsetOf(2));

  const std::string in_header = TempPath("count-header.tfrecord");
  WriteFile(in_header, full.substr(0, OffsetOf(3) + 5));
  ExpectDataLoss(CountRecords(in_header).status(), in_header, "5 bytes into the 12-byte record header", OffsetOf(3));

  std::string bad_crc = full;
  bad_crc[OffsetOf(1) + 8] ^= 1;
  const std::string crc = TempPath("count-crc.tfrecord");
  WriteFile(crc, bad_crc);
  ExpectDataLoss(CountRecords(crc).status(), crc, "length field's CRC does not match", OffsetOf(1));

  // Lengths that would wrap the offset or pass the cap.
  const std::string huge = TempPath("count-huge.tfrecord");
  WriteFile(huge, full + HeaderFor(~uint64_t{0}) + "tiny");
  ExpectDataLoss(CountRecords(huge).status(), huge, "truncated record", full.size());
  const std::string over = TempPath("count-over.tfrecord");
  const uint64_t length = kMaxTFRecordBytes + 1;
  WriteFile(over, HeaderFor(length));
  ASSERT_EQ(::truncate(over.c_str(), static_cast<off_t>(12 + length + 4)), 0);
  ExpectDataLoss(CountRecords(over).status(), over, "over the limit", 0);

  EXPECT_EQ(CountRecords(TempPath("count-none.tfrecord")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace data
}  // namespace weft
