#include "runtime/data/idx_reader.h"

#include <cerrno>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/fault_injecting_env.h"
#include "gtest/gtest.h"
#include "runtime/data/failing_read_env.h"
#include "runtime/data/test_files.h"

namespace weft {
namespace data {
namespace {

using ::weft::data::testing::FailingReadEnv;
using ::weft::data::testing::Gzip;
using ::weft::data::testing::IdxBytes;
using ::weft::data::testing::TempPath;
using ::weft::data::testing::WithoutPath;
using ::weft::data::testing::WriteFile;

std::vector<uint8_t> Iota(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 3);
  return v;
}

// Writes `bytes` to a temp file, gzipped when asked, and returns its path.
std::string Write(const std::string& name, const std::string& bytes, bool gzip = false) {
  const std::string path = TempPath(name);
  WriteFile(path, gzip ? Gzip(bytes) : bytes);
  return path;
}

// Expects `s` to fail with `code` and a message holding `path` and `what`.
template <typename T>
void ExpectError(const absl::StatusOr<T>& s, absl::StatusCode code, const std::string& path,
                 const std::string& what) {
  ASSERT_FALSE(s.ok()) << "expected an error about " << what;
  EXPECT_EQ(s.status().code(), code) << s.status();
  EXPECT_NE(s.status().message().find(path), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find(what), std::string::npos) << s.status();
}

class IdxRoundTripTest : public ::testing::TestWithParam<bool> {};

TEST_P(IdxRoundTripTest, ImagesAndLabels) {
  const bool gz = GetParam();
  const std::vector<uint8_t> pixels = Iota(5 * 3 * 4);
  const std::vector<uint8_t> labels = {0, 9, 3, 3, 1};
  const std::string images_path =
      Write(gz ? "rt-images.gz" : "rt-images", IdxBytes({5, 3, 4}, pixels), gz);
  const std::string labels_path =
      Write(gz ? "rt-labels.gz" : "rt-labels", IdxBytes({5}, labels), gz);

  auto images = ReadIdxFile(images_path, 3);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->count, 5);
  EXPECT_EQ(images->example_shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(images->example_elems(), 12);
  EXPECT_EQ(images->data, pixels);

  auto ex = ReadIdxExamples(images_path, labels_path, /*num_classes=*/10);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ(ex->labels.count, 5);
  EXPECT_TRUE(ex->labels.example_shape.empty());
  EXPECT_EQ(ex->labels.data, labels);
  EXPECT_EQ(ex->images.data, pixels);
}

TEST_P(IdxRoundTripTest, LargerThanOneReadChunk) {
  // 300 KB crosses the reader's 64 KB input chunks and its first 1 MB
  // output step is not needed, so both buffering paths are exercised.
  const std::vector<uint8_t> pixels = Iota(300 * 32 * 32);
  const std::string path =
      Write(GetParam() ? "big.gz" : "big", IdxBytes({300, 32, 32}, pixels), GetParam());
  auto images = ReadIdxFile(path);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->count, 300);
  EXPECT_EQ(images->data, pixels);
}

TEST_P(IdxRoundTripTest, TruncatedDataSaysExpectedAndActualBytes) {
  std::vector<uint8_t> short_data = Iota(50);  // header promises 5*3*4 = 60
  const std::string path =
      Write(GetParam() ? "trunc.gz" : "trunc", IdxBytes({5, 3, 4}, short_data), GetParam());
  auto r = ReadIdxFile(path);
  ExpectError(r, absl::StatusCode::kDataLoss, path, "truncated");
  EXPECT_NE(r.status().message().find("need 60 bytes"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("only 50"), std::string::npos) << r.status();
}

TEST_P(IdxRoundTripTest, TrailingGarbage) {
  std::vector<uint8_t> data = Iota(12 + 3);
  const std::string path =
      Write(GetParam() ? "trail.gz" : "trail", IdxBytes({1, 3, 4}, data), GetParam());
  auto r = ReadIdxFile(path);
  ExpectError(r, absl::StatusCode::kInvalidArgument, path, "trailing garbage: 3 bytes");
}

TEST_P(IdxRoundTripTest, BadMagic) {
  const std::string path =
      Write(GetParam() ? "magic.gz" : "magic", "this is not an idx file", GetParam());
  ExpectError(ReadIdxFile(path), absl::StatusCode::kInvalidArgument, path, "not an IDX file");
  // The message names the defect, never the file's bytes ("this" = 74 68 69 73).
  const absl::Status s = ReadIdxFile(path).status();
  const std::string rest = WithoutPath(std::string(s.message()), path);
  EXPECT_EQ(rest.find("74 68"), std::string::npos) << s;
  EXPECT_EQ(rest.find("this"), std::string::npos) << s;
}

TEST_P(IdxRoundTripTest, UnsupportedType) {
  const std::string path = Write(GetParam() ? "float.gz" : "float",
                                 IdxBytes({1, 1}, {0, 0, 0, 0}, /*type=*/0x0D), GetParam());
  ExpectError(ReadIdxFile(path), absl::StatusCode::kInvalidArgument, path,
              "unsupported IDX element type float32 (0x0d)");
  const std::string odd = Write(GetParam() ? "odd.gz" : "odd",
                                IdxBytes({1, 1}, {0, 0, 0, 0}, /*type=*/0x41), GetParam());
  ExpectError(ReadIdxFile(odd), absl::StatusCode::kInvalidArgument, odd,
              "unsupported IDX element type an unknown type code");
  const absl::Status s = ReadIdxFile(odd).status();
  EXPECT_EQ(WithoutPath(std::string(s.message()), odd).find("41"), std::string::npos) << s;
}

INSTANTIATE_TEST_SUITE_P(PlainAndGzip, IdxRoundTripTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Gzip" : "Plain"; });

TEST(IdxReaderTest, MissingFile) {
  const std::string path = TempPath("does-not-exist.gz");
  ExpectError(ReadIdxFile(path), absl::StatusCode::kNotFound, path, "No such file");
}

TEST(IdxReaderTest, EmptyAndShortFiles) {
  const std::string empty = Write("empty", "");
  ExpectError(ReadIdxFile(empty), absl::StatusCode::kInvalidArgument, empty, "too short");
  // A valid magic number but the dims stop halfway.
  const std::string short_header = Write("short-header", IdxBytes({5, 3, 4}, {}).substr(0, 10));
  ExpectError(ReadIdxFile(short_header), absl::StatusCode::kDataLoss, short_header,
              "header needs 16 bytes, file has 10");
}

TEST(IdxReaderTest, WrongRank) {
  const std::string path = Write("rank1", IdxBytes({3}, {1, 2, 3}));
  ExpectError(ReadIdxFile(path, 3), absl::StatusCode::kInvalidArgument, path,
              "has rank 1, expected rank 3");
}

TEST(IdxReaderTest, CorruptGzipChecksum) {
  std::string gz = Gzip(IdxBytes({2, 2, 2}, Iota(8)));
  gz[gz.size() - 8] ^= 0x01;  // first byte of the CRC-32 in the gzip trailer
  const std::string path = Write("badcrc.gz", gz);
  ExpectError(ReadIdxFile(path), absl::StatusCode::kDataLoss, path, "corrupt gzip");
}

TEST(IdxReaderTest, CorruptGzipBody) {
  std::string gz = Gzip(IdxBytes({64, 8, 8}, Iota(64 * 8 * 8)));
  gz[gz.size() / 2] ^= 0x5A;
  const std::string path = Write("badbody.gz", gz);
  auto r = ReadIdxFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("gzip"), std::string::npos) << r.status();
}

TEST(IdxReaderTest, TruncatedGzipStream) {
  std::string gz = Gzip(IdxBytes({4, 8, 8}, Iota(4 * 8 * 8)));
  const std::string path = Write("cut.gz", gz.substr(0, gz.size() - 12));
  ExpectError(ReadIdxFile(path), absl::StatusCode::kDataLoss, path, "ends early");
}

TEST(IdxReaderTest, LyingHeaderDoesNotAllocateWhatItClaims) {
  // 10^9 images of 28x28 (~784 GB) claimed by a file of a few hundred bytes:
  // the reader must report truncation rather than try to allocate it all.
  const std::string path = Write("liar.gz", IdxBytes({1000000000u, 28, 28}, Iota(100)), true);
  ExpectError(ReadIdxFile(path), absl::StatusCode::kDataLoss, path, "only 100");
  const std::string huge = Write("huge", IdxBytes({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFu}, {}));
  ExpectError(ReadIdxFile(huge), absl::StatusCode::kInvalidArgument, huge,
              "implausible IDX header: dimension 1 (4294967295) of [4294967295,4294967295,65535]");
}

TEST(IdxReaderTest, DimensionsWhoseProductWrapsToZeroAreRejected) {
  // Issue 17: 2^20 * 2^20 * 2^24 = 2^64, which unchecked uint64 arithmetic
  // wraps to 0 bytes; the reader then returned an empty array whose
  // example_elems() claimed 2^44 pixels, and the dataset's pixel conversion
  // wrote past the end of the heap buffer.
  const std::string path = Write("wrap", IdxBytes({1u << 20, 1u << 20, 1u << 24}, {}));
  ExpectError(ReadIdxFile(path), absl::StatusCode::kInvalidArgument, path,
              "dimension 2 (16777216) of [1048576,1048576,16777216] makes the data more than "
              "2^40 bytes");
  // The same product in another order, and a product exactly 2^64 * k.
  const std::string other = Write("wrap2", IdxBytes({1u << 24, 1u << 20, 1u << 20, 16}, {}));
  ExpectError(ReadIdxFile(other), absl::StatusCode::kInvalidArgument, other, "implausible");
  const std::string gz = Write("wrap.gz", IdxBytes({1u << 20, 1u << 20, 1u << 24}, {}), true);
  ExpectError(ReadIdxFile(gz), absl::StatusCode::kInvalidArgument, gz, "implausible");
}

TEST(IdxReaderTest, ZeroCountDoesNotHideAnOverflowingExampleShape) {
  // Found by idx_reader_fuzzer: with a zero dimension the data is empty, but
  // the other dimensions multiplied to more than 2^64, so example_elems()
  // overflowed. The nonzero dimensions are bounded as well.
  const std::string path = Write("zero-count", IdxBytes({0, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {}));
  ExpectError(ReadIdxFile(path), absl::StatusCode::kInvalidArgument, path, "implausible IDX header");
  // A zero dimension with a sane shape reads as an empty array.
  const std::string ok = Write("zero-ok", IdxBytes({0, 28, 28}, {}));
  auto got = ReadIdxFile(ok);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->count, 0);
  EXPECT_EQ(got->example_elems(), 784);
  EXPECT_TRUE(got->data.empty());
}

TEST(IdxReaderTest, ExampleElemsOfAnOverflowingShapeIsNegative) {
  IdxArray a;
  a.example_shape = {int64_t{1} << 32, int64_t{1} << 32};
  EXPECT_EQ(a.example_elems(), -1);
  a.example_shape = {28, 28};
  EXPECT_EQ(a.example_elems(), 784);
}

TEST(IdxReaderTest, ExamplesCountMismatchNamesBothFiles) {
  const std::string images = Write("mm-images", IdxBytes({3, 2, 2}, Iota(12)));
  const std::string labels = Write("mm-labels", IdxBytes({4}, {0, 1, 2, 3}));
  auto r = ReadIdxExamples(images, labels);
  ExpectError(r, absl::StatusCode::kInvalidArgument, images, "holds 3 images");
  EXPECT_NE(r.status().message().find(labels), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("4 labels"), std::string::npos) << r.status();
}

TEST(IdxReaderTest, ExamplesLabelOutOfRange) {
  const std::string images = Write("oor-images", IdxBytes({3, 2, 2}, Iota(12)));
  const std::string labels = Write("oor-labels", IdxBytes({3}, {0, 10, 2}));
  EXPECT_TRUE(ReadIdxExamples(images, labels, 11).ok());
  ExpectError(ReadIdxExamples(images, labels, 10), absl::StatusCode::kInvalidArgument, labels,
              "label 10 of example 1 is out of range for num_classes=10");
}

TEST(IdxReaderTest, ExamplesRejectSwappedFiles) {
  const std::string images = Write("sw-images", IdxBytes({3, 2, 2}, Iota(12)));
  const std::string labels = Write("sw-labels", IdxBytes({3}, {0, 1, 2}));
  ExpectError(ReadIdxExamples(labels, images), absl::StatusCode::kInvalidArgument, labels,
              "expected an images file");
}

// ---- Reads through an Env ----

// Bytes that deflate cannot shrink much, so a gzipped file of them spans
// several of the reader's 64 KiB input chunks.
std::vector<uint8_t> Noise(size_t n) {
  std::vector<uint8_t> v(n);
  uint64_t x = 0x9e3779b97f4a7c15u;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<uint8_t>(x);
  }
  return v;
}

TEST(IdxReaderEnvTest, AnIoErrorPartWayIsAnErrorNamingTheFileNeverAShortRead) {
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    const std::vector<uint8_t> pixels = Noise(200 * 28 * 28);
    const std::string path = Write(gzip ? "eio.gz" : "eio", IdxBytes({200, 28, 28}, pixels), gzip);
    FailingReadEnv env(Env::Default());
    auto whole = ReadIdxFile(path, 3, &env);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ(whole->data, pixels);

    // The first 64 KiB chunk reads; the next fails.
    env.FailReadsFrom(uint64_t{1} << 16);
    auto r = ReadIdxFile(path, 3, &env);
    ExpectError(r, absl::StatusCode::kDataLoss, path, "read error at byte 65536");
    EXPECT_NE(r.status().message().find("[injected]"), std::string::npos) << r.status();
  }
}

TEST(IdxReaderEnvTest, TheFaultInjectingEnvReachesTheReader) {
  const std::string images = Write("fi-images", IdxBytes({3, 2, 2}, Iota(12)));
  const std::string labels = Write("fi-labels", IdxBytes({3}, {0, 1, 2}));
  FaultInjectingEnv env(Env::Default());
  ASSERT_TRUE(ReadIdxExamples(images, labels, 0, &env).ok());
  FaultInjectingEnv::Faults f;
  f.open_for_read_errno = EACCES;
  env.SetFaults(f);
  ExpectError(ReadIdxExamples(images, labels, 0, &env), absl::StatusCode::kPermissionDenied, images,
              "cannot open");
  ExpectError(ReadIdxHeader(labels, 1, &env), absl::StatusCode::kPermissionDenied, labels, "[injected]");
}

// ---- Headers alone ----

TEST(IdxHeaderTest, CountAndShapeFromTheHeaderWithoutTheData) {
  const std::vector<uint8_t> pixels = Noise(500 * 28 * 28);
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    const std::string path = Write(gzip ? "hdr.gz" : "hdr", IdxBytes({500, 28, 28}, pixels), gzip);
    FailingReadEnv env(Env::Default());
    auto h = ReadIdxHeader(path, 3, &env);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->count, 500);
    EXPECT_EQ(h->example_shape, (std::vector<int64_t>{28, 28}));
    // One input chunk at most, of a file of 392 KB.
    EXPECT_LE(env.bytes_read(), int64_t{1} << 16);
  }
  // A file cut after its header still has a count; reading it fails.
  const std::string cut = Write("hdr-cut", IdxBytes({500, 28, 28}, {}));
  auto h = ReadIdxHeader(cut);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->count, 500);
  EXPECT_EQ(ReadIdxFile(cut).status().code(), absl::StatusCode::kDataLoss);
}

TEST(IdxHeaderTest, MalformedHeadersAreRefusedNamingTheFile) {
  ExpectError(ReadIdxHeader(Write("hdr-short", std::string(2, '\0'))), absl::StatusCode::kInvalidArgument,
              TempPath("hdr-short"), "too short for the 4-byte magic number");
  ExpectError(ReadIdxHeader(Write("hdr-magic", IdxBytes({3}, {1, 2, 3}, 0x0d))), absl::StatusCode::kInvalidArgument,
              TempPath("hdr-magic"), "unsupported IDX element type float32");
  ExpectError(ReadIdxHeader(Write("hdr-rank", IdxBytes({3, 1}, {1, 2, 3})), 1), absl::StatusCode::kInvalidArgument,
              TempPath("hdr-rank"), "has rank 2, expected rank 1");
  // The dims multiply past the cap (and past 2^64 unchecked).
  ExpectError(ReadIdxHeader(Write("hdr-huge", IdxBytes({1u << 20, 1u << 20, 1u << 24}, {}))),
              absl::StatusCode::kInvalidArgument, TempPath("hdr-huge"), "implausible IDX header");
  // The dims cut short.
  std::string cut = IdxBytes({3, 2, 2}, {});
  cut.resize(9);
  ExpectError(ReadIdxHeader(Write("hdr-dims", cut)), absl::StatusCode::kDataLoss, TempPath("hdr-dims"),
              "header needs 16 bytes, file has 9");
  ExpectError(ReadIdxHeader(TempPath("hdr-none")), absl::StatusCode::kNotFound, TempPath("hdr-none"), "No such file");
}

}  // namespace
}  // namespace data
}  // namespace weft
