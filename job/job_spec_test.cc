#include "job/job_spec.h"

#include <fstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

constexpr char kValid[] = R"(name: "j"
model { input_shape: [4] num_classes: 2 layer { dense { units: 2 } } }
dataset { dir: "data" }
batch_size: 8
epochs: 1
)";

TEST(JobFileTest, ResolvesRelativeDatasetDirAgainstTheJobFile) {
  auto job = LoadJobFile(Write("rel.pbtxt", kValid));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->dataset().dir(), ::testing::TempDir() + "/data");
  EXPECT_TRUE(ValidateJob(*job).ok());
}

TEST(JobFileTest, TextErrorsCarryFileLineAndColumn) {
  auto job = LoadJobFile(Write("bad.pbtxt", "name: \"j\"\nbatch_size: \"eight\"\n"));
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::StrContains(job.status().message(), "bad.pbtxt:2:")) << job.status();
}

TEST(JobFileTest, JsonIsParsedByProtobufAndRejectsUnknownFields) {
  auto ok = ParseJob(R"({"name": "j", "batchSize": 8, "epochs": 1})", "inline");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->batch_size(), 8);
  auto bad = ParseJob(R"({"name": "j", "batchSise": 8})", "inline.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "inline.json")) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "batchSise")) << bad.status();
}

TEST(JobFileTest, ValidationNamesTheField) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"epochs: 1 dataset { dir: 'd' } model {}", "batch_size"},
      {"batch_size: 2 dataset { dir: 'd' } model {}", "epochs or steps"},
      {"batch_size: 2 epochs: 1 model {}", "dataset"},
      {"batch_size: 2 epochs: 1 dataset { dir: 'd' }", "model"},
      {"batch_size: 2 epochs: 1 model {} dataset { format: TFRECORD }", "train_files"},
  };
  for (const Case& c : cases) {
    auto job = ParseJob(c.text, "case");
    ASSERT_TRUE(job.ok()) << c.text;
    absl::Status s = ValidateJob(*job);
    EXPECT_FALSE(s.ok()) << c.text;
    EXPECT_TRUE(absl::StrContains(s.message(), c.expect)) << c.text << " -> " << s;
  }
}

// Job texts and what ValidateJob says of each: "" when valid, else a part of
// its error.
struct ValidationCase {
  std::string text;
  const char* expect;
};

void ExpectValidation(const std::vector<ValidationCase>& cases) {
  for (const ValidationCase& c : cases) {
    auto job = ParseJob(c.text, "case");
    ASSERT_TRUE(job.ok()) << c.text << ": " << job.status();
    absl::Status s = ValidateJob(*job);
    if (*c.expect == '\0') {
      EXPECT_TRUE(s.ok()) << c.text << " -> " << s;
    } else {
      EXPECT_FALSE(s.ok()) << c.text;
      EXPECT_TRUE(absl::StrContains(s.message(), c.expect)) << c.text << " -> " << s;
    }
  }
}

TEST(JobFileTest, CheckpointAndRecoveryPoliciesAreChecked) {
  const std::string base = "batch_size: 2 epochs: 1 model {} dataset { dir: 'd' } ";
  const std::vector<ValidationCase> cases = {
      {base + "strategy { kind: PARAMETER_SERVER } checkpoint { dir: '/ckpt' every_steps: 10 }", ""},
      {base + "strategy { kind: PARAMETER_SERVER } checkpoint { dir: 'a/../../etc' }", "checkpoint.dir 'a/../../etc' must not contain '..'"},
      {base + "strategy { kind: PARAMETER_SERVER } checkpoint { dir: '/c' resume_from: '../old' }", "checkpoint.resume_from '../old' must not contain"},
      {base + "strategy { kind: PARAMETER_SERVER } checkpoint { every_steps: 10 }", "checkpoint.dir is empty"},
      {base + "strategy { kind: PARAMETER_SERVER } checkpoint { dir: '/c' keep: -1 }", "cannot be negative"},
      {base + "checkpoint { dir: '/c' }", "need a distribution strategy"},
      {base + "strategy { kind: PARAMETER_SERVER sync: true replicas_to_aggregate: 1 } checkpoint { dir: '/c' }", ""},
      {base + "strategy { kind: PARAMETER_SERVER } recovery { max_restarts: -2 }", "max_restarts"},
      {base + "strategy { kind: PARAMETER_SERVER } recovery { max_restarts: -1 task_wait_seconds: 5 }", ""},
  };
  ExpectValidation(cases);
}

TEST(JobFileTest, ElasticPolicyIsChecked) {
  const std::string base = "batch_size: 12 epochs: 1 model {} dataset { dir: 'd' } ";
  const std::string mwm = base + "strategy { kind: MULTI_WORKER_MIRRORED } ";
  const std::vector<ValidationCase> cases = {
      {mwm + "elastic { min_workers: 2 max_workers: 4 }", ""},
      {mwm + "elastic {}", ""},
      {base + "strategy { kind: PARAMETER_SERVER } elastic { min_workers: 1 }", ""},
      {base + "strategy { kind: PARAMETER_SERVER sync: true } elastic { min_workers: 1 }", ""},
      {base + "strategy { kind: PARAMETER_SERVER sync: true replicas_to_aggregate: 1 } elastic { min_workers: 1 }",
       "not replicas_to_aggregate 1"},
      {base + "strategy { kind: MIRRORED } elastic { min_workers: 1 }", "not MIRRORED (its replicas share one"},
      {base + "strategy { kind: CENTRAL_STORAGE } elastic {}", "MULTI_WORKER_MIRRORED or PARAMETER_SERVER, not "},
      {base + "elastic { min_workers: 1 }", "not NONE"},
      {mwm + "elastic { min_workers: -1 }", "cannot be negative"},
      {mwm + "elastic { wait_seconds: -2 }", "wait_seconds (-2) must be >= -1"},
      {mwm + "elastic { min_workers: 3 max_workers: 2 }", "max_workers 2 is below min_workers 3"},
      {mwm + "elastic { min_workers: 5 max_workers: 5 }",
       "no worker count from elastic.min_workers 5 to max_workers 5"},
  };
  ExpectValidation(cases);
}

TEST(JobFileTest, SummaryPolicyIsChecked) {
  const std::string base = "batch_size: 2 epochs: 1 model {} dataset { dir: 'd' } ";
  struct Case {
    std::string text;
    const char* expect;  // "" when valid
  } cases[] = {
      {base + "summary { dir: 'tb' every_steps: 10 }", ""},
      {base + "summary { dir: '/ckpt/tb' }", ""},  // every_steps 0: the default
      {base + "summary { every_steps: 10 }", "summary.dir is empty"},
      {base + "summary {}", "summary.dir is empty"},
      {base + "summary { dir: 'tb' every_steps: -1 }", "summary.every_steps cannot be negative, got -1"},
      {base + "summary { dir: 'tb/../../etc' }", "summary.dir 'tb/../../etc' must not contain '..'"},
      {base + "summary { dir: '..' }", "must not contain '..'"},
  };
  for (const Case& c : cases) {
    auto job = ParseJob(c.text, "case");
    ASSERT_TRUE(job.ok()) << c.text << ": " << job.status();
    absl::Status s = ValidateJob(*job);
    if (*c.expect == '\0') {
      EXPECT_TRUE(s.ok()) << c.text << " -> " << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text << " -> " << s;
      EXPECT_TRUE(absl::StrContains(s.message(), c.expect)) << c.text << " -> " << s;
    }
  }
  // No summary message at all: no event files, nothing to check.
  auto none = ParseJob(base, "case");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_summary());
  EXPECT_TRUE(ValidateJob(*none).ok());
}

// Moved here from the master's Submit: the same codes and texts, now also
// for the CLI.
TEST(JobFileTest, StrategySettingsThatNeedNoClusterAreChecked) {
  const std::string base = "batch_size: 2 epochs: 1 model {} dataset { dir: 'd' } ";
  struct Case {
    std::string text;
    absl::StatusCode code;
    const char* expect;  // "" when valid
  } cases[] = {
      {base + "strategy { steps_per_execution: 4 }", absl::StatusCode::kUnimplemented,
       "steps_per_execution > 1 needs a distribution strategy"},
      {base + "strategy { kind: PARAMETER_SERVER sync: true replicas_to_aggregate: 1 steps_per_execution: 4 }",
       absl::StatusCode::kUnimplemented, "replicas_to_aggregate 1"},
      {base + "strategy { kind: MIRRORED steps_per_execution: 4 }", absl::StatusCode::kOk, ""},
      {base + "strategy { kind: MULTI_WORKER_MIRRORED steps_in_flight: 3 }", absl::StatusCode::kOk, ""},
      {base + "strategy { kind: MULTI_WORKER_MIRRORED steps_in_flight: 9 }", absl::StatusCode::kInvalidArgument,
       "strategy.steps_in_flight 9 is out of range: 1 to 8"},
      {base + "strategy { kind: PARAMETER_SERVER steps_in_flight: -1 }", absl::StatusCode::kInvalidArgument,
       "strategy.steps_in_flight -1 is out of range"},
      {base + "strategy { kind: MIRRORED replicas_to_aggregate: 1 }", absl::StatusCode::kInvalidArgument,
       "job: strategy MIRRORED does not take replicas_to_aggregate (1)"},
      {base + "strategy { kind: PARAMETER_SERVER replicas_to_aggregate: 2 }", absl::StatusCode::kInvalidArgument,
       "with sync: true only"},
      {base + "strategy { kind: MULTI_WORKER_MIRRORED cross_device_ops: NCCL }", absl::StatusCode::kInvalidArgument,
       "cross_device_ops NCCL is for MIRRORED, not MULTI_WORKER_MIRRORED"},
      {base + "strategy { kind: MIRRORED cross_device_ops: REDUCE_TO_FIRST_DEVICE }", absl::StatusCode::kOk, ""},
      {base + "strategy { replicas_to_aggregate: 3 }", absl::StatusCode::kInvalidArgument,
       "replicas_to_aggregate 3 applies to kind PARAMETER_SERVER with sync: true only, and the job has no strategy"},
      // A job without a strategy ignores the strategy's other settings.
      {base + "strategy { cross_device_ops: NCCL num_devices: 2 }", absl::StatusCode::kOk, ""},
  };
  for (const Case& c : cases) {
    auto job = ParseJob(c.text, "case");
    ASSERT_TRUE(job.ok()) << c.text << ": " << job.status();
    absl::Status s = ValidateJob(*job);
    EXPECT_EQ(s.code(), c.code) << c.text << " -> " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.expect)) << c.text << " -> " << s;
  }
}

TEST(JobFileTest, MissingFileIsNotFound) {
  auto job = LoadJobFile("/nonexistent/job.pbtxt");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(job.status().message(), "/nonexistent/job.pbtxt"));
}

}  // namespace
}  // namespace weft
