#include "runtime/rendezvous.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace weft {

absl::Status Rendezvous::Recv(const std::string& key, Tensor* value, bool* is_dead) {
  absl::Notification n;
  absl::Status status;
  RecvAsync(key, [&](const absl::Status& s, const Tensor& v, bool dead) {
    status = s;
    if (s.ok()) {
      *value = v;
      *is_dead = dead;
    }
    n.Notify();
  });
  n.WaitForNotification();
  return status;
}

LocalRendezvous::~LocalRendezvous() { StartAbort(absl::CancelledError("rendezvous destroyed")); }

absl::Status LocalRendezvous::Send(const std::string& key, const Tensor& value, bool is_dead) {
  if (!value.on_host()) {
    // Receivers on the CPU and RecvTensor read the payload directly.
    return absl::InternalError(absl::StrCat("rendezvous key '", key,
                                            "': a device tensor was sent; a GPU's _Send copies it to the host first"));
  }
  DoneCallback waiter;
  {
    absl::MutexLock lock(&mu_);
    if (!status_.ok()) return status_;
    auto [it, inserted] = table_.try_emplace(key);
    Item& item = it->second;
    if (inserted) {
      item.has_value = true;
      item.value = value;
      item.is_dead = is_dead;
      return absl::OkStatus();
    }
    if (item.has_value) {
      return absl::AlreadyExistsError(absl::StrCat("rendezvous key '", key, "' was sent twice"));
    }
    waiter = std::move(item.waiter);
    table_.erase(it);
  }
  waiter(absl::OkStatus(), value, is_dead);
  return absl::OkStatus();
}

void LocalRendezvous::RecvAsync(const std::string& key, DoneCallback done) {
  absl::Status error;
  Tensor value;
  bool is_dead = false;
  {
    absl::MutexLock lock(&mu_);
    if (!status_.ok()) {
      error = status_;
    } else {
      auto [it, inserted] = table_.try_emplace(key);
      Item& item = it->second;
      if (inserted) {
        item.waiter = std::move(done);
        return;
      }
      if (!item.has_value) {
        error = absl::AlreadyExistsError(absl::StrCat("rendezvous key '", key, "' has two receivers"));
      } else {
        value = std::move(item.value);
        is_dead = item.is_dead;
        table_.erase(it);
      }
    }
  }
  done(error, value, is_dead);
}

void LocalRendezvous::StartAbort(const absl::Status& status) {
  std::vector<DoneCallback> waiters;
  absl::Status abort;
  {
    absl::MutexLock lock(&mu_);
    if (status_.ok()) status_ = status.ok() ? absl::UnknownError("rendezvous aborted with an OK status") : status;
    abort = status_;
    for (auto& [key, item] : table_) {
      if (!item.has_value) waiters.push_back(std::move(item.waiter));
    }
    table_.clear();
  }
  for (DoneCallback& w : waiters) w(abort, Tensor(), false);
}

absl::Status LocalRendezvous::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

int LocalRendezvous::NumPending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(table_.size());
}

bool LocalRendezvous::AwaitWaitingReceivers(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  struct Args {
    const absl::flat_hash_map<std::string, Item>* table;
    int n;
  } args{&table_, n};
  // Evaluated under mu_ by whichever thread releases it; the table only
  // changes under mu_.
  return mu_.AwaitWithTimeout(absl::Condition(
                                  +[](Args* a) {
                                    int waiting = 0;
                                    for (const auto& [key, item] : *a->table) waiting += item.has_value ? 0 : 1;
                                    return waiting >= a->n;
                                  },
                                  &args),
                              timeout);
}

absl::StatusOr<ParsedRendezvousKey> ParseRendezvousKey(absl::string_view key) {
  std::vector<absl::string_view> parts = absl::StrSplit(key, ';');
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous key '", key, "' ", why,
        " (expected send_device;incarnation;recv_device;tensor_name;step_id)"));
  };
  if (parts.size() != 5) return bad(absl::StrCat("has ", parts.size(), " parts"));
  ParsedRendezvousKey out;
  out.send_device = std::string(parts[0]);
  out.recv_device = std::string(parts[2]);
  out.tensor_name = std::string(parts[3]);
  if (out.send_device.empty() || out.recv_device.empty() || out.tensor_name.empty()) return bad("has an empty part");
  if (parts[1].empty() || !absl::SimpleHexAtoi(parts[1], &out.incarnation)) return bad("has a bad incarnation");
  if (!absl::SimpleAtoi(parts[4], &out.step_id)) return bad("has a bad step id");
  return out;
}

RendezvousMgr::RendezvousMgr(Factory factory, Limits limits) : factory_(std::move(factory)), limits_(limits) {}

RendezvousMgr::~RendezvousMgr() {
  absl::flat_hash_map<int64_t, Step> steps;
  {
    absl::MutexLock lock(&mu_);
    steps.swap(steps_);
  }
  for (auto& [id, step] : steps) step.rendezvous->StartAbort(absl::CancelledError("rendezvous manager destroyed"));
}

std::shared_ptr<Rendezvous> RendezvousMgr::CreateLocked(int64_t step_id) {
  if (factory_ != nullptr) return factory_(step_id);
  return std::make_shared<LocalRendezvous>();
}

void RendezvousMgr::EvictLocked(absl::Time now, bool need_room, Aborts* aborts) {
  for (auto it = steps_.begin(); it != steps_.end();) {
    const Step& step = it->second;
    const bool expired = !step.claimed && now - step.created >= limits_.unclaimed_ttl;
    if (!expired && !(need_room && !step.claimed && step.aborted)) {
      ++it;
      continue;
    }
    if (expired && !step.aborted) {
      aborts->emplace_back(step.rendezvous,
                           absl::DeadlineExceededError(absl::StrCat(
                               "step ", it->first, " was never run on this task within ",
                               absl::FormatDuration(limits_.unclaimed_ttl), " of a peer or abort naming it")));
    }
    steps_.erase(it++);
  }
  next_sweep_ = now + limits_.unclaimed_ttl / 4;
}

std::shared_ptr<Rendezvous> RendezvousMgr::FindOrCreate(int64_t step_id, bool claim, bool mark_aborted) {
  Aborts aborts;
  std::shared_ptr<Rendezvous> r;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (abort_all_.ok()) {
      auto it = steps_.find(step_id);
      if (it != steps_.end()) {
        it->second.claimed = it->second.claimed || claim;
        it->second.aborted = it->second.aborted || mark_aborted;
        return it->second.rendezvous;
      }
      // A new step: the one place the table grows, so the one place it is
      // kept in bounds.
      const absl::Time now = now_();
      const bool full = static_cast<int64_t>(steps_.size()) >= limits_.max_steps;
      if (full || now >= next_sweep_) EvictLocked(now, full, &aborts);
      if (static_cast<int64_t>(steps_.size()) < limits_.max_steps) {
        Step& step = steps_[step_id];
        step.rendezvous = CreateLocked(step_id);
        step.claimed = claim;
        step.aborted = mark_aborted;
        step.created = now;
        r = step.rendezvous;
      } else {
        refused = absl::ResourceExhaustedError(
            absl::StrCat("step ", step_id, " cannot start: this task already holds ", steps_.size(),
                         " live steps, its quota (--max_live_steps=", limits_.max_steps, ")"));
      }
    } else {
      refused = abort_all_;
    }
    if (r == nullptr) r = CreateLocked(step_id);
  }
  for (auto& [rendezvous, status] : aborts) rendezvous->StartAbort(status);
  // Not kept: it fails at once and nothing is left to clean up.
  if (!refused.ok()) r->StartAbort(refused);
  return r;
}

std::shared_ptr<Rendezvous> RendezvousMgr::Find(int64_t step_id) {
  return FindOrCreate(step_id, /*claim=*/true, /*mark_aborted=*/false);
}

std::shared_ptr<Rendezvous> RendezvousMgr::FindForPeer(int64_t step_id) {
  return FindOrCreate(step_id, /*claim=*/false, /*mark_aborted=*/false);
}

void RendezvousMgr::AbortStep(int64_t step_id, const absl::Status& status) {
  FindOrCreate(step_id, /*claim=*/false, /*mark_aborted=*/true)->StartAbort(status);
}

void RendezvousMgr::Cleanup(int64_t step_id) {
  std::shared_ptr<Rendezvous> r;
  {
    absl::MutexLock lock(&mu_);
    auto it = steps_.find(step_id);
    if (it == steps_.end()) return;
    r = std::move(it->second.rendezvous);
    steps_.erase(it);
  }
  r->StartAbort(absl::CancelledError(absl::StrCat("step ", step_id, " was cleaned up")));
}

void RendezvousMgr::AbortAll(const absl::Status& status) {
  absl::flat_hash_map<int64_t, Step> steps;
  absl::Status abort;
  {
    absl::MutexLock lock(&mu_);
    if (abort_all_.ok()) abort_all_ = status.ok() ? absl::UnknownError("aborted with an OK status") : status;
    abort = abort_all_;
    steps.swap(steps_);
  }
  for (auto& [id, step] : steps) step.rendezvous->StartAbort(abort);
}

int RendezvousMgr::NumSteps() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(steps_.size());
}

}  // namespace weft
