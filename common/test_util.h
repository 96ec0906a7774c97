// What every test that waits or draws random numbers shares, so that a
// failure says what it waited for and a random run can be replayed.
//
// WaitUntil: a wait in a test always has a deadline, and failing it names
// what the test was waiting for; the test's own result, not Bazel's
// timeout, reports the hang.
//
// TestSeed / TestRng: a test's random choices come from one seed per run,
// $WEFT_TEST_SEED when set, else a fresh one. It is printed on first use,
// so a failing run can be replayed: `WEFT_TEST_SEED=n bazel test ...`.
//
// Thread-safety: thread-safe.
#ifndef WEFT_COMMON_TEST_UTIL_H_
#define WEFT_COMMON_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <random>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace weft {
namespace testing {

// How long a test waits for something a healthy run does in well under a
// second (a thread to block, a server to start): long enough for a loaded
// machine, short enough to fail before Bazel's timeout.
inline constexpr absl::Duration kWaitTimeout = absl::Seconds(60);

// Calls `done` until it returns true, sleeping a little between calls
// (starting at 1 ms, at most 50 ms). Fails when `timeout` passes ("timed out
// after 60s waiting for <what>") or when `done` returns an error (e.g. a
// process it waits on exited), with that error. Use as
//   ASSERT_TRUE(WaitUntil(kWaitTimeout, "the _Recv to block", [&] { ... }));
::testing::AssertionResult WaitUntil(absl::Duration timeout, absl::string_view what,
                                     const std::function<absl::StatusOr<bool>()>& done);

// This run's seed (see above); printed to stdout, once, on first use.
uint64_t TestSeed();

// A generator seeded by TestSeed() and the running test's full name, so a
// test draws the same numbers on replay whichever other tests run before it.
std::mt19937_64 TestRng();

}  // namespace testing
}  // namespace weft

#endif  // WEFT_COMMON_TEST_UTIL_H_
