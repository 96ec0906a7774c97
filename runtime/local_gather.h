// LocalGather: meets the ranks of one in-process collective and launches it
// once, with all of them.
//
// MIRRORED over NCCL runs one replica per GPU of a task, each in its own
// executor, and each replica's CollectiveAllReduce is a separate kernel call
// on its own thread, at its own time. NCCL wants every rank of a
// single-process group issued inside one ncclGroupStart/ncclGroupEnd (one
// thread driving several GPUs otherwise deadlocks on the first call that
// waits for its peers). So each rank's kernel Join()s with what it brings (its
// device, inputs and outputs) and returns without waiting; the last of the
// `size` ranks to join gets the group back and Run()s `launch` with every
// participant in rank order, on its own thread, and then every rank's `done`
// gets launch's status. No thread waits for a peer.
//
// Abort(key, status) fails a collective whose ranks have not all joined: the
// ranks waiting get `status`, and the key is forgotten. A rank that joins the
// key after that starts a new collective, which its own step's abort (the
// step of a rank that is late is aborted too) must then Abort in turn; see
// the GPU kernel for how a step's abort reaches here.
//
// Keys name one collective of one step (group, instance, step id), so a key
// is used once; a finished key is forgotten at once.
//
// Thread-safety: thread-safe. `launch` and the `done` callbacks run without
// the gather's lock held.
#ifndef WEFT_RUNTIME_LOCAL_GATHER_H_
#define WEFT_RUNTIME_LOCAL_GATHER_H_

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace weft {

template <typename Participant>
class LocalGather {
 public:
  using DoneFn = std::function<void(const absl::Status&)>;
  // Runs the collective; participants[r] is rank r's. Its status goes to
  // every rank's done.
  using LaunchFn = std::function<absl::Status(std::vector<Participant>& participants)>;

  // A collective whose ranks have all joined (or that failed as it was
  // joined), for Run.
  struct Group {
    absl::Status status;  // not OK: fail every rank with it, launch nothing
    std::vector<Participant> participants;
    std::vector<DoneFn> dones;
  };

  // Joins collective `key` as `rank` of `size`, and returns the group when
  // this rank completes it; the caller then passes it to Run. Calls no
  // callback itself, so a caller may hold its own lock around Join.
  //
  // `done` runs exactly once: from Run (this rank's or another's), or with
  // the abort status. A bad rank, a rank that joins twice or a size that
  // disagrees with the other ranks' returns a failed group that holds this
  // rank's done and those of the ranks already waiting (they would
  // otherwise wait for a rank that never comes).
  std::optional<Group> Join(const std::string& key, int rank, int size, Participant participant, DoneFn done) {
    Group g;
    if (size < 1 || rank < 0 || rank >= size) {
      g.status = absl::InvalidArgumentError(absl::StrCat("collective '", key, "': rank ", rank, " of ", size));
      g.dones.push_back(std::move(done));
      return g;
    }
    absl::MutexLock lock(&mu_);
    Pending& p = pending_[key];
    if (p.size == 0) {
      p.size = size;
      p.participants.resize(size);
      p.dones.resize(size);
    }
    if (p.size != size || p.dones[rank]) {
      g.status = absl::InvalidArgumentError(
          p.size != size ? absl::StrCat("collective '", key, "': rank ", rank, " says ", size,
                                        " ranks, an earlier rank said ", p.size)
                         : absl::StrCat("collective '", key, "': rank ", rank, " joined twice"));
      g.dones = TakeDones(&p);
      g.dones.push_back(std::move(done));
      pending_.erase(key);
      return g;
    }
    p.participants[rank] = std::move(participant);
    p.dones[rank] = std::move(done);
    if (++p.joined < size) return std::nullopt;
    g.participants = std::move(p.participants);
    g.dones = std::move(p.dones);
    pending_.erase(key);
    return g;
  }

  // Launches a group Join returned (unless it failed) and completes its
  // ranks with the outcome.
  static void Run(Group group, const LaunchFn& launch) {
    const absl::Status s = group.status.ok() ? launch(group.participants) : group.status;
    for (DoneFn& d : group.dones) d(s);
  }

  // Fails the ranks of `key` waiting so far with `status` (REQUIRES:
  // !status.ok()) and forgets the key. No effect on a key that has finished
  // or was never joined.
  void Abort(const std::string& key, const absl::Status& status) {
    std::vector<DoneFn> dones;
    {
      absl::MutexLock lock(&mu_);
      auto it = pending_.find(key);
      if (it == pending_.end()) return;
      dones = TakeDones(&it->second);
      pending_.erase(it);
    }
    for (DoneFn& d : dones) d(status);
  }

  // Collectives some but not all of whose ranks have joined.
  int NumPending() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(pending_.size());
  }

 private:
  struct Pending {
    int size = 0;
    int joined = 0;
    std::vector<Participant> participants;
    std::vector<DoneFn> dones;  // empty function: rank not joined yet
  };

  static std::vector<DoneFn> TakeDones(Pending* p) {
    std::vector<DoneFn> out;
    for (DoneFn& d : p->dones) {
      if (d) out.push_back(std::move(d));
    }
    return out;
  }

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Pending> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_RUNTIME_LOCAL_GATHER_H_
