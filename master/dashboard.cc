#include "master/dashboard.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/json_text.h"
#include "common/metrics.h"
#include "master/cluster_probe.h"
#include "master/dashboard/assets.h"

namespace weft {
namespace master {
namespace {

constexpr char kTaskUp[] = "weft_task_up";
constexpr char kJobs[] = "weft_jobs";

// Step times of a task from the running jobs (the newest job's that names
// it wins).
using TaskStepTimes = std::map<std::string, TaskStepTime>;

TaskStepTimes StepTimesOf(const std::vector<JobStatus>& jobs) {
  TaskStepTimes out;
  for (const JobStatus& s : jobs) {
    if (s.state() != RUNNING) continue;
    for (const TaskStepTime& t : s.task_step_time()) out[t.task()] = t;
  }
  return out;
}

void AppendTask(const TaskProbe& t, const TaskStepTimes& times, std::string* out) {
  const bool up = t.status.ok();
  absl::StrAppend(out, "{\"task\":", JsonString(t.task), ",\"up\":", up ? "true" : "false");
  auto st = times.find(t.task);
  if (st != times.end()) {
    absl::StrAppend(out, ",\"step_time_p50_seconds\":", JsonNumber(st->second.p50_seconds()),
                    ",\"step_time_p99_seconds\":", JsonNumber(st->second.p99_seconds()),
                    ",\"straggler\":", st->second.straggler() ? "true" : "false");
  }
  if (!up) {
    absl::StrAppend(out, ",\"error\":", JsonString(std::string(t.status.message())), "}");
    return;
  }
  absl::StrAppend(out, ",\"draining\":", t.response.draining() ? "true" : "false",
                  ",\"graphs\":", t.response.num_graphs(), ",\"devices\":[");
  for (int i = 0; i < t.response.device_size(); ++i) {
    absl::StrAppend(out, i > 0 ? "," : "", JsonString(t.response.device(i).name()));
  }
  absl::StrAppend(out, "]}");
}

void AppendJob(const JobStatus& s, const std::vector<HistoryPoint>& history, std::string* out) {
  absl::StrAppend(out, "{\"job_id\":", JsonString(s.job_id()), ",\"name\":", JsonString(s.name()),
                  ",\"owner\":", JsonString(s.owner()), ",\"state\":", JsonString(JobState_Name(s.state())),
                  ",\"step\":", s.step(), ",\"total_steps\":", s.total_steps(), ",\"epoch\":", s.epoch(),
                  ",\"epochs\":", s.epochs(), ",\"loss\":", JsonNumber(s.loss()));
  absl::StrAppend(out, ",\"test_accuracy\":", JsonNumber(s.test_accuracy()),
                  ",\"samples_per_second\":", JsonNumber(s.samples_per_second()), ",\"restarts\":", s.restarts(),
                  ",\"error\":", JsonString(s.error()), ",\"diagnosis\":", JsonString(s.diagnosis()),
                  ",\"diagnosis_active\":", s.diagnosis_active() ? "true" : "false", ",\"workers\":[");
  auto append_tasks = [out](const google::protobuf::RepeatedPtrField<std::string>& tasks) {
    for (int i = 0; i < tasks.size(); ++i) absl::StrAppend(out, i > 0 ? "," : "", JsonString(tasks[i]));
  };
  append_tasks(s.workers());
  absl::StrAppend(out, "],\"membership\":[");
  for (int i = 0; i < s.membership_change_size(); ++i) {
    const MembershipChange& c = s.membership_change(i);
    absl::StrAppend(out, i > 0 ? "," : "", "{\"step\":", c.step(), ",\"time_unix_ms\":", c.time_unix_ms(),
                    ",\"workers\":", c.workers(), ",\"seconds\":", JsonNumber(c.seconds()), ",\"left\":[");
    append_tasks(c.left());
    absl::StrAppend(out, "],\"joined\":[");
    append_tasks(c.joined());
    absl::StrAppend(out, "],\"reason\":", JsonString(c.reason()), "}");
  }
  absl::StrAppend(out, "],\"history\":[");
  for (size_t i = 0; i < history.size(); ++i) {
    const HistoryPoint& p = history[i];
    absl::StrAppend(out, i > 0 ? "," : "", "{\"step\":", p.step, ",\"loss\":", JsonNumber(p.loss),
                    ",\"accuracy\":", JsonNumber(p.accuracy), ",\"time_unix_ms\":", p.time_unix_ms, "}");
  }
  absl::StrAppend(out, "]}");
}

}  // namespace

MonitoringPages::MonitoringPages(Master* master, std::string address)
    : master_(master), address_(std::move(address)) {
  metrics::Registry& r = metrics::Registry::Default();
  r.AddGaugeCallback(kTaskUp, "1 when the task answered the master's GetStatus within a second, else 0.",
                     {"task"}, [this] {
                       std::vector<std::pair<metrics::Labels, double>> out;
                       if (master_->workers() == nullptr) return out;
                       for (const TaskProbe& t : ProbeCluster(master_->workers(), probe_timeout_).tasks) {
                         out.push_back({{t.task}, t.status.ok() ? 1.0 : 0.0});
                       }
                       return out;
                     });
  r.AddGaugeCallback(kJobs, "Jobs the master knows, by state.", {"state"}, [this] {
    std::map<std::string, double> by_state;
    for (const JobStatus& s : master_->jobs()->List()) by_state[JobState_Name(s.state())] += 1;
    std::vector<std::pair<metrics::Labels, double>> out;
    for (const auto& [state, n] : by_state) out.push_back({{state}, n});
    return out;
  });
}

MonitoringPages::~MonitoringPages() {
  metrics::Registry::Default().RemoveGaugeCallback(kTaskUp);
  metrics::Registry::Default().RemoveGaugeCallback(kJobs);
}

std::string MonitoringPages::OverviewJson() {
  std::string out;
  std::vector<JobStatus> jobs = master_->jobs()->List();
  absl::StrAppend(&out, "{\"time_unix_ms\":", absl::ToUnixMillis(absl::Now()),
                  ",\"master\":{\"address\":", JsonString(address_), "},\"tasks\":[");
  if (master_->workers() != nullptr) {
    const TaskStepTimes times = StepTimesOf(jobs);
    ClusterProbe probe = ProbeCluster(master_->workers(), probe_timeout_);
    for (size_t i = 0; i < probe.tasks.size(); ++i) {
      if (i > 0) out += ",";
      AppendTask(probe.tasks[i], times, &out);
    }
  }
  absl::StrAppend(&out, "],\"jobs\":[");
  // The latest diagnosis of a step that still waits.
  const JobStatus* latest = nullptr;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (i > 0) out += ",";
    AppendJob(jobs[i], master_->jobs()->telemetry().History(jobs[i].job_id()), &out);
    if (jobs[i].diagnosis_active() &&
        (latest == nullptr || jobs[i].diagnosis_time_unix_ms() > latest->diagnosis_time_unix_ms())) {
      latest = &jobs[i];
    }
  }
  absl::StrAppend(&out, "],\"diagnosis\":", JsonString(latest != nullptr ? latest->diagnosis() : ""), "}");
  return out;
}

std::map<std::string, HttpHandler> MonitoringPages::Pages() {
  std::map<std::string, HttpHandler> pages;
  for (const DashboardAsset& a : DashboardAssets()) {
    pages[a.path] = [a](const HttpRequest&) {
      return HttpResponse{200, a.content_type, std::string(a.body)};
    };
  }
  pages["/api/overview"] = [this](const HttpRequest&) {
    return HttpResponse{200, "application/json", OverviewJson()};
  };
  return pages;
}

}  // namespace master
}  // namespace weft
