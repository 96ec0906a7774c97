// Runs the real `weft` binary as a process, the way a user does, on job files
// and data files that the test writes, and on a slice of Debian's
// Fashion-MNIST when it is installed.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/data/test_files.h"

namespace weft {
namespace {

using data::testing::Gzip;
using data::testing::IdxBytes;
using data::testing::TempPath;
using data::testing::WriteFile;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";

struct Result {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string WeftBinary() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/", ws ? ws : "weft", "/client/weft");
}

Result RunWeft(const std::string& args) {
  const std::string err_path = TempPath(absl::StrCat("stderr_", ::getpid(), "_", std::rand()));
  const std::string cmd = absl::StrCat(WeftBinary(), " ", args, " 2>", err_path);
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_path);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

// A number from the one-line JSON result, e.g. JsonNumber(out, "steps").
double JsonNumber(const std::string& json, const std::string& key) {
  const std::string k = absl::StrCat("\"", key, "\": ");
  const size_t at = json.find(k);
  if (at == std::string::npos) return -1e300;
  size_t end = json.find_first_of(",}", at + k.size());
  double v = -1e300;
  (void)absl::SimpleAtod(json.substr(at + k.size(), end - at - k.size()), &v);
  return v;
}

// A synthetic 4-class problem with 8x8 images: class c lights the c-th
// quadrant, so a small MLP learns it well above chance.
void WriteQuadrants(const std::string& dir, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> pixels(static_cast<size_t>(n) * 64), labels(n);
  for (int i = 0; i < n; ++i) {
    const int c = static_cast<int>(rng() % 4);
    labels[i] = static_cast<uint8_t>(c);
    for (int y = 0; y < 8; ++y) {
      for (int x = 0; x < 8; ++x) {
        const int quadrant = (y / 4) * 2 + (x / 4);
        const int base = quadrant == c ? 180 : 30;
        pixels[static_cast<size_t>(i) * 64 + y * 8 + x] = static_cast<uint8_t>(base + rng() % 60);
      }
    }
  }
  WriteFile(dir + "/train-images-idx3-ubyte.gz", Gzip(IdxBytes({static_cast<uint32_t>(n), 8, 8}, pixels)));
  WriteFile(dir + "/train-labels-idx1-ubyte.gz", Gzip(IdxBytes({static_cast<uint32_t>(n)}, labels)));
  WriteFile(dir + "/t10k-images-idx3-ubyte.gz", Gzip(IdxBytes({static_cast<uint32_t>(n), 8, 8}, pixels)));
  WriteFile(dir + "/t10k-labels-idx1-ubyte.gz", Gzip(IdxBytes({static_cast<uint32_t>(n)}, labels)));
}

std::string MakeDir(const std::string& name) {
  const std::string dir = TempPath(name);
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

std::string QuadrantJob(const std::string& data_dir, const std::string& extra = "") {
  return absl::StrCat(R"(name: "quadrants"
model {
  input_shape: [64]
  num_classes: 4
  layer { dense { units: 16 activation: RELU } }
  layer { dense { units: 4 } }
}
dataset { dir: ")", data_dir, R"(" }
optimizer { sgd { learning_rate: 0.1 } }
batch_size: 16
epochs: 3
seed: 3
)", extra);
}

TEST(WeftCliTest, TrainsAndPrintsOneJsonResult) {
  const std::string dir = MakeDir("quadrants");
  WriteQuadrants(dir, 640, 1);
  WriteFile(dir + "/job.pbtxt", QuadrantJob(dir));
  Result r = RunWeft(absl::StrCat("train ", dir, "/job.pbtxt --output=json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // stdout holds exactly one JSON object; progress went to stderr.
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\"state\": \"SUCCEEDED\"")) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "steps"), 3 * (640 / 16));
  EXPECT_EQ(JsonNumber(r.out, "epochs"), 3);
  EXPECT_GT(JsonNumber(r.out, "test_accuracy"), 0.9) << r.out;  // chance is 0.25
  EXPECT_GT(JsonNumber(r.out, "samples_per_second"), 0);
  EXPECT_GT(JsonNumber(r.out, "wall_seconds"), 0);
  EXPECT_LT(JsonNumber(r.out, "train_loss"), 0.5);
  EXPECT_TRUE(absl::StrContains(r.err, "epoch 3 done")) << r.err;
}

TEST(WeftCliTest, AcceptsJsonJobFiles) {
  const std::string dir = MakeDir("quadrants_json");
  WriteQuadrants(dir, 320, 2);
  WriteFile(dir + "/job.json", absl::StrCat(R"({"name": "q", "model": {"inputShape": [64], "numClasses": 4,
      "layer": [{"dense": {"units": 4}}]}, "dataset": {"dir": ")", dir, R"("},
      "batchSize": 32, "steps": 5})"));
  Result r = RunWeft(absl::StrCat("train ", dir, "/job.json --output=json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(JsonNumber(r.out, "steps"), 5);
}

TEST(WeftCliTest, MalformedJobFileNamesFileAndLine) {
  const std::string dir = MakeDir("bad_syntax");
  WriteFile(dir + "/job.pbtxt", "name: \"x\"\nbatch_size: 4\nmodel { layer { dense { unitz: 3 } } }\n");
  Result r = RunWeft(absl::StrCat("train ", dir, "/job.pbtxt --output=json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "job.pbtxt:3:")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "unitz")) << r.err;
  // No partial result: the JSON says FAILED and carries no figures.
  EXPECT_TRUE(absl::StrContains(r.out, "\"state\": \"FAILED\"")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "test_accuracy")) << r.out;
}

TEST(WeftCliTest, BadInputsFailWithClearMessages) {
  const std::string dir = MakeDir("bad_inputs");
  WriteQuadrants(dir, 64, 3);
  struct Case {
    std::string name;
    std::string job;
    std::string expect;
  } cases[] = {
      {"missing job file", "", "cannot open job file"},
      {"no batch size", absl::StrCat("model { input_shape: [64] num_classes: 4 layer { dense { units: 4 } } } ",
                                     "dataset { dir: \"", dir, "\" } epochs: 1"),
       "batch_size must be positive"},
      {"missing data", QuadrantJob(dir + "/nowhere"), "nowhere"},
      {"unknown op in a graph",
       absl::StrCat("graph { graph { node { name: \"mystery\" op: \"Frobnicate\" } } } dataset { dir: \"", dir,
                    "\" } batch_size: 4 epochs: 1"),
       "unknown op 'Frobnicate'"},
      {"cycle in a graph",
       absl::StrCat("graph { graph { node { name: \"a\" op: \"Identity\" input: \"b\" } node { name: \"b\" op: ",
                    "\"Identity\" input: \"a\" } } } dataset { dir: \"", dir, "\" } batch_size: 4 epochs: 1"),
       "cycle"},
      {"shape mismatch", absl::StrCat("model { input_shape: [28, 28, 1] num_classes: 4 layer { dense { units: 4 } } }",
                                      " dataset { dir: \"", dir, "\" } batch_size: 4 epochs: 1"),
       "layer 0"},
  };
  for (const Case& c : cases) {
    const std::string path = dir + "/case.pbtxt";
    std::remove(path.c_str());
    if (!c.job.empty()) WriteFile(path, c.job);
    Result r = RunWeft(absl::StrCat("train ", path));
    EXPECT_EQ(r.exit_code, 1) << c.name << ": " << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, c.expect)) << c.name << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.name << " printed a result: " << r.out;
  }
}

TEST(WeftCliTest, TruncatedDatasetNamesTheFile) {
  const std::string dir = MakeDir("truncated");
  WriteQuadrants(dir, 64, 4);
  std::string images = IdxBytes({64, 8, 8}, std::vector<uint8_t>(64 * 64, 7));
  images.resize(images.size() - 100);
  WriteFile(dir + "/train-images-idx3-ubyte.gz", Gzip(images));
  WriteFile(dir + "/job.pbtxt", QuadrantJob(dir));
  Result r = RunWeft(absl::StrCat("train ", dir, "/job.pbtxt"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "train-images-idx3-ubyte.gz")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "truncated")) << r.err;
}

TEST(WeftCliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(RunWeft("").exit_code, 2);
  EXPECT_EQ(RunWeft("frobnicate").exit_code, 2);
  EXPECT_EQ(RunWeft("train x.pbtxt --output=yaml").exit_code, 2);
}

TEST(WeftCliTest, MlpLearnsFashionMnistSubset) {
  if (::access(kFashionMnist, R_OK) != 0) GTEST_SKIP() << kFashionMnist << " is not installed";
  const std::string dir = MakeDir("fmnist");
  WriteFile(dir + "/job.pbtxt", absl::StrCat(R"(model { input_shape: [784] num_classes: 10
      layer { dense { units: 64 activation: RELU } } layer { dense { units: 10 } } }
      dataset { dir: ")", kFashionMnist, R"(" train_limit: 12000 test_limit: 2000 }
      optimizer { momentum { learning_rate: 0.02 momentum: 0.9 } }
      batch_size: 64 epochs: 2 seed: 5 intra_op_threads: 1)"));
  Result r = RunWeft(absl::StrCat("train ", dir, "/job.pbtxt --output=json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(JsonNumber(r.out, "test_examples"), 2000);
  EXPECT_GT(JsonNumber(r.out, "test_accuracy"), 0.75) << r.out;  // chance is 0.10
}

}  // namespace
}  // namespace weft
