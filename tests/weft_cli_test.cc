// Runs the real `weft` binary as a process, the way a user does, on job files
// and data files that the test writes, and on a slice of Debian's
// Fashion-MNIST when it is installed.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "common/tensor.h"
#include "common/test_util.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "proto/job.pb.h"
#include "ps/manifest.h"
#include "ps/shard_file.h"
#include "runtime/data/test_files.h"
#include "tests/test_checkpoints.h"
#include "tests/test_cluster.h"

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

using testing::WaitUntil;
using testing::WeftBinary;

// Far more than any command here takes: a bound on a hang, which coreutils'
// `timeout` enforces (exit status 124).
constexpr int kCommandTimeoutSeconds = 240;

Result RunWeft(const std::string& args) {
  static std::atomic<int> runs{0};  // a fresh file per run
  const std::string err_path = TempPath(absl::StrCat("stderr_", ::getpid(), "_", ++runs));
  const std::string cmd = absl::StrCat("timeout --kill-after=10 ", kCommandTimeoutSeconds, " ", WeftBinary(), " ",
                                       args, " 2>", err_path);
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
  EXPECT_NE(r.exit_code, 124) << "`weft " << args << "` still ran after " << kCommandTimeoutSeconds
                              << " s and was stopped; its stderr:\n"
                              << r.err;
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
  EXPECT_GT(JsonNumber(r.out, "warmup_seconds"), 0);  // the first step, left out of samples_per_second
  EXPECT_GT(JsonNumber(r.out, "wall_seconds"), JsonNumber(r.out, "warmup_seconds"));
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
  const Result graphs = RunWeft("train x.pbtxt --cuda_graphs=maybe");
  EXPECT_EQ(graphs.exit_code, 2);
  EXPECT_NE(graphs.err.find("--cuda_graphs must be true or false, got 'maybe'"), std::string::npos) << graphs.err;
  // Refused before any call to the (absent) master.
  const Result unsized = RunWeft("scale job-1 --insecure --master=127.0.0.1:1");
  EXPECT_EQ(unsized.exit_code, 2);
  EXPECT_NE(unsized.err.find("--workers=N is required"), std::string::npos) << unsized.err;
  const Result zero = RunWeft("scale job-1 --workers=0 --insecure --master=127.0.0.1:1");
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--workers=0 must be an integer in [1, 65536]"), std::string::npos) << zero.err;
  // Registration with a master (`weft worker --master`): refused before the
  // task serves or dials anything.
  const struct {
    const char* args;
    const char* says;
  } registrations[] = {
      {"ps --task=ps:0 --listen=127.0.0.1:0 --master=127.0.0.1:1", "only a worker registers with the master"},
      {"worker --task=worker:0 --listen=127.0.0.1:0 --advertise=h:1", "it needs --master=HOST:PORT"},
      {"worker --task=worker:0 --listen=127.0.0.1:0 --master=h:0", "--master: 'h:0' is not host:port"},
      {"worker --task=worker:0 --listen=127.0.0.1:0 --master=h:1 --advertise=0.0.0.0:5", "is a wildcard"},
      {"worker --task=worker:0 --listen=127.0.0.1:0 --master=h:1 --advertise=a/b:5", "--advertise: 'a/b:5'"},
  };
  for (const auto& c : registrations) {
    const Result r = RunWeft(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
  }
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

// A checkpoint of `step` under `dir` as the ps and the master write it: one
// shard file, then (with `manifest`) the MANIFEST.
void WriteCheckpoint(const std::string& dir, int64_t step, bool manifest) {
  const std::string ckpt = JoinPath(dir, absl::StrFormat("step-%012d", step));
  ASSERT_TRUE(Env::Default()->CreateDirs(ckpt).ok());
  ps::Shard shard;
  shard.owner_task = "/job:ps/task:0";
  shard.global_step = step;
  Tensor t(DType::kFloat32, {4});
  for (int i = 0; i < 4; ++i) t.data<float>()[i] = static_cast<float>(i);
  shard.tensors.push_back({"w", t, ""});
  auto info = ps::WriteShard(Env::Default(), JoinPath(ckpt, "ps-0.shard"), shard);
  ASSERT_TRUE(info.ok()) << info.status();
  if (!manifest) return;
  CheckpointManifest m;
  m.set_job_name("quadrants");
  m.set_step(step);
  m.set_wall_time_micros(int64_t{1700000000} * 1000000);  // 2023-11-14T22:13:20Z
  ManifestShard* ms = m.add_shard();
  ms->set_file("ps-0.shard");
  ms->set_owner_task(shard.owner_task);
  ms->set_size(info->size);
  ms->set_crc32c(info->crc32c);
  ASSERT_TRUE(ps::WriteManifest(Env::Default(), ckpt, m).ok());
}

TEST(WeftCliTest, CheckpointsListsValidAndInvalidNewestFirst) {
  const std::string dir = MakeDir("checkpoints");
  WriteCheckpoint(dir, 100, /*manifest=*/true);
  WriteCheckpoint(dir, 200, /*manifest=*/false);  // its writer died before the manifest
  Result r = RunWeft(absl::StrCat("checkpoints ", dir));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_TRUE(absl::StrContains(lines[0], "200")) << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[0], dir + "/step-000000000200")) << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[0], "INVALID: no manifest " + dir + "/step-000000000200/MANIFEST")) << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1], "100")) << lines[1];
  EXPECT_TRUE(absl::StrContains(lines[1], "2023-11-14T22:13:20Z")) << lines[1];
  EXPECT_TRUE(absl::StrContains(lines[1], "1 shards")) << lines[1];
  EXPECT_TRUE(absl::StrContains(lines[1], dir + "/step-000000000100")) << lines[1];
  EXPECT_FALSE(absl::StrContains(lines[1], "INVALID")) << lines[1];

  r = RunWeft(absl::StrCat("checkpoints ", dir, " --output=json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_TRUE(absl::StartsWith(r.out, "[{\"step\": 200, ")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\"valid\": false")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "{\"step\": 100, ")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\"time\": \"2023-11-14T22:13:20Z\"")) << r.out;
  EXPECT_TRUE(absl::EndsWith(r.out, "}]\n")) << r.out;

  // Only the invalid one left: exit 1, saying so.
  ASSERT_TRUE(DeleteRecursively(Env::Default(), dir + "/step-000000000100").ok());
  r = RunWeft(absl::StrCat("checkpoints ", dir));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "no valid checkpoint in " + dir)) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "INVALID")) << r.out;
  EXPECT_EQ(RunWeft(absl::StrCat("checkpoints ", dir, "/missing")).exit_code, 1);
  EXPECT_EQ(RunWeft("checkpoints").exit_code, 2);
  EXPECT_EQ(RunWeft(absl::StrCat("checkpoints ", dir, " --output=yaml")).exit_code, 2);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The example job file `path` (under examples/); a test failure names it
// when it does not parse.
JobSpec ReadExample(const std::string& path) {
  JobSpec job;
  const std::string text = ReadAll(path);
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &job)) << path << ":\n" << text;
  return job;
}

// Writes `job` as text to dir/name; returns the file's path.
std::string WriteJob(const std::string& dir, const std::string& name, const JobSpec& job) {
  std::string text;
  EXPECT_TRUE(google::protobuf::TextFormat::PrintToString(job, &text));
  WriteFile(dir + "/" + name, text);
  return dir + "/" + name;
}

// `weft local --workers=2` of the job file, its logs and checkpoints under
// `dir`, with `flags` before the job, printing JSON.
Result RunLocal(const std::string& dir, const std::string& job_file, const std::string& flags = "") {
  return RunWeft(absl::StrCat("local --workers=2 --log_dir=", dir, " --checkpoint_root=", dir, "/ckpt ", flags,
                              flags.empty() ? "" : " ", job_file, " --output=json"));
}

// `weft local`'s tasks.txt: task name -> {pid, address}.
std::map<std::string, std::pair<pid_t, std::string>> ReadTasksFile(const std::string& path) {
  std::map<std::string, std::pair<pid_t, std::string>> tasks;
  std::ifstream in(path);
  std::string name, address;
  long pid = 0;
  while (in >> name >> pid >> address) tasks[name] = {static_cast<pid_t>(pid), address};
  return tasks;
}

TEST(WeftCliTest, LocalRestartsAKilledWorkerAtTheSameAddress) {
  const std::string dir = MakeDir("local_restart");
  const std::string err_path = dir + "/local.stderr";
  const std::string binary = WeftBinary();
  const std::string log_dir_flag = "--log_dir=" + dir;
  // Under the test's own directory, not the default /tmp/weft-checkpoints.
  const std::string checkpoint_root = dir + "/checkpoints";
  const std::string checkpoint_root_flag = "--checkpoint_root=" + checkpoint_root;
  // Serving mode (no job); everything the child needs is built before fork.
  std::vector<char*> args = {const_cast<char*>(binary.c_str()), const_cast<char*>("local"),
                             const_cast<char*>("--workers=1"), const_cast<char*>(log_dir_flag.c_str()),
                             const_cast<char*>("--max_restarts=2"), const_cast<char*>(checkpoint_root_flag.c_str()),
                             nullptr};
  const pid_t local = ::fork();
  ASSERT_GE(local, 0);
  if (local == 0) {
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(err, STDERR_FILENO);
    ::dup2(null, STDOUT_FILENO);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  bool reaped = false;
  auto exited = [&] {
    if (!reaped && ::waitpid(local, &status, WNOHANG) == local) reaped = true;
    return reaped;
  };
  struct KillOnExit {  // a failed assertion must not leave the cluster up
    pid_t pid;
    const bool* reaped;
    ~KillOnExit() {
      if (*reaped) return;
      ::kill(pid, SIGKILL);  // its tasks die with it
      ::waitpid(pid, nullptr, 0);
    }
  } cleanup{local, &reaped};

  // The supervisor starts once the cluster serves; tasks.txt is there by then.
  ASSERT_TRUE(WaitUntil(absl::Seconds(90), "weft local to serve", [&]() -> absl::StatusOr<bool> {
    if (exited()) return absl::FailedPreconditionError(absl::StrCat("weft local exited:\n", ReadAll(err_path)));
    return absl::StrContains(ReadAll(err_path), "serving; Ctrl-C stops every task");
  }));
  // The daemons were given the root: they created it, private.
  struct stat root_stat;
  ASSERT_EQ(::stat(checkpoint_root.c_str(), &root_stat), 0) << checkpoint_root;
  EXPECT_TRUE(S_ISDIR(root_stat.st_mode));
  EXPECT_EQ(root_stat.st_mode & 0777, 0700u);
  EXPECT_TRUE(absl::StrContains(ReadAll(dir + "/master-0.log"), "checkpoints confined to "))
      << ReadAll(dir + "/master-0.log");
  const std::string tasks_file = dir + "/tasks.txt";
  auto before = ReadTasksFile(tasks_file);
  ASSERT_EQ(before.count("worker:0"), 1u) << ReadAll(tasks_file);
  ASSERT_EQ(before.count("master:0"), 1u) << ReadAll(tasks_file);
  const pid_t old_pid = before["worker:0"].first;
  const std::string address = before["worker:0"].second;
  ASSERT_GT(old_pid, 0);
  // The port the worker bound (it was given port 0) and reported.
  EXPECT_EQ(address, absl::StrCat("127.0.0.1:", absl::StripTrailingAsciiWhitespace(ReadAll(dir + "/worker-0.port"))));
  EXPECT_NE(address, "127.0.0.1:0");
  ASSERT_EQ(::kill(old_pid, SIGKILL), 0);

  pid_t new_pid = 0;
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), "tasks.txt to list a restarted worker:0", [&] {
    auto now = ReadTasksFile(tasks_file);
    if (now.count("worker:0") == 0 || now["worker:0"].first == old_pid) return false;
    new_pid = now["worker:0"].first;
    return true;
  })) << ReadAll(err_path);
  EXPECT_EQ(ReadTasksFile(tasks_file)["worker:0"].second, address);
  EXPECT_EQ(::kill(new_pid, 0), 0) << "the restarted worker is not running";
  const std::string err = ReadAll(err_path);
  EXPECT_TRUE(
      absl::StrContains(err, "task worker:0 exited (killed by signal 9); restarting it (restart 1 of at most 2)"))
      << err;
  // The new process binds the same address and appends to the old log: the
  // daemon says where it serves once per start.
  const std::string worker_log = dir + "/worker-0.log";
  const std::string serving = absl::StrCat("serving on ", address, " (cluster");
  EXPECT_TRUE(WaitUntil(absl::Seconds(60), absl::StrCat("a second '", serving, "' in ", worker_log), [&] {
    const std::string log = ReadAll(worker_log);
    return log.find(serving) != log.rfind(serving);
  })) << ReadAll(worker_log);
  EXPECT_FALSE(exited());

  ASSERT_EQ(::kill(local, SIGTERM), 0);
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), "weft local to stop after SIGTERM", exited));
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << ReadAll(err_path);
  EXPECT_NE(::kill(new_pid, 0), 0) << "the restarted worker outlived weft local";
}

// examples/fmnist_resnet.pbtxt (batch norm, residual joins, global average
// pooling) under MULTI_WORKER_MIRRORED on a local cluster of two workers, on
// a slice of Fashion-MNIST. Its moving statistics decay faster than the
// example's (0.9, not 0.99) so that the few steps here carry them near the
// data's: evaluation reads them, so a job whose moving statistics did not
// advance, or advanced from the wrong values, would not get far above chance.
// The batch norms are synchronised (their sums meet across the two worker
// processes each way) and each replica's 32 rows run as 2 micro-batches,
// so both run here between real daemons on real data.
TEST(WeftCliTest, ResNetExampleTrainsUnderMultiWorkerMirrored) {
  if (::access(kFashionMnist, R_OK) != 0) GTEST_SKIP() << kFashionMnist << " is not installed";
  JobSpec job = ReadExample("examples/fmnist_resnet.pbtxt");
  int batch_norms = 0;
  for (LayerSpec& layer : *job.mutable_model()->mutable_layer()) {
    if (!layer.has_batch_norm()) continue;
    layer.mutable_batch_norm()->set_momentum(0.9f);
    layer.mutable_batch_norm()->set_synchronized(true);
    ++batch_norms;
  }
  ASSERT_EQ(batch_norms, 6);
  job.mutable_dataset()->set_train_limit(4096);
  job.mutable_dataset()->set_test_limit(1000);
  job.set_epochs(2);
  job.set_intra_op_threads(1);
  // The example's warm-up and cosine, fitted to these 128 steps.
  LearningRateSchedule* schedule = job.mutable_optimizer()->mutable_schedule();
  ASSERT_TRUE(schedule->has_cosine());
  schedule->set_warmup_steps(16);
  schedule->mutable_cosine()->set_decay_steps(112);
  job.mutable_optimizer()->set_gradient_accumulation_steps(2);
  job.mutable_strategy()->set_kind(StrategySpec::MULTI_WORKER_MIRRORED);
  const std::string dir = MakeDir("resnet");
  Result r = RunLocal(dir, WriteJob(dir, "job.pbtxt", job));
  ASSERT_EQ(r.exit_code, 0) << r.err << ReadAll(dir + "/master-0.log");
  EXPECT_EQ(JsonNumber(r.out, "steps"), 2 * 4096 / 64) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "test_examples"), 1000) << r.out;
  EXPECT_GT(JsonNumber(r.out, "test_accuracy"), 0.6) << r.out;  // chance is 0.10
}

// Mixed precision (float16 products, dynamic loss scaling, gradients
// all-reduced as float16) under MULTI_WORKER_MIRRORED: a first loss scale of 1e30 makes every gradient
// product overflow float16 (its largest value is 65504), so the first steps
// must be skipped, on both replicas alike, while the scale halves down to a
// usable one (about 2^20 here, after some 80 halvings); the model still
// learns from the steps after, and the checkpoint at the end holds the
// scale and the count of applied steps (Adam's t) of each replica. On a CPU
// the products round their operands as the GPU's tensor cores do.
TEST(WeftCliTest, MixedPrecisionSkipsOverflowingStepsUnderMultiWorkerMirrored) {
  if (::access(kFashionMnist, R_OK) != 0) GTEST_SKIP() << kFashionMnist << " is not installed";
  const std::string dir = MakeDir("mixed");
  JobSpec job;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(absl::StrCat(R"(model { input_shape: [784] num_classes: 10
      layer { dense { units: 64 activation: RELU } } layer { dense { units: 10 } } }
      dataset { dir: ")", kFashionMnist, R"(" train_limit: 12000 test_limit: 2000 }
      optimizer { adam { learning_rate: 0.002 } }
      mixed_precision { compute: FLOAT16 initial_loss_scale: 1e30 growth_interval: 100000
                        float16_all_reduce: true }
      strategy { kind: MULTI_WORKER_MIRRORED }
      batch_size: 64 epochs: 2 seed: 5 intra_op_threads: 1)"), &job));
  job.mutable_checkpoint()->set_dir(dir + "/ckpt/mixed");
  Result r = RunLocal(dir, WriteJob(dir, "job.pbtxt", job));
  ASSERT_EQ(r.exit_code, 0) << r.err << ReadAll(dir + "/master-0.log");
  EXPECT_GT(JsonNumber(r.out, "test_accuracy"), 0.75) << r.out;  // chance is 0.10
  auto ckpt = testing::ReadNewestCheckpoint(dir + "/ckpt/mixed");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  // Each worker's replica is saved: both skipped the same steps.
  auto scalar = [&](const std::string& task, const std::string& name) {
    auto it = ckpt->variables.find(absl::StrCat("/job:worker/task:", task, "|", name));
    float v = NAN;
    if (it == ckpt->variables.end() || it->second.bytes.size() != 4) {
      ADD_FAILURE() << "the checkpoint has no scalar " << name << " of worker " << task;
    } else {
      std::memcpy(&v, it->second.bytes.data(), 4);
    }
    return v;
  };
  const float scale = scalar("0", "loss_scale");
  EXPECT_EQ(scalar("1", "loss_scale"), scale);
  // Halved at least 60 times from 1e30 (2^99.7), never below 1, and no
  // growth (the interval is longer than the job).
  EXPECT_GE(scale, 1.0f);
  EXPECT_LE(scale, std::ldexp(1e30f, -60)) << "the overflowing steps did not halve the scale";
  // Adam counted only the applied steps, the same on both replicas.
  const float applied = scalar("0", "optimizer/layer0_dense/kernel/adam_t");
  EXPECT_EQ(scalar("1", "optimizer/layer1_dense/bias/adam_t"), applied);
  const double steps = JsonNumber(r.out, "steps");
  EXPECT_GT(applied, 0.5 * steps) << r.out;
  EXPECT_LE(applied, steps - 60) << r.out;
}

// examples/fmnist_lstm.pbtxt (image rows as the steps of an LSTM) under
// MULTI_WORKER_MIRRORED on two workers, on a slice of Fashion-MNIST: 64
// steps take it well above chance (0.10) only if the recurrence carries
// what earlier rows showed and its gradient flows back through the steps.
TEST(WeftCliTest, LstmExampleLearnsUnderMultiWorkerMirrored) {
  if (::access(kFashionMnist, R_OK) != 0) GTEST_SKIP() << kFashionMnist << " is not installed";
  JobSpec job = ReadExample("examples/fmnist_lstm.pbtxt");
  job.mutable_dataset()->set_train_limit(4096);
  job.mutable_dataset()->set_test_limit(1000);
  job.set_epochs(1);
  job.set_intra_op_threads(1);
  job.mutable_strategy()->set_kind(StrategySpec::MULTI_WORKER_MIRRORED);
  const std::string dir = MakeDir("lstm");
  Result r = RunLocal(dir, WriteJob(dir, "job.pbtxt", job));
  ASSERT_EQ(r.exit_code, 0) << r.err << ReadAll(dir + "/master-0.log");
  EXPECT_EQ(JsonNumber(r.out, "steps"), 4096 / 64) << r.out;
  EXPECT_GT(JsonNumber(r.out, "test_accuracy"), 0.5) << r.out;
}

// examples/seattle_weather_lstm.pbtxt, a regression on float targets (a
// SERIES dataset, mean squared error): in one process, whose summary gives
// the test loss and no accuracy, then under MULTI_WORKER_MIRRORED on two
// workers, whose evaluation runs on the master's copy of replica 0. The
// values are standardised, so an untrained model's test loss is around 1
// and repeating the last day gives 0.13: below 0.3 needs a model that
// learned from the windows.
TEST(WeftCliTest, SeattleWeatherRegressionLearnsInOneProcessAndUnderMultiWorkerMirrored) {
  constexpr char kWeather[] = "/usr/lib/python3/dist-packages/vega_datasets/_data/seattle-weather.csv";
  if (::access(kWeather, R_OK) != 0) GTEST_SKIP() << kWeather << " is not installed (make deps installs it)";
  JobSpec job = ReadExample("examples/seattle_weather_lstm.pbtxt");
  job.set_epochs(6);
  job.set_intra_op_threads(1);
  const std::string dir = MakeDir("weather");
  Result one = RunWeft(absl::StrCat("train ", WriteJob(dir, "one.pbtxt", job)));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_TRUE(absl::StrContains(one.out, ", test loss 0.")) << one.out;
  EXPECT_FALSE(absl::StrContains(one.out, "accuracy")) << one.out;

  job.mutable_strategy()->set_kind(StrategySpec::MULTI_WORKER_MIRRORED);
  // The data lie outside the daemons' default data root, /usr/share/datasets.
  Result r = RunLocal(dir, WriteJob(dir, "mwm.pbtxt", job),
                      "--data_root=/usr/lib/python3/dist-packages/vega_datasets/_data");
  ASSERT_EQ(r.exit_code, 0) << r.err << ReadAll(dir + "/master-0.log");
  // 1461 days, the last 146 for test: 1315 - 30 train windows, 40 steps of 32 an epoch.
  EXPECT_EQ(JsonNumber(r.out, "steps"), 6 * (1285 / 32)) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "test_examples"), 146 - 30) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "test_accuracy"), -1) << r.out;
  EXPECT_GT(JsonNumber(r.out, "test_loss"), 0) << r.out;
  EXPECT_LT(JsonNumber(r.out, "test_loss"), 0.3) << r.out;
}

// examples/kjv_transformer.pbtxt (byte embeddings, learned positions, causal
// self-attention, layer norm, residual joins, a TEXT dataset whose labels
// are every position's next byte) under MULTI_WORKER_MIRRORED on two
// workers, on a slice of the corpus. Evaluation is per predicted byte; the
// corpus's unigram entropy is 3.07 nats, so a loss below 2.9 needs the
// model to read the bytes before each position.
TEST(WeftCliTest, TransformerExampleLearnsTheCorpusUnderMultiWorkerMirrored) {
  JobSpec job = ReadExample("examples/kjv_transformer.pbtxt");
  // The corpus the build wrote, copied under a data root of the test's own
  // (the runfiles hold a symbolic link, which a data root refuses).
  const std::string dir = MakeDir("transformer");
  ASSERT_EQ(::mkdir((dir + "/data").c_str(), 0700), 0) << errno;
  WriteFile(dir + "/data/kjv.txt", ReadAll("examples/kjv.txt"));
  job.mutable_dataset()->set_dir(dir + "/data");
  job.mutable_dataset()->set_train_limit(2048);
  job.mutable_dataset()->set_test_limit(64);
  job.set_epochs(1);
  job.set_intra_op_threads(1);
  LearningRateSchedule* schedule = job.mutable_optimizer()->mutable_schedule();
  schedule->set_warmup_steps(8);
  schedule->mutable_cosine()->set_decay_steps(56);
  job.mutable_strategy()->set_kind(StrategySpec::MULTI_WORKER_MIRRORED);
  Result r = RunLocal(dir, WriteJob(dir, "job.pbtxt", job), absl::StrCat("--data_root=", dir, "/data"));
  ASSERT_EQ(r.exit_code, 0) << r.err << ReadAll(dir + "/master-0.log");
  EXPECT_EQ(JsonNumber(r.out, "steps"), 2048 / 32) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "test_examples"), 64 * 128) << r.out;  // one prediction per byte
  EXPECT_LT(JsonNumber(r.out, "test_loss"), 2.9) << r.out;
  EXPECT_GT(JsonNumber(r.out, "test_accuracy"), 0.2) << r.out;
}

// eval.top_k: the JSON reports top-3 accuracy, at least the top-1 accuracy
// and at most 1; an IDX dataset reports no perplexity.
TEST(WeftCliTest, ReportsTopKAccuracy) {
  if (::access(kFashionMnist, R_OK) != 0) GTEST_SKIP() << kFashionMnist << " is not installed";
  const std::string dir = MakeDir("fmnist_top_k");
  WriteFile(dir + "/job.pbtxt", absl::StrCat(R"(model { input_shape: [784] num_classes: 10
      layer { dense { units: 32 activation: RELU } } layer { dense { units: 10 } } }
      dataset { dir: ")", kFashionMnist, R"(" train_limit: 2000 test_limit: 1000 }
      optimizer { momentum { learning_rate: 0.02 momentum: 0.9 } }
      eval { top_k: 3 }
      batch_size: 64 epochs: 1 seed: 5 intra_op_threads: 1)"));
  Result r = RunWeft(absl::StrCat("train ", dir, "/job.pbtxt --output=json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double top1 = JsonNumber(r.out, "test_accuracy"), top3 = JsonNumber(r.out, "test_top_k_accuracy");
  EXPECT_GT(top1, 0.3) << r.out;  // chance is 0.10
  EXPECT_GE(top3, top1) << r.out;
  EXPECT_LE(top3, 1.0) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "test_perplexity"), -1) << r.out;
  // The text summary names it too.
  r = RunWeft(absl::StrCat("train ", dir, "/job.pbtxt"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "test top-k accuracy")) << r.out;
}

}  // namespace
}  // namespace weft
