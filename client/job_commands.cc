#include "client/job_commands.h"

#include "common/env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/grpc_client_auth.h"
#include "client/flags.h"
#include "job/job_spec.h"
#include "client/progress.h"
#include "common/status_macros.h"

namespace weft {
namespace {

std::string StateName(JobState s) {
  switch (s) {
    case PENDING: return "PENDING";
    case RUNNING: return "RUNNING";
    case SUCCEEDED: return "SUCCEEDED";
    case FAILED: return "FAILED";
    case CANCELLED: return "CANCELLED";
    case RECOVERING: return "RECOVERING";
    case PREEMPTED: return "PREEMPTED";
    default: return "UNKNOWN";
  }
}

bool Terminal(JobState s) { return s == SUCCEEDED || s == FAILED || s == CANCELLED; }

int Usage(const char* cmd, const std::string& msg) {
  std::fprintf(stderr, "weft %s: %s\n", cmd, msg.c_str());
  return 2;
}

int Error(const absl::Status& s) {
  std::fprintf(stderr, "weft: %s\n", std::string(s.message()).c_str());
  return 1;
}

// Parses flags common to the job commands and connects to the master.
struct Common {
  Flags flags;
  std::unique_ptr<MasterClient> client;
  bool json = false;
};

absl::StatusOr<Common> Connect(int argc, char** argv, const std::set<std::string>& booleans,
                               std::set<std::string> valued = {}) {
  valued.insert({"master", "output"});
  valued.insert(ClientAuthValuedFlags().begin(), ClientAuthValuedFlags().end());
  std::set<std::string> all_booleans = booleans;
  all_booleans.insert(ClientAuthBooleanFlags().begin(), ClientAuthBooleanFlags().end());
  ASSIGN_OR_RETURN(Flags f, Flags::Parse(argc, argv, 2, valued, all_booleans));
  std::string master = f.Get("master");
  if (master.empty() && std::getenv("WEFT_MASTER") != nullptr) master = std::getenv("WEFT_MASTER");
  if (master.empty()) return absl::InvalidArgumentError("no master: pass --master=HOST:PORT or set WEFT_MASTER");
  const std::string output = f.Get("output", "text");
  if (output != "text" && output != "json") {
    return absl::InvalidArgumentError(absl::StrCat("--output must be text or json, got '", output, "'"));
  }
  MasterClientOptions options;
  ASSIGN_OR_RETURN(options.credentials, ClientChannelCredentials(ClientCredentialFilesFrom(f)));
  Common c;
  c.flags = std::move(f);
  c.json = output == "json";
  c.client = MasterClient::Create(master, options);
  return c;
}

std::string StatusLine(const JobStatus& s) {
  std::string line = absl::StrFormat("%-14s %-20s %-10s %d/%d", s.job_id(), s.name(), StateName(s.state()), s.step(),
                                     s.total_steps());
  if (s.step() > 0) absl::StrAppendFormat(&line, " loss %.4f", s.loss());
  if (s.test_accuracy() >= 0 && Terminal(s.state())) absl::StrAppendFormat(&line, " test accuracy %.4f", s.test_accuracy());
  if (s.state() == RECOVERING && !s.failed_task().empty()) absl::StrAppend(&line, " failed task ", s.failed_task());
  if (s.restarts() > 0) absl::StrAppend(&line, " restarts ", s.restarts());
  if (s.diagnosis_active()) absl::StrAppend(&line, " stalled");
  if (!s.error().empty()) absl::StrAppend(&line, " error: ", s.error());
  return line;
}

// The JSON of `weft status` and `weft jobs`: ResultFromStatus's object with
// the recovery fields added.
std::string StatusJson(const JobStatus& s) {
  std::string json = ResultFromStatus(s).ToJson();
  json.insert(json.rfind('}'), absl::StrCat(", ", RecoveryJsonFields(s), ", ", StepTimeJsonFields(s)));
  return json;
}

// Rides out a master that goes away while a job is followed (a restart):
// says so once per outage, waits for the channel to connect again, and gives
// up once the master has been away for `limit` without a break.
class MasterOutage {
 public:
  // `client` and `display` must outlive this.
  MasterOutage(MasterClient* client, ProgressDisplay* display, const std::string& job_id, absl::Duration limit)
      : client_(client), display_(display), job_id_(job_id), limit_(limit) {}

  // After a call to the master failed with `s`: OK to make the call again
  // (the master is back, or may be), else the error to report.
  absl::Status Wait(const absl::Status& s) {
    if (s.code() != absl::StatusCode::kUnavailable || limit_ <= absl::ZeroDuration()) return s;
    if (!down_) {
      down_ = true;
      had_outage_ = true;
      since_ = absl::Now();
      tries_ = 0;
      display_->Notice(absl::StrFormat("weft: master unavailable; waiting for it to come back (up to %d s)",
                                       absl::ToInt64Seconds(limit_)));
    }
    const absl::Time give_up = since_ + limit_;
    const absl::Status gone =
        Annotate(s, absl::StrCat("the master did not come back within ", absl::FormatDuration(limit_)));
    if (absl::Now() >= give_up) return gone;
    // A master that is up but not serving yet answers UNAVAILABLE at once:
    // back off between such tries (0.2 s, doubling to 1.6 s).
    if (tries_ > 0) absl::SleepFor(std::min(give_up - absl::Now(), absl::Milliseconds(100 << std::min(tries_, 4))));
    ++tries_;
    if (!client_->WaitForConnection(give_up - absl::Now()).ok()) return gone;
    return absl::OkStatus();
  }

  // The master answered: a later failure starts a new outage.
  void Answered() {
    if (down_) display_->Notice(absl::StrCat("weft: the master is back; following job ", job_id_, " again"));
    down_ = false;
  }

  bool had_outage() const { return had_outage_; }

 private:
  MasterClient* const client_;
  ProgressDisplay* const display_;
  const std::string job_id_;
  const absl::Duration limit_;
  bool down_ = false;
  bool had_outage_ = false;
  absl::Time since_;
  int tries_ = 0;
};

// --master_wait_seconds, as FollowJob takes it.
absl::StatusOr<absl::Duration> MasterWait(const Flags& f) {
  ASSIGN_OR_RETURN(int seconds, f.GetInt("master_wait_seconds", 120, 0, 86400));
  return absl::Seconds(seconds);
}

}  // namespace

TrainResult ResultFromStatus(const JobStatus& s) {
  TrainResult r;
  r.state = s.state();
  r.job = s.name();
  r.steps = s.step();
  r.epochs = s.epoch();
  r.train_loss = s.train_loss();
  r.test_accuracy = s.test_accuracy();
  r.test_loss = s.test_loss();
  r.test_examples = s.test_examples();
  r.test_top_k_accuracy = s.test_top_k_accuracy();
  r.test_perplexity = s.test_perplexity();
  r.samples_per_second = s.samples_per_second();
  r.warmup_seconds = s.warmup_seconds();
  r.wall_seconds = s.wall_seconds();
  return r;
}

absl::Status SetResumeFrom(const std::string& dir, JobSpec* job) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--resume_from: '", dir, "': ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("--resume_from: '", dir, "' is not a directory"));
  }
  std::string path = dir;
  if (path.front() != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("--resume_from: '", dir, "': cannot make it absolute: ",
                                                     std::strerror(errno)));
    }
    path = absl::StrCat(cwd, "/", path);
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  job->mutable_checkpoint()->set_resume_from(path);
  return absl::OkStatus();
}

int FollowJob(MasterClient* client, const std::string& job_id, bool json, absl::Duration master_wait) {
  ProgressDisplay display(stderr, isatty(fileno(stderr)) != 0);
  MasterOutage outage(client, &display, job_id, master_wait);
  JobStatus last;
  int64_t last_epoch = 0;
  int32_t recovered_shown = 0;  // the restarts a "recovered" line was printed for
  auto on_status = [&](const JobStatus& st) {
    outage.Answered();
    const JobStatus previous = std::exchange(last, st);
    if (st.diagnosis_active() && !previous.diagnosis_active()) display.Notice("stalled: " + st.diagnosis());
    if (st.state() == RECOVERING && (previous.state() != RECOVERING || st.restarts() != previous.restarts())) {
      display.Notice(RecoveringLine(st));
    } else if (st.state() == RUNNING && (previous.state() == RECOVERING || st.restarts() > recovered_shown)) {
      // The second case: a restarted master resumed the job before this
      // client saw it recovering.
      display.Notice(RecoveredLine(st));
      recovered_shown = st.restarts();
    }
    if (st.state() != RUNNING || st.total_steps() == 0) return;
    // While a job runs, `epoch` is the current epoch, from 1.
    TrainProgress p;
    p.step = st.step();
    p.total_steps = st.total_steps();
    p.epoch = st.epoch();
    p.epochs = st.epochs();
    p.loss = st.loss();
    p.samples_per_second = st.samples_per_second();
    p.elapsed_seconds = st.wall_seconds();
    if (last_epoch > 0 && st.epoch() > last_epoch) {  // an epoch closed since the last update
      TrainProgress end = p;
      end.epoch = last_epoch;
      end.loss = st.train_loss();
      end.epoch_end = true;
      display.Update(end);
    }
    last_epoch = st.epoch();
    display.Update(p);
  };
  absl::Status s;
  for (;;) {
    s = client->WatchJob(job_id, on_status);
    if (s.ok()) break;
    s = outage.Wait(s);
    if (!s.ok()) break;
  }
  if (!Terminal(last.state()) && s.ok()) {
    for (;;) {
      auto final_status = client->GetJob(job_id);
      if (final_status.ok()) {
        last = *final_status;
        break;
      }
      s = outage.Wait(final_status.status());
      if (!s.ok()) break;
    }
  }
  display.Finish();
  if (s.code() == absl::StatusCode::kNotFound && outage.had_outage()) {
    s = Annotate(s, "the master came back without the job (was it started with --state_dir?)");
  }
  if (!s.ok()) return Error(s);
  if (last.state() == FAILED) {
    std::fprintf(stderr, "weft: job %s failed: %s\n", job_id.c_str(), last.error().c_str());
    if (json) {
      std::printf("{\"state\": \"FAILED\", \"job_id\": %s, \"error\": %s}\n", JsonString(job_id).c_str(),
                  JsonString(last.error()).c_str());
    }
    return 1;
  }
  const TrainResult r = ResultFromStatus(last);
  if (json) {
    std::printf("%s\n", r.ToJson().c_str());
  } else {
    std::printf("job %s (%s) %s: %lld steps, %lld epochs, train loss %.4f%s, %.0f samples/s, %.1f s\n",
                job_id.c_str(), r.job.c_str(), StateName(r.state).c_str(), static_cast<long long>(r.steps),
                static_cast<long long>(r.epochs), r.train_loss, r.TestMetrics().c_str(),
                r.samples_per_second, r.wall_seconds);
  }
  return last.state() == SUCCEEDED ? 0 : 1;
}

int RunSubmitCommand(int argc, char** argv) {
  auto c = Connect(argc, argv, {"follow"}, {"resume_from", "master_wait_seconds"});
  if (!c.ok()) return Usage("submit", std::string(c.status().message()));
  if (c->flags.args().size() != 1) return Usage("submit", "expected one job file");
  auto master_wait = MasterWait(c->flags);
  if (!master_wait.ok()) return Usage("submit", std::string(master_wait.status().message()));
  const std::string& path = c->flags.args()[0];
  auto job = LoadJobFile(path);
  if (!job.ok()) return Error(job.status());
  if (absl::Status s = ValidateJob(*job); !s.ok()) return Error(Annotate(s, path));
  if (job->name().empty()) {
    std::string base = path.substr(path.rfind('/') + 1);
    job->set_name(base.substr(0, base.find('.')));
  }
  if (c->flags.Has("resume_from")) {
    if (absl::Status s = SetResumeFrom(c->flags.Get("resume_from"), &*job); !s.ok()) return Error(s);
  }
  auto id = c->client->SubmitJob(*job);
  if (!id.ok()) return Error(id.status());
  if (!c->flags.GetBool("follow")) {
    if (c->json) {
      std::printf("{\"job_id\": \"%s\"}\n", id->c_str());
    } else {
      std::printf("%s\n", id->c_str());
    }
    return 0;
  }
  std::fprintf(stderr, "submitted job %s\n", id->c_str());
  return FollowJob(c->client.get(), *id, c->json, *master_wait);
}

int RunJobsCommand(int argc, char** argv) {
  auto c = Connect(argc, argv, {});
  if (!c.ok()) return Usage("jobs", std::string(c.status().message()));
  auto jobs = c->client->ListJobs();
  if (!jobs.ok()) return Error(jobs.status());
  for (const JobStatus& j : *jobs) {
    if (c->json) {
      std::printf("%s\n", StatusJson(j).c_str());
    } else {
      std::printf("%s\n", StatusLine(j).c_str());
    }
  }
  return 0;
}

int RunStatusCommand(int argc, char** argv) {
  auto c = Connect(argc, argv, {});
  if (!c.ok()) return Usage("status", std::string(c.status().message()));
  if (c->flags.args().size() != 1) return Usage("status", "expected one job id");
  auto st = c->client->GetJob(c->flags.args()[0]);
  if (!st.ok()) return Error(st.status());
  if (c->json) {
    std::printf("%s\n", StatusJson(*st).c_str());
  } else {
    std::printf("%s\n%s%s", StatusLine(*st).c_str(), RecoveryDetails(*st).c_str(), StepTimeDetails(*st).c_str());
  }
  return 0;
}

int RunCancelCommand(int argc, char** argv) {
  auto c = Connect(argc, argv, {});
  if (!c.ok()) return Usage("cancel", std::string(c.status().message()));
  if (c->flags.args().size() != 1) return Usage("cancel", "expected one job id");
  if (absl::Status s = c->client->CancelJob(c->flags.args()[0]); !s.ok()) return Error(s);
  std::printf("cancelled %s\n", c->flags.args()[0].c_str());
  return 0;
}

int RunScaleCommand(int argc, char** argv) {
  auto c = Connect(argc, argv, {}, {"workers"});
  if (!c.ok()) return Usage("scale", std::string(c.status().message()));
  if (c->flags.args().size() != 1) return Usage("scale", "expected one job id");
  if (!c->flags.Has("workers")) return Usage("scale", "--workers=N is required");
  auto workers = c->flags.GetInt("workers", 0, 1, 1 << 16);
  if (!workers.ok()) return Usage("scale", std::string(workers.status().message()));
  if (absl::Status s = c->client->ScaleJob(c->flags.args()[0], *workers); !s.ok()) return Error(s);
  std::printf("job %s trains on %d worker(s) from its next step on, as many as answer and split its batch\n",
              c->flags.args()[0].c_str(), *workers);
  return 0;
}

int RunTraceCommand(int argc, char** argv) {
  auto c = Connect(argc, argv, {}, {"steps", "out"});
  if (!c.ok()) return Usage("trace", std::string(c.status().message()));
  if (c->flags.args().size() != 1) return Usage("trace", "expected one job id");
  auto steps = c->flags.GetInt("steps", 5, 1, 100);
  if (!steps.ok()) return Usage("trace", std::string(steps.status().message()));
  const std::string out = c->flags.Get("out", "trace.json");
  if (out.empty()) return Usage("trace", "--out needs a file name");
  auto trace = c->client->TraceJob(c->flags.args()[0], *steps);
  if (!trace.ok()) return Error(trace.status());
  const absl::string_view json = trace->trace_json();
  if (absl::Status s = WriteFileAtomically(Env::Default(), out, {json}); !s.ok()) return Error(s);
  std::fprintf(stderr, "wrote %s: %d step(s), %d spans; open it in Perfetto (ui.perfetto.dev) or chrome://tracing\n",
               out.c_str(), trace->steps(), trace->spans());
  return 0;
}

int RunDevicesCommand(int argc, char** argv) {
  auto c = Connect(argc, argv, {});
  if (!c.ok()) return Usage("devices", std::string(c.status().message()));
  auto devices = c->client->ListDevices();
  if (!devices.ok()) return Error(devices.status());
  for (const DeviceAttributes& d : *devices) {
    std::printf("%s %s incarnation %016llx\n", d.name().c_str(), d.device_type().c_str(),
                static_cast<unsigned long long>(d.incarnation()));
  }
  return 0;
}

}  // namespace weft
