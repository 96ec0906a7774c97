// Helpers for the data tests: building IDX and gzip bytes in memory and
// writing them under ::testing::TempDir(). Test-only.
//
// Thread-safety: the functions are thread-safe for distinct paths.
#ifndef WEFT_RUNTIME_DATA_TEST_FILES_H_
#define WEFT_RUNTIME_DATA_TEST_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace weft {
namespace data {
namespace testing {

// A fresh path under the test's temp dir: <TempDir>/<name>.
std::string TempPath(const std::string& name);

// Writes `bytes` to `path`, replacing it; fails the test on error.
void WriteFile(const std::string& path, const std::string& bytes);
// The contents of `path`; fails the test on error.
std::string ReadFile(const std::string& path);

// An IDX file with element type `type` (0x08 = uint8) and dims `dims`,
// followed by `data` as given (whether or not it matches the dims).
std::string IdxBytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data,
                     uint8_t type = 0x08);

// The names in `dir` (Env::ListDirectory: sorted, without . and ..); empty
// when `dir` does not exist.
std::vector<std::string> DirEntries(const std::string& dir);

// `bytes` as one gzip member.
std::string Gzip(const std::string& bytes);

// `message` with every occurrence of `path` removed, so that a check that the
// message does not echo some bytes is not fooled by the temp path holding them
// (a temp dir name can hold any digits).
std::string WithoutPath(std::string message, const std::string& path);

}  // namespace testing
}  // namespace data
}  // namespace weft

#endif  // WEFT_RUNTIME_DATA_TEST_FILES_H_
