// A stalled step, named: a MULTI_WORKER_MIRRORED job runs on two worker
// processes (and a master) on loopback, over mTLS as users run them. The
// test stops worker 1 (SIGSTOP) mid-job; within a bounded time `weft status`
// says the step (or the checkpoint the stop lands in) waits on worker:1 (the
// master asked every task what it waits on, and worker 1 did not answer),
// and the master's log says it once.
// After SIGCONT the job finishes SUCCEEDED (through a recovery when the
// heartbeat judged the stopped worker lost: docs/observability.md), and the
// diagnosis stays in its status, no longer active, beside each task's step
// time.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/grpc_master_client.h"
#include "client/subprocess.h"
#include "common/status_macros.h"
#include "common/test_util.h"
#include "gtest/gtest.h"
#include "job/job_spec.h"
#include "runtime/data/test_files.h"
#include "tests/test_cluster.h"
#include "tests/test_tls.h"

namespace weft {
namespace {

using data::testing::TempPath;

constexpr int kSteps = 2000;
constexpr int kStopAtStep = 100;
constexpr int kStallAfter = 3;
// Far beyond what each wait needs: the stall is diagnosed about 5 s after the
// stop (a 3 s floor, a 2 s probe), a healthy run takes seconds.
constexpr absl::Duration kDiagnosisDeadline = absl::Seconds(90);
constexpr absl::Duration kJobDeadline = absl::Seconds(200);

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Lines of `text` that contain `needle`.
int CountLines(const std::string& text, const std::string& needle) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) n += absl::StrContains(line, needle) ? 1 : 0;
  return n;
}

class HangTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tag_ = absl::StrCat("hang-", ::getpid());
    auto tls = testing::TestTls::Create(Path("tls"));
    ASSERT_TRUE(tls.ok()) << tls.status();
    tls_ = std::make_unique<testing::TestTls>(*std::move(tls));
    data_ = testing::WriteThreeClassData(Path("data"), 480);
    const std::string root = "--checkpoint_root=" + ::testing::TempDir();
    Add("worker-0", {"worker", "--task=worker:0", root});
    Add("worker-1", {"worker", "--task=worker:1", root});
    for (auto& [name, d] : daemons_) ASSERT_TRUE(d->Launch().ok()) << name;
    for (auto& [name, d] : daemons_) {
      absl::Status s = d->AwaitPort();
      ASSERT_TRUE(s.ok()) << s;
    }
    const std::string cluster =
        absl::StrCat("worker=", daemons_["worker-0"]->address(), ",", daemons_["worker-1"]->address());
    // Stalled after 3 s (the default is 5): the flag reaches the watch.
    testing::TestDaemon* master =
        Add("master", {"master", "--cluster=" + cluster, root, absl::StrCat("--stall_after_seconds=", kStallAfter)});
    absl::Status s = master->Start();
    ASSERT_TRUE(s.ok()) << s;
    client_ = MasterClient::Create(master->address(), tls_->ClientOptions());
    ASSERT_TRUE(testing::WaitForCluster(client_.get(), 2, All()));
    auto user = tls_->User("tester", Role::kAdmin);
    ASSERT_TRUE(user.ok()) << user.status();
    cli_flags_ = absl::StrCat("--master=", master->address(), " --ca=", tls_->ca(), " --cert=", user->first,
                              " --key=", user->second);
  }

  void TearDown() override {
    for (auto& [name, d] : daemons_) {
      Subprocess* p = d->process();
      if (!p->Running()) continue;
      p->Signal(SIGCONT);  // a failed test must not leave a stopped process behind
      p->Signal(SIGTERM);
      ASSERT_TRUE(p->WaitFor(absl::Seconds(30))) << name << " did not stop on SIGTERM";
    }
  }

  std::string Path(const std::string& name) const { return TempPath(absl::StrCat(tag_, "-", name)); }

  testing::TestDaemon* Add(const std::string& name, std::vector<std::string> args) {
    for (const std::string& flag : tls_->DaemonFlags(testing::DaemonIdentity(name))) args.push_back(flag);
    args.push_back("--data_root=" + ::testing::TempDir());
    auto& d = daemons_[name];
    d = std::make_unique<testing::TestDaemon>(name, std::move(args), Path(name + ".log"));
    return d.get();
  }
  std::vector<testing::TestDaemon*> All() {
    std::vector<testing::TestDaemon*> all;
    for (auto& [name, d] : daemons_) all.push_back(d.get());
    return all;
  }

  // `weft status <args>` as a user would run it; its stdout, or the error.
  absl::StatusOr<std::string> WeftStatus(const std::string& args) {
    const std::string err = Path("status.stderr");
    const std::string cmd =
        absl::StrCat("timeout --kill-after=5 60 ", testing::WeftBinary(), " status ", args, " ", cli_flags_, " 2>", err);
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return absl::InternalError("popen failed");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    const int status = ::pclose(p);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return absl::InternalError(absl::StrCat("`weft status ", args, "` exited with ", status, ": ", ReadText(err)));
    }
    return out;
  }

  std::string tag_, data_, cli_flags_;
  std::unique_ptr<testing::TestTls> tls_;
  std::map<std::string, std::unique_ptr<testing::TestDaemon>> daemons_;
  std::unique_ptr<MasterClient> client_;
};

TEST_F(HangTest, AStoppedWorkerIsNamedAsTheOneTheStepWaitsOn) {
  auto job = ParseJob(absl::StrCat(R"(name: "hang-job"
      model { input_shape: [12] num_classes: 3
              layer { dense { units: 16 activation: RELU } } layer { dense { units: 3 } } }
      dataset { dir: ")", data_, R"(" } optimizer { sgd { learning_rate: 0.1 } } seed: 2 intra_op_threads: 1
      batch_size: 16 steps: )", kSteps, R"(
      checkpoint { dir: ")", Path("ckpt"), R"(" every_steps: 200 }
      strategy { kind: MULTI_WORKER_MIRRORED })"),
                      "hang_test");
  ASSERT_TRUE(job.ok()) << job.status();
  auto id = client_->SubmitJob(*job);
  ASSERT_TRUE(id.ok()) << id.status();
  JobStatus st;
  ASSERT_TRUE(testing::WaitUntil(kJobDeadline, absl::StrCat("job ", *id, " to reach step ", kStopAtStep),
                                 [&]() -> absl::StatusOr<bool> {
                                   ASSIGN_OR_RETURN(st, client_->GetJob(*id));
                                   if (st.state() == SUCCEEDED || st.state() == FAILED) {
                                     return absl::FailedPreconditionError(st.DebugString());
                                   }
                                   return st.step() >= kStopAtStep;
                                 }));

  Subprocess* worker1 = daemons_["worker-1"]->process();
  const absl::Time stopped = absl::Now();
  worker1->Signal(SIGSTOP);
  std::string said;
  const bool named = testing::WaitUntil(kDiagnosisDeadline, "`weft status` to say the step waits on worker:1",
                                        [&]() -> absl::StatusOr<bool> {
                                          ASSIGN_OR_RETURN(said, WeftStatus(*id));
                                          return absl::StrContains(said, " waits on worker:1");
                                        });
  const absl::Duration took = absl::Now() - stopped;
  worker1->Signal(SIGCONT);
  ASSERT_TRUE(named) << said;
  std::printf("[hang] worker 1 named %.1f s after SIGSTOP:\n%s", absl::ToDoubleSeconds(took), said.c_str());
  // Not before the floor: no step is stalled sooner.
  EXPECT_GE(took, absl::Seconds(kStallAfter)) << said;
  // Said while the step still waits ("stalled"), or, had the connection to
  // the stopped worker been declared dead first, as the last stall. The
  // stop may land in a checkpoint (every 200 steps), which a stopped worker
  // holds up as it does a step: "the checkpoint of step 200 (...) waits on".
  EXPECT_TRUE(absl::StrContains(said, "  stalled: step ") || absl::StrContains(said, "  last stall: step ") ||
              absl::StrContains(said, "  stalled: the checkpoint of step ") ||
              absl::StrContains(said, "  last stall: the checkpoint of step "))
      << said;
  EXPECT_TRUE(absl::StrContains(said, "step time per task:")) << said;
  EXPECT_TRUE(absl::StrContains(said, "/job:worker/task:0")) << said;

  // The master's log says it, once however often it asked again.
  const std::string master_log = daemons_["master"]->log();
  ASSERT_TRUE(testing::WaitUntil(kDiagnosisDeadline, "the master's log to name worker:1",
                                 [&] { return CountLines(ReadText(master_log), " waits on worker:1") > 0; }));

  for (absl::string_view line : absl::StrSplit(ReadText(master_log), '\n')) {
    if (absl::StrContains(line, "job 'hang-job': ")) std::printf("[hang] master: %s\n", std::string(line).c_str());
  }

  JobStatus end = testing::WatchJobToEnd(client_.get(), *id, kJobDeadline);
  EXPECT_EQ(end.state(), SUCCEEDED) << end.DebugString();
  EXPECT_EQ(end.step(), kSteps);
  std::printf("[hang] job ended %s after %d restart(s)\n", JobState_Name(end.state()).c_str(), end.restarts());
  absl::StatusOr<JobStatus> final_status = client_->GetJob(*id);
  ASSERT_TRUE(final_status.ok()) << final_status.status();
  EXPECT_TRUE(absl::StrContains(final_status->diagnosis(), " waits on worker:1")) << final_status->DebugString();
  EXPECT_FALSE(final_status->diagnosis_active()) << final_status->DebugString();
  EXPECT_EQ(final_status->task_step_time_size(), 2) << final_status->DebugString();
  EXPECT_EQ(CountLines(ReadText(master_log), " waits on worker:1"), 1) << ReadText(master_log);
  absl::StatusOr<std::string> json = WeftStatus(absl::StrCat(*id, " --output=json"));
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_TRUE(absl::StrContains(*json, "\"diagnosis_active\": false")) << *json;
  EXPECT_TRUE(absl::StrContains(*json, "\"task_step_time\": [{\"task\": \"/job:worker/task:0\"")) << *json;
}

}  // namespace
}  // namespace weft
