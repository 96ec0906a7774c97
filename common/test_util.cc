#include "common/test_util.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"

namespace weft {
namespace testing {
namespace {

constexpr char kSeedVariable[] = "WEFT_TEST_SEED";

// FNV-1a: the same on every platform, unlike std::hash.
uint64_t Fnv1a(absl::string_view text, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

::testing::AssertionResult WaitUntil(absl::Duration timeout, absl::string_view what,
                                     const std::function<absl::StatusOr<bool>()>& done) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration interval = absl::Milliseconds(1);
  for (;;) {
    absl::StatusOr<bool> ready = done();
    if (!ready.ok()) {
      return ::testing::AssertionFailure() << "stopped waiting for " << what << ": " << ready.status();
    }
    if (*ready) return ::testing::AssertionSuccess();
    if (absl::Now() >= deadline) {
      return ::testing::AssertionFailure() << "timed out after " << timeout << " waiting for " << what;
    }
    absl::SleepFor(std::min(interval, std::max(deadline - absl::Now(), absl::ZeroDuration())));
    interval = std::min(interval * 2, absl::Milliseconds(50));
  }
}

uint64_t TestSeed() {
  static const uint64_t seed = [] {
    uint64_t s = 0;
    const char* env = std::getenv(kSeedVariable);
    if (env != nullptr && *env != '\0') {
      if (!absl::SimpleAtoi(env, &s)) {
        std::fprintf(stderr, "%s='%s' is not an unsigned integer\n", kSeedVariable, env);
        std::abort();
      }
      std::printf("[seed] %s=%llu (from the environment)\n", kSeedVariable, static_cast<unsigned long long>(s));
    } else {
      std::random_device rd;
      s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
      std::printf("[seed] %s=%llu (set it to replay this run)\n", kSeedVariable, static_cast<unsigned long long>(s));
    }
    std::fflush(stdout);
    return s;
  }();
  return seed;
}

std::mt19937_64 TestRng() {
  std::string name = "(no test)";
  if (const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    name = std::string(info->test_suite_name()) + "." + info->name();
  }
  return std::mt19937_64(Fnv1a(name, Fnv1a(std::to_string(TestSeed()))));
}

}  // namespace testing
}  // namespace weft
