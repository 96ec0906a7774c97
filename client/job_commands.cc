#include "client/job_commands.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_format.h"
#include "client/flags.h"
#include "client/job_file.h"
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

absl::StatusOr<Common> Connect(int argc, char** argv, const std::set<std::string>& booleans) {
  ASSIGN_OR_RETURN(Flags f, Flags::Parse(argc, argv, 2, {"master", "output"}, booleans));
  std::string master = f.Get("master");
  if (master.empty() && std::getenv("WEFT_MASTER") != nullptr) master = std::getenv("WEFT_MASTER");
  if (master.empty()) return absl::InvalidArgumentError("no master: pass --master=HOST:PORT or set WEFT_MASTER");
  const std::string output = f.Get("output", "text");
  if (output != "text" && output != "json") {
    return absl::InvalidArgumentError(absl::StrCat("--output must be text or json, got '", output, "'"));
  }
  Common c;
  c.flags = std::move(f);
  c.json = output == "json";
  c.client = MasterClient::Create(master);
  return c;
}

std::string StatusLine(const JobStatus& s) {
  std::string line = absl::StrFormat("%-14s %-20s %-10s %d/%d", s.job_id(), s.name(), StateName(s.state()), s.step(),
                                     s.total_steps());
  if (s.step() > 0) absl::StrAppendFormat(&line, " loss %.4f", s.loss());
  if (s.test_accuracy() >= 0 && Terminal(s.state())) absl::StrAppendFormat(&line, " test accuracy %.4f", s.test_accuracy());
  if (!s.error().empty()) absl::StrAppend(&line, " error: ", s.error());
  return line;
}

}  // namespace

TrainResult ResultFromStatus(const JobStatus& s) {
  TrainResult r;
  r.state = StateName(s.state());
  r.job = s.name();
  r.steps = s.step();
  r.epochs = s.epoch();
  r.train_loss = s.train_loss();
  r.test_accuracy = s.test_accuracy();
  r.test_loss = s.test_loss();
  r.test_examples = s.test_examples();
  r.samples_per_second = s.samples_per_second();
  r.wall_seconds = s.wall_seconds();
  return r;
}

int FollowJob(MasterClient* client, const std::string& job_id, bool json) {
  ProgressDisplay display(stderr, isatty(fileno(stderr)) != 0);
  JobStatus last;
  int64_t last_epoch = 0;
  absl::Status s = client->WatchJob(job_id, [&](const JobStatus& st) {
    last = st;
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
  });
  display.Finish();
  if (!s.ok()) return Error(s);
  if (!Terminal(last.state())) {
    auto final_status = client->GetJob(job_id);
    if (!final_status.ok()) return Error(final_status.status());
    last = *final_status;
  }
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
    std::printf("job %s (%s) %s: %lld steps, %lld epochs, train loss %.4f, test accuracy %.4f, %.0f samples/s, %.1f s\n",
                job_id.c_str(), r.job.c_str(), r.state.c_str(), static_cast<long long>(r.steps),
                static_cast<long long>(r.epochs), r.train_loss, r.test_accuracy, r.samples_per_second, r.wall_seconds);
  }
  return last.state() == SUCCEEDED ? 0 : 1;
}

int RunSubmitCommand(int argc, char** argv) {
  auto c = Connect(argc, argv, {"follow"});
  if (!c.ok()) return Usage("submit", std::string(c.status().message()));
  if (c->flags.args().size() != 1) return Usage("submit", "expected one job file");
  const std::string& path = c->flags.args()[0];
  auto job = LoadJobFile(path);
  if (!job.ok()) return Error(job.status());
  if (absl::Status s = ValidateJob(*job); !s.ok()) return Error(Annotate(s, path));
  if (job->name().empty()) {
    std::string base = path.substr(path.rfind('/') + 1);
    job->set_name(base.substr(0, base.find('.')));
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
  return FollowJob(c->client.get(), *id, c->json);
}

int RunJobsCommand(int argc, char** argv) {
  auto c = Connect(argc, argv, {});
  if (!c.ok()) return Usage("jobs", std::string(c.status().message()));
  auto jobs = c->client->ListJobs();
  if (!jobs.ok()) return Error(jobs.status());
  for (const JobStatus& j : *jobs) {
    if (c->json) {
      std::printf("%s\n", ResultFromStatus(j).ToJson().c_str());
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
    std::printf("%s\n", ResultFromStatus(*st).ToJson().c_str());
  } else {
    std::printf("%s\n", StatusLine(*st).c_str());
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
