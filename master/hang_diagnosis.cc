#include "master/hang_diagnosis.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace weft {
namespace master {
namespace {

// Tasks named after the blamed ones: the line stays one line.
constexpr int kMaxOthers = 4;

enum class Kind { kSilent, kError, kWaiting, kComputing, kPending, kDone };

// "for its all-reduce chunk from worker:1", and the peer it names.
struct Wait {
  std::string peer;
  std::string text;
};

struct TaskView {
  const TaskAnswer* answer = nullptr;
  Kind kind = Kind::kDone;
  std::vector<Wait> waits;
  const RunningOp* longest = nullptr;  // the step's longest-running op that is no wait
};

struct Blame {
  std::string task;
  std::string reason;  // "op dense_2/MatMul running 41 s"
  std::string key;     // the reason without its times
};

bool IsSilent(const absl::Status& s) {
  return s.code() == absl::StatusCode::kDeadlineExceeded || s.code() == absl::StatusCode::kUnavailable;
}

TaskView View(const TaskAnswer& a, const StalledStep& step) {
  TaskView v;
  v.answer = &a;
  if (!a.status.ok()) {
    v.kind = IsSilent(a.status) ? Kind::kSilent : Kind::kError;
    return v;
  }
  const int64_t first = step.first_step_id, end = first + std::max(1, step.iterations);
  auto of_step = [&](int64_t id) { return id >= first && id < end; };
  for (const PendingCollective& c : a.state.collective()) {
    if (!of_step(c.step_id())) continue;
    if (c.chunks_missing() > 0) {
      v.waits.push_back({c.recv_from_task(), absl::StrCat("for its all-reduce chunk from ", ShortTaskName(c.recv_from_task()))});
    } else if (c.sends_pending() > 0) {
      v.waits.push_back({c.send_to_task(), absl::StrCat("to send its all-reduce chunk to ", ShortTaskName(c.send_to_task()))});
    }
  }
  for (const RunningOp& op : a.state.running_op()) {
    if (!of_step(op.step_id())) continue;
    if (op.op() == "_Recv" && !op.peer_task().empty() && op.peer_task() != a.task) {
      v.waits.push_back({op.peer_task(), absl::StrCat("for tensor '", op.tensor_name(), "' from ",
                                                      ShortTaskName(op.peer_task()))});
      continue;
    }
    // A local _Recv waits for this task's own partitions; a collective's
    // wait is told by its PendingCollective.
    if (op.op() == "_Recv" || op.op() == "CollectiveAllReduce") continue;
    if (v.longest == nullptr || op.elapsed_seconds() > v.longest->elapsed_seconds()) v.longest = &op;
  }
  v.kind = !v.waits.empty()        ? Kind::kWaiting
           : v.longest != nullptr  ? Kind::kComputing
           : a.run_graph_pending   ? Kind::kPending
                                   : Kind::kDone;
  return v;
}

Blame Explain(const TaskView& v, const StalledStep& step, absl::Duration probe_timeout) {
  Blame b{v.answer->task, "", ""};
  switch (v.kind) {
    case Kind::kSilent:
      b.key = "silent";
      b.reason = v.answer->status.code() == absl::StatusCode::kDeadlineExceeded
                     ? absl::StrCat("it did not answer within ",
                                    FormatSeconds(absl::ToDoubleSeconds(probe_timeout)))
                     : absl::StrCat("it cannot be reached (", v.answer->status.message(), ")");
      break;
    case Kind::kError:
      b.key = "error";
      b.reason = absl::StrCat("it could not say (", v.answer->status.ToString(), ")");
      break;
    case Kind::kWaiting:
      b.key = absl::StrCat("waits ", v.waits[0].text);
      b.reason = absl::StrCat("it waits too, ", v.waits[0].text);
      break;
    case Kind::kComputing:
      b.key = absl::StrCat("op ", v.longest->node());
      b.reason = absl::StrCat("op ", v.longest->node(), " running ", FormatSeconds(v.longest->elapsed_seconds()));
      break;
    case Kind::kPending:
      b.key = "pending";
      b.reason = step.checkpoint ? "it answers, yet has not saved its shard"
                                 : "it runs no op of the step, yet its RunGraph has not returned";
      break;
    case Kind::kDone:
      b.key = "done";
      b.reason = step.checkpoint ? "it has saved its shard" : "it has finished its part of the step";
      break;
  }
  return b;
}

// Who the step waits on, in the order of preference of the header comment.
std::vector<const TaskView*> Culprits(const std::vector<TaskView>& views) {
  std::vector<const TaskView*> out;
  for (const TaskView& v : views) {
    if (v.kind == Kind::kSilent) out.push_back(&v);
  }
  if (!out.empty()) return out;
  std::map<std::string, int> waited_on;
  for (const TaskView& v : views) {
    for (const Wait& w : v.waits) ++waited_on[w.peer];
  }
  for (const TaskView& v : views) {
    if (waited_on.count(v.answer->task) > 0 && v.kind != Kind::kWaiting) out.push_back(&v);
  }
  if (out.empty() && !waited_on.empty()) {
    // Everyone waits on someone (a cycle): the most awaited.
    const TaskView* most = nullptr;
    for (const TaskView& v : views) {
      auto it = waited_on.find(v.answer->task);
      if (it != waited_on.end() && (most == nullptr || it->second > waited_on[most->answer->task])) most = &v;
    }
    if (most != nullptr) out.push_back(most);
  }
  if (!out.empty()) return out;
  const TaskView* longest = nullptr;
  for (const TaskView& v : views) {
    if (v.kind == Kind::kComputing &&
        (longest == nullptr || v.longest->elapsed_seconds() > longest->longest->elapsed_seconds())) {
      longest = &v;
    }
  }
  if (longest != nullptr) return {longest};
  for (const TaskView& v : views) {
    if (v.kind == Kind::kPending) out.push_back(&v);
  }
  return out;
}

// Awaited tasks that are not among the step's answers at all.
std::vector<Blame> Strangers(const std::vector<TaskView>& views, const std::vector<const TaskView*>& culprits) {
  std::set<std::string> known;
  for (const TaskView& v : views) known.insert(v.answer->task);
  std::set<std::string> named;
  std::vector<Blame> out;
  if (!culprits.empty()) return out;
  for (const TaskView& v : views) {
    for (const Wait& w : v.waits) {
      if (known.count(w.peer) == 0 && named.insert(w.peer).second) {
        out.push_back({w.peer, "not a task of this step", "stranger"});
      }
    }
  }
  return out;
}

std::string Header(const StalledStep& step) {
  std::string out = step.checkpoint ? absl::StrCat("the checkpoint of step ", step.job_step)
                    : step.trains   ? absl::StrCat("step ", step.job_step)
                                    : absl::StrCat("an evaluation step (after step ", step.job_step, ")");
  absl::StrAppend(&out, " (", FormatSeconds(absl::ToDoubleSeconds(step.elapsed)));
  if (step.median > absl::ZeroDuration()) {
    absl::StrAppend(&out, "; median ", FormatSeconds(absl::ToDoubleSeconds(step.median)));
  }
  return out + ")";
}

// "; worker:0 waits for its all-reduce chunk from worker:1; ..." for the
// tasks that wait and are not blamed.
std::string Others(const std::vector<TaskView>& views, const std::set<std::string>& blamed) {
  std::string out;
  int shown = 0, more = 0;
  for (const TaskView& v : views) {
    if (v.kind != Kind::kWaiting || blamed.count(v.answer->task) > 0) continue;
    if (shown == kMaxOthers) {
      ++more;
      continue;
    }
    ++shown;
    absl::StrAppend(&out, "; ", ShortTaskName(v.answer->task), " waits ", v.waits[0].text);
    if (v.waits.size() > 1) absl::StrAppend(&out, " (and ", v.waits.size() - 1, " more)");
  }
  if (more > 0) absl::StrAppend(&out, "; ", more, " more task(s) wait");
  return out;
}

}  // namespace

std::string ShortTaskName(absl::string_view task) {
  if (!absl::StartsWith(task, "/job:")) return std::string(task);
  const size_t slash = task.find("/task:");
  if (slash == absl::string_view::npos) return std::string(task);
  return absl::StrCat(task.substr(5, slash - 5), ":", task.substr(slash + 6));
}

std::string FormatSeconds(double seconds) {
  if (seconds < 1) return absl::StrFormat("%.0f ms", seconds * 1000);
  if (seconds < 10) return absl::StrFormat("%.1f s", seconds);
  return absl::StrFormat("%.0f s", seconds);
}

Diagnosis DiagnoseStall(const StalledStep& step, const std::vector<TaskAnswer>& answers,
                        absl::Duration probe_timeout) {
  std::vector<TaskView> views;
  for (const TaskAnswer& a : answers) views.push_back(View(a, step));
  const std::vector<const TaskView*> culprits = Culprits(views);
  std::vector<Blame> blames = Strangers(views, culprits);
  for (const TaskView* v : culprits) blames.push_back(Explain(*v, step, probe_timeout));

  Diagnosis d;
  d.key = absl::StrCat(step.first_step_id);
  std::set<std::string> blamed;
  std::vector<std::string> parts;
  for (const Blame& b : blames) {
    d.blamed.push_back(b.task);
    blamed.insert(b.task);
    absl::StrAppend(&d.key, "|", b.task, "|", b.key);
    parts.push_back(blames.size() == 1 ? absl::StrCat(ShortTaskName(b.task), ": ", b.reason)
                                       : absl::StrCat(ShortTaskName(b.task), " (", b.reason, ")"));
  }
  d.line = Header(step);
  if (parts.empty()) {
    absl::StrAppend(&d.line, " waits on no task: every task has finished its part");
  } else {
    absl::StrAppend(&d.line, " waits on ", absl::StrJoin(parts, ", "));
  }
  absl::StrAppend(&d.line, Others(views, blamed));
  // Tasks that could not say are named too, unless blamed already.
  for (const TaskView& v : views) {
    if (v.kind == Kind::kError && blamed.count(v.answer->task) == 0) {
      absl::StrAppend(&d.line, "; ", ShortTaskName(v.answer->task), " could not say (",
                      v.answer->status.message(), ")");
    }
  }
  return d;
}

}  // namespace master
}  // namespace weft
