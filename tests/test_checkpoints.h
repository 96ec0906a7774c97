// Checkpoints as the integration tests compare them: every variable of the
// newest valid checkpoint under a directory, read through the ps's own
// shard reader, and a bit-for-bit comparison of two of them.
//
// Thread-safety: plain functions.
#ifndef WEFT_TESTS_TEST_CHECKPOINTS_H_
#define WEFT_TESTS_TEST_CHECKPOINTS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace weft {
namespace testing {

// The variables of a checkpoint, by "<owner task>|<name>".
struct SavedVariable {
  DType dtype = DType::kInvalid;
  TensorShape shape;
  std::string bytes;
};
struct SavedCheckpoint {
  std::string path;
  int64_t step = -1;
  std::map<std::string, SavedVariable> variables;
};

// The newest valid checkpoint under `dir`, every shard read and checked
// through ps::ReadShard.
absl::StatusOr<SavedCheckpoint> ReadNewestCheckpoint(const std::string& dir);

// Same step, same variables, bit for bit (gtest expectations).
void ExpectSameVariables(const SavedCheckpoint& got, const SavedCheckpoint& want);

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_TEST_CHECKPOINTS_H_
