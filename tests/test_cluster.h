// Helpers shared by the integration tests that run `weft` daemons as
// processes: where the binary is, a small learnable dataset, and the
// identity each daemon's certificate carries.
//
// Thread-safety: plain functions.
#ifndef WEFT_TESTS_TEST_CLUSTER_H_
#define WEFT_TESTS_TEST_CLUSTER_H_

#include <string>

namespace weft {
namespace testing {

// The `weft` binary in the test's runfiles.
std::string WeftBinary();
// Writes a synthetic 3-class problem (class c brightens the c-th third of a
// 12-pixel image; n examples in each split) as IDX files under `dir`
// (created) and returns `dir`.
std::string WriteThreeClassData(const std::string& dir, int n);
// "worker-1" -> "/job:worker/task:1"; "master" -> "master".
std::string DaemonIdentity(const std::string& name);

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_TEST_CLUSTER_H_
