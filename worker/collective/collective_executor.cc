#include "worker/collective/collective_executor.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/peer_metrics.h"
#include "common/status_macros.h"
#include "worker/collective/reduce.h"

namespace weft {
namespace collective {

// One all-reduce on one rank. Lives as long as the executor's record of it or
// any callback it handed out (each holds a shared_ptr).
class CollectiveExecutor::RingAllReduce : public std::enable_shared_from_this<RingAllReduce> {
 public:
  RingAllReduce(CollectiveExecutor* executor, const CollectiveParams& params, Tensor tensor, StatusCallback done)
      : executor_(executor),
        params_(params),
        tensor_(std::move(tensor)),
        n_(params.group.size()),
        rank_(params.group.rank),
        element_bytes_(DTypeSize(tensor_.dtype())),
        done_(std::move(done)) {
    const int64_t count = tensor_.NumElements();
    const int64_t base = count / n_, extra = count % n_;
    for (int s = 0; s < n_; ++s) {
      segment_begin_.push_back(s * base + std::min<int64_t>(s, extra));
      segment_count_.push_back(base + (s < extra ? 1 : 0));
    }
    chunk_elements_ = std::max<int64_t>(1, static_cast<int64_t>(params.chunk_bytes / element_bytes_));
    for (int t = 0; t < num_rounds(); ++t) {
      recvs_left_ += NumChunks(RecvSegment(t));
      sends_left_ += NumChunks(SendSegment(t));
    }
    recvs_total_ = recvs_left_;
  }

  // Posts every receive and the first round's sends. REQUIRES: registered.
  void Start() {
    for (int t = 0; t < num_rounds(); ++t) {
      for (int c = 0; c < NumChunks(RecvSegment(t)); ++c) {
        executor_->mailbox_->RecvAsync(
            Key(t, c, params_.group.prev()),
            [self = shared_from_this(), t, c](const absl::Status& s, ReceivedChunk chunk) {
              self->OnRecv(t, c, s, std::move(chunk));
            },
            params_.group.members[params_.group.prev()].task);
      }
    }
    for (int c = 0; c < NumChunks(SendSegment(0)); ++c) Send(0, c);
  }

  int64_t step_id() const { return params_.step_id; }

  // Fails the collective with `status` (the first failure wins).
  void Fail(const absl::Status& status) {
    StatusCallback done;
    {
      absl::MutexLock lock(&mu_);
      if (failed_ || !done_) return;
      failed_ = true;
      status_ = status;
      done = TakeDoneLocked();
    }
    executor_->mailbox_->AbortCollective(Key(0, 0, 0), status);
    if (done) Complete(std::move(done), status);
  }

  // The deadline passed: names what it is still waiting for.
  void Expire() {
    std::string waiting;
    {
      absl::MutexLock lock(&mu_);
      if (failed_ || !done_) return;
      const CollectiveGroup& g = params_.group;
      if (recvs_left_ > 0) {
        absl::StrAppend(&waiting, "no data from ", g.Describe(g.prev()), " for ", recvs_left_, " of ", recvs_total_,
                        " chunks");
      }
      if (sends_left_ > 0) {
        absl::StrAppend(&waiting, waiting.empty() ? "" : "; ", sends_left_, " chunks to ", g.Describe(g.next()),
                        " not sent");
      }
    }
    Fail(absl::DeadlineExceededError(
        absl::StrCat(Describe(), " did not finish within ", absl::FormatDuration(params_.timeout), ": ", waiting)));
  }

  // What it waits for now (CollectiveExecutor::Pending).
  CollectiveWait Wait() const {
    CollectiveWait w;
    w.step_id = params_.step_id;
    w.description = Describe();
    const CollectiveGroup& g = params_.group;
    w.recv_from = g.members[g.prev()].task;
    w.send_to = g.members[g.next()].task;
    w.chunks_total = recvs_total_;
    w.elapsed_seconds = absl::ToDoubleSeconds(absl::Now() - started_);
    absl::MutexLock lock(&mu_);
    w.chunks_missing = recvs_left_;
    w.sends_pending = sends_left_;
    return w;
  }

  std::string Describe() const {
    return absl::StrCat("all-reduce of ", DTypeName(tensor_.dtype()), tensor_.shape().DebugString(), " (group ",
                        params_.group.group_key, ", instance ", params_.instance_key, ", step ", params_.step_id,
                        ", rank ", rank_, " of ", n_, ")");
  }

 private:
  int num_rounds() const { return 2 * (n_ - 1); }
  int Mod(int x) const { return ((x % n_) + n_) % n_; }
  int SendSegment(int round) const { return Mod(rank_ - round); }
  int RecvSegment(int round) const { return Mod(rank_ - round - 1); }
  int NumChunks(int segment) const {
    return static_cast<int>((segment_count_[segment] + chunk_elements_ - 1) / chunk_elements_);
  }
  // Byte offset and size of chunk `c` of `segment`.
  std::pair<size_t, size_t> ChunkRange(int segment, int c) const {
    const int64_t first = static_cast<int64_t>(c) * chunk_elements_;
    const int64_t count = std::min(chunk_elements_, segment_count_[segment] - first);
    return {static_cast<size_t>(segment_begin_[segment] + first) * element_bytes_,
            static_cast<size_t>(count) * element_bytes_};
  }
  ChunkKey Key(int round, int chunk, int src_rank) const {
    return ChunkKey{params_.group.group_key, params_.instance_key, params_.step_id, round, chunk, src_rank};
  }

  void Send(int round, int c) {
    {
      absl::MutexLock lock(&mu_);
      if (failed_) return;
    }
    const auto [offset, bytes] = ChunkRange(SendSegment(round), c);
    SendChunk chunk{tensor_, static_cast<const char*>(tensor_.raw_data()) + offset, bytes};
    executor_->transport_->SendAsync(params_.group, params_.group.next(), Key(round, c, rank_), std::move(chunk),
                                     [self = shared_from_this()](const absl::Status& s) {
                                       if (!s.ok()) return self->Fail(Annotate(s, self->Describe()));
                                       self->OpDone(/*was_recv=*/false);
                                     });
  }

  void OnRecv(int round, int c, const absl::Status& s, ReceivedChunk chunk) {
    if (!s.ok()) return Fail(s);  // an abort's status, or this collective's own failure
    if (executor_->options_.compute_pool != nullptr && chunk.borrowed) chunk = chunk.Owned();
    auto work = [self = shared_from_this(), round, c, chunk = std::move(chunk)]() mutable {
      self->Reduce(round, c, std::move(chunk));
    };
    if (executor_->options_.compute_pool != nullptr) {
      executor_->options_.compute_pool->Schedule(std::move(work));
    } else {
      work();
    }
  }

  void Reduce(int round, int c, ReceivedChunk chunk) {
    {
      absl::MutexLock lock(&mu_);
      if (failed_) return;
      ++reducing_;
    }
    const auto [offset, bytes] = ChunkRange(RecvSegment(round), c);
    absl::Status status;
    if (chunk.size() != bytes) {
      status = absl::DataLossError(absl::StrCat(Describe(), ": chunk ", c, " of round ", round, " from ",
                                                params_.group.Describe(params_.group.prev()), " has ", chunk.size(),
                                                " bytes, expected ", bytes));
    } else {
      char* dst = static_cast<char*>(tensor_.raw_data()) + offset;
      if (round < n_ - 1) {
        SumInto(tensor_.dtype(), dst, bytes, chunk.pieces);
      } else {
        CopyInto(dst, bytes, chunk.pieces);
      }
    }
    chunk = ReceivedChunk();  // hand the transport's buffers back early
    StatusCallback done;
    absl::Status failed_with;
    {
      absl::MutexLock lock(&mu_);
      --reducing_;
      if (failed_) {
        done = TakeDoneLocked();
        failed_with = status_;
      }
    }
    if (done) return Complete(std::move(done), failed_with);
    if (!status.ok()) return Fail(status);
    if (round + 1 < num_rounds()) Send(round + 1, c);
    OpDone(/*was_recv=*/true);
  }

  void OpDone(bool was_recv) {
    StatusCallback done;
    {
      absl::MutexLock lock(&mu_);
      --(was_recv ? recvs_left_ : sends_left_);
      if (failed_) return;
      done = TakeDoneLocked();
    }
    if (done) Complete(std::move(done), absl::OkStatus());
  }

  // `done_` when the collective may report: all work finished, or failed
  // with no reduction still writing into the tensor.
  StatusCallback TakeDoneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool ready = failed_ ? reducing_ == 0 : (recvs_left_ == 0 && sends_left_ == 0);
    if (!ready || !done_) return nullptr;
    return std::move(done_);
  }

  void Complete(StatusCallback done, const absl::Status& status) {
    auto self = shared_from_this();  // Unregister drops the executor's reference
    if (status.ok()) AllReduceSeconds()->Observe(absl::ToDoubleSeconds(absl::Now() - started_));
    done(status);
    executor_->Unregister(this);
  }

  CollectiveExecutor* const executor_;
  const CollectiveParams params_;
  Tensor tensor_;  // shares the caller's buffer
  const int n_;
  const int rank_;
  const size_t element_bytes_;
  std::vector<int64_t> segment_begin_;
  std::vector<int64_t> segment_count_;
  int64_t chunk_elements_ = 1;
  int recvs_total_ = 0;
  const absl::Time started_ = absl::Now();

  mutable absl::Mutex mu_;
  int recvs_left_ ABSL_GUARDED_BY(mu_) = 0;
  int sends_left_ ABSL_GUARDED_BY(mu_) = 0;
  int reducing_ ABSL_GUARDED_BY(mu_) = 0;  // reductions writing into the tensor now
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  StatusCallback done_ ABSL_GUARDED_BY(mu_);  // empty once taken
};

CollectiveExecutor::CollectiveExecutor(CollectiveTransportInterface* transport, CollectiveMailbox* mailbox,
                                       Options options)
    : transport_(transport), mailbox_(mailbox), options_(options) {
  deadline_thread_ = std::thread([this] { DeadlineLoop(); });
}

CollectiveExecutor::~CollectiveExecutor() {
  std::vector<std::shared_ptr<RingAllReduce>> ops;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [ptr, entry] : in_flight_) ops.push_back(entry.op);
  }
  for (auto& op : ops) op->Fail(absl::CancelledError(absl::StrCat(op->Describe(), ": collective executor shut down")));
  ops.clear();
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](CollectiveExecutor* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) { return e->in_flight_.empty(); }, this));
    stopping_ = true;
    deadline_changed_.Signal();
  }
  deadline_thread_.join();
}

void CollectiveExecutor::AllReduceAsync(const CollectiveParams& params, Tensor* in_out, StatusCallback done) {
  const CollectiveGroup& g = params.group;
  if (g.size() < 1 || g.rank < 0 || g.rank >= g.size()) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("all-reduce: rank ", g.rank, " is not in group ", g.group_key, " of ", g.size(), " members")));
  }
  if (in_out == nullptr || !in_out->IsInitialized()) {
    return done(absl::InvalidArgumentError("all-reduce: the tensor is uninitialised"));
  }
  if (absl::Status s = CheckReducibleDType(in_out->dtype()); !s.ok()) return done(s);
  if (g.size() == 1 || in_out->NumElements() == 0) return done(absl::OkStatus());

  auto op = std::make_shared<RingAllReduce>(this, params, *in_out, std::move(done));
  Register(op, absl::Now() + params.timeout);
  op->Start();
}

absl::Status CollectiveExecutor::AllReduce(const CollectiveParams& params, Tensor* in_out) {
  absl::Notification finished;
  absl::Status status;
  AllReduceAsync(params, in_out, [&](const absl::Status& s) {
    status = s;
    finished.Notify();
  });
  finished.WaitForNotification();
  return status;
}

void CollectiveExecutor::Abort(const absl::Status& status) {
  mailbox_->Abort(status);  // wakes every waiting receive
  std::vector<std::shared_ptr<RingAllReduce>> ops;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [ptr, entry] : in_flight_) ops.push_back(entry.op);
  }
  for (auto& op : ops) op->Fail(status);  // those waiting only on sends
}

void CollectiveExecutor::Reset() { mailbox_->Reset(); }

void CollectiveExecutor::AbortStep(int64_t step_id, const absl::Status& status) {
  mailbox_->AbortStep(step_id, status);
  std::vector<std::shared_ptr<RingAllReduce>> ops;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [ptr, entry] : in_flight_) {
      if (entry.op->step_id() == step_id) ops.push_back(entry.op);
    }
  }
  for (auto& op : ops) op->Fail(status);
}

void CollectiveExecutor::CleanupStep(int64_t step_id) { mailbox_->CleanupStep(step_id); }

std::vector<CollectiveWait> CollectiveExecutor::Pending() {
  std::vector<std::shared_ptr<RingAllReduce>> ops;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [ptr, entry] : in_flight_) ops.push_back(entry.op);
  }
  std::vector<CollectiveWait> out;
  for (const auto& op : ops) out.push_back(op->Wait());
  return out;
}

void CollectiveExecutor::Register(const std::shared_ptr<RingAllReduce>& op, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto it = deadlines_.emplace(deadline, op.get());
  in_flight_.emplace(op.get(), InFlight{op, it});
  // Wake the deadline thread only if it sleeps past this deadline: in steady
  // state it sleeps until an earlier collective's deadline, and waking it for
  // every collective cost two context switches per call.
  if (deadline < waiting_until_) deadline_changed_.Signal();
}

void CollectiveExecutor::Unregister(RingAllReduce* op) {
  std::shared_ptr<RingAllReduce> keep;  // destroyed outside the lock
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(op);
  if (it == in_flight_.end()) return;
  keep = std::move(it->second.op);
  if (it->second.deadline != deadlines_.end()) deadlines_.erase(it->second.deadline);
  in_flight_.erase(it);
}

void CollectiveExecutor::DeadlineLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    if (deadlines_.empty()) {
      waiting_until_ = absl::InfiniteFuture();
      deadline_changed_.Wait(&mu_);
      waiting_until_ = absl::InfinitePast();
      continue;
    }
    // A deadline that is no longer in the queue (its collective finished)
    // may still be what this sleeps until; waking then costs one spurious
    // turn of the loop, not a missed deadline.
    const absl::Time next = deadlines_.begin()->first;
    if (absl::Now() < next) {
      waiting_until_ = next;
      deadline_changed_.WaitWithDeadline(&mu_, next);
      waiting_until_ = absl::InfinitePast();
      continue;
    }
    RingAllReduce* expired = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = in_flight_.find(expired);
    if (it == in_flight_.end()) continue;
    it->second.deadline = deadlines_.end();
    std::shared_ptr<RingAllReduce> op = it->second.op;
    mu_.Unlock();
    op->Expire();
    op.reset();
    mu_.Lock();
  }
}

}  // namespace collective
}  // namespace weft
