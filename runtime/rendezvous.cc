#include "runtime/rendezvous.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"

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

RendezvousMgr::RendezvousMgr(Factory factory) : factory_(std::move(factory)) {}

RendezvousMgr::~RendezvousMgr() {
  absl::flat_hash_map<int64_t, std::shared_ptr<Rendezvous>> steps;
  {
    absl::MutexLock lock(&mu_);
    steps.swap(steps_);
  }
  for (auto& [id, r] : steps) r->StartAbort(absl::CancelledError("rendezvous manager destroyed"));
}

std::shared_ptr<Rendezvous> RendezvousMgr::CreateLocked(int64_t step_id) {
  if (factory_ != nullptr) return factory_(step_id);
  return std::make_shared<LocalRendezvous>();
}

std::shared_ptr<Rendezvous> RendezvousMgr::Find(int64_t step_id) {
  absl::Status abort_all;
  std::shared_ptr<Rendezvous> r;
  {
    absl::MutexLock lock(&mu_);
    if (abort_all_.ok()) {
      std::shared_ptr<Rendezvous>& slot = steps_[step_id];
      if (slot == nullptr) slot = CreateLocked(step_id);
      return slot;
    }
    abort_all = abort_all_;
    r = CreateLocked(step_id);
  }
  // Not kept: after AbortAll every step fails at once and nothing is left to
  // clean up.
  r->StartAbort(abort_all);
  return r;
}

void RendezvousMgr::AbortStep(int64_t step_id, const absl::Status& status) {
  Find(step_id)->StartAbort(status);
}

void RendezvousMgr::Cleanup(int64_t step_id) {
  std::shared_ptr<Rendezvous> r;
  {
    absl::MutexLock lock(&mu_);
    auto it = steps_.find(step_id);
    if (it == steps_.end()) return;
    r = std::move(it->second);
    steps_.erase(it);
  }
  r->StartAbort(absl::CancelledError(absl::StrCat("step ", step_id, " was cleaned up")));
}

void RendezvousMgr::AbortAll(const absl::Status& status) {
  absl::flat_hash_map<int64_t, std::shared_ptr<Rendezvous>> steps;
  absl::Status abort;
  {
    absl::MutexLock lock(&mu_);
    if (abort_all_.ok()) abort_all_ = status.ok() ? absl::UnknownError("aborted with an OK status") : status;
    abort = abort_all_;
    steps.swap(steps_);
  }
  for (auto& [id, r] : steps) r->StartAbort(abort);
}

int RendezvousMgr::NumSteps() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(steps_.size());
}

}  // namespace weft
