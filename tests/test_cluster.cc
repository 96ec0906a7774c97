#include "tests/test_cluster.h"

#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/data/test_files.h"

namespace weft {
namespace testing {

std::string WeftBinary() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/", ws ? ws : "weft", "/client/weft");
}

std::string WriteThreeClassData(const std::string& dir, int n) {
  ::mkdir(dir.c_str(), 0755);
  std::vector<uint8_t> pixels(static_cast<size_t>(n) * 12), labels(n);
  uint32_t r = 12345;
  for (int i = 0; i < n; ++i) {
    const int c = i % 3;
    labels[i] = static_cast<uint8_t>(c);
    for (int p = 0; p < 12; ++p) {
      r = r * 1103515245u + 12345u;
      pixels[static_cast<size_t>(i) * 12 + p] = static_cast<uint8_t>((p / 4 == c ? 170 : 20) + (r >> 24) % 60);
    }
  }
  for (const char* split : {"train", "t10k"}) {
    data::testing::WriteFile(absl::StrCat(dir, "/", split, "-images-idx3-ubyte.gz"),
                             data::testing::Gzip(data::testing::IdxBytes({static_cast<uint32_t>(n), 3, 4}, pixels)));
    data::testing::WriteFile(absl::StrCat(dir, "/", split, "-labels-idx1-ubyte.gz"),
                             data::testing::Gzip(data::testing::IdxBytes({static_cast<uint32_t>(n)}, labels)));
  }
  return dir;
}

std::string DaemonIdentity(const std::string& name) {
  if (name == "master") return name;
  const size_t dash = name.rfind('-');
  return absl::StrCat("/job:", name.substr(0, dash), "/task:", name.substr(dash + 1));
}

}  // namespace testing
}  // namespace weft
