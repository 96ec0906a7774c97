#include "master/step_times.h"

#include <algorithm>
#include <cmath>

namespace weft {
namespace master {

void StepTimes::Add(const std::string& task, double seconds) {
  Window& w = tasks_[task];
  w.seconds[w.next] = seconds;
  w.next = (w.next + 1) % kStepTimeWindow;
  w.size = std::min(w.size + 1, kStepTimeWindow);
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  const size_t n = values.size();
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
  rank = std::min(std::max<size_t>(rank, 1), n) - 1;
  std::nth_element(values.begin(), values.begin() + rank, values.end());
  return values[rank];
}

std::vector<TaskStepTime> StepTimes::Summaries(const std::set<std::string>& peers) const {
  std::vector<TaskStepTime> out;
  for (const auto& [task, w] : tasks_) {
    std::vector<double> v(w.seconds.begin(), w.seconds.begin() + w.size);
    TaskStepTime t;
    t.set_task(task);
    t.set_steps(w.size);
    t.set_p50_seconds(Percentile(v, 0.5));
    t.set_p99_seconds(Percentile(std::move(v), 0.99));
    out.push_back(std::move(t));
  }
  std::sort(out.begin(), out.end(), [](const TaskStepTime& a, const TaskStepTime& b) { return a.task() < b.task(); });
  MarkStragglers(peers, &out);
  return out;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

void MarkStragglers(const std::set<std::string>& peers, std::vector<TaskStepTime>* times) {
  std::vector<TaskStepTime*> eligible;
  for (TaskStepTime& t : *times) {
    t.set_straggler(false);
    if ((peers.empty() || peers.count(t.task()) > 0) && t.steps() >= kStragglerMinSteps) eligible.push_back(&t);
  }
  if (eligible.size() < 2) return;
  for (TaskStepTime* t : eligible) {
    std::vector<double> others;
    for (const TaskStepTime* o : eligible) {
      if (o != t) others.push_back(o->p50_seconds());
    }
    const double median = Median(std::move(others));
    t->set_straggler(t->p50_seconds() > kStragglerRatio * median &&
                     t->p50_seconds() - median >= kStragglerMinGapSeconds);
  }
}

}  // namespace master
}  // namespace weft
