// PsHandler: the ps-only handlers (shard listing, save, restore) on top of
// a task's Worker, without any RPC. GrpcPsService (ps/ps_service.h) serves it
// as the ParameterServer gRPC service; the master calls it through that.
//
// Variables belong to a session: the Worker keeps one ResourceMgr per
// (session, device), created when the session registers its first graph and
// dropped with its last. Variables come into being on the first step that
// reads them, unless a RestoreShard created them first (the step then uses the
// restored value, provided dtype and shape agree).
//
// Consistency: there is no lock on variable payloads (the executor orders a
// step's reads and in-place updates by graph edges). SaveShard copies each
// variable once and checksums the copy, so the file always reads back; but a
// step running meanwhile may update some variables before their copy and
// others after. RestoreShard validates the whole file, then swaps in fresh
// buffers one variable at a time; a running step keeps the buffers it already
// looked up. So the master saves and restores between steps (no RunGraph in
// flight for the session), which makes both exact.
//
// Shard paths (proto/ps_service.proto): with a checkpoint root, a request's
// path is relative to it and is confined to it: an absolute path or a ".."
// is INVALID_ARGUMENT naming the path and the root, and the path is walked
// from the root without following any symbolic link (ConfinedRoot), so a
// caller cannot make the task write or read a file anywhere else. Missing
// directories are created 0700 and shard files are 0600. Without a root
// (in-process tests only; `weft ps|worker` always has one) paths are
// absolute and used as given.
//
// ListShards runs on the caller's thread (no I/O); SaveShard and RestoreShard
// run on the server's I/O pool, so a gRPC reaction never blocks on the disk.
// Shutdown rejects new calls with UNAVAILABLE and waits for running ones.
//
// Thread-safety: thread-safe. `worker` and `env` (borrowed) outlive it.
#ifndef WEFT_PS_PS_HANDLER_H_
#define WEFT_PS_PS_HANDLER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/confined_root.h"
#include "common/env.h"
#include "common/thread_pool.h"
#include "proto/ps_service.pb.h"
#include "worker/worker.h"
#include "worker/worker_interface.h"  // StatusCallback

namespace weft {
namespace ps {

// The daemons' --checkpoint_root when none is given (`weft master|worker|ps`,
// `weft local`).
inline constexpr char kDefaultCheckpointRoot[] = "/tmp/weft-checkpoints";

struct PsHandlerOptions {
  Env* env = Env::Default();  // borrowed
  // Save/restore calls that run at once.
  int io_threads = 2;
  // The directory shard paths are relative to (`--checkpoint_root`, by
  // default kDefaultCheckpointRoot), created 0700 when missing. Empty: no
  // root, absolute paths used as given (in-process tests that construct a
  // handler directly; the daemons always set one).
  std::string checkpoint_root;
};

class PsHandler {
 public:
  PsHandler(worker::Worker* worker, const PsHandlerOptions& options);
  ~PsHandler();
  PsHandler(const PsHandler&) = delete;
  PsHandler& operator=(const PsHandler&) = delete;

  const std::string& task() const { return worker_->task(); }

  // Handlers: `request` and `response` stay valid until `done` runs.
  void ListShardsAsync(const ListShardsRequest* request, ListShardsResponse* response, StatusCallback done);
  void SaveShardAsync(const SaveShardRequest* request, SaveShardResponse* response, StatusCallback done);
  void RestoreShardAsync(const RestoreShardRequest* request, RestoreShardResponse* response, StatusCallback done);

  // The same, on the caller's thread.
  absl::Status ListShards(const ListShardsRequest& request, ListShardsResponse* response);
  absl::Status SaveShard(const SaveShardRequest& request, SaveShardResponse* response);
  absl::Status RestoreShard(const RestoreShardRequest& request, RestoreShardResponse* response);

  // Idempotent. REQUIRES: not called from a `done` callback of this server.
  void Shutdown();

 private:
  void Schedule(std::function<void()> fn, const StatusCallback& done);
  // Checks a request's `path` by its text alone: relative to the root (or,
  // without a root, absolute). `what` names the call in errors.
  absl::Status CheckShardPath(const std::string& path, const std::string& what) const;
  // The local file `path` names, checked and, with a root, walked from it
  // without following links; with `for_save`, missing directories are
  // created 0700.
  absl::StatusOr<std::string> LocalShardPath(const std::string& path, bool for_save, const std::string& what) const;

  worker::Worker* const worker_;
  Env* const env_;
  const std::string checkpoint_root_;  // as configured; empty: none
  // ConfinedRoot::Open(checkpoint_root_), when configured; an error here
  // fails every save and restore with it.
  const absl::StatusOr<ConfinedRoot> root_;

  absl::Mutex shutdown_mu_;  // serialises Shutdown; taken before mu_
  absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // Reset (joined) by Shutdown under shutdown_mu_; Schedule uses it under
  // mu_ only while !shutting_down_.
  std::unique_ptr<ThreadPool> io_pool_;
};

}  // namespace ps
}  // namespace weft

#endif  // WEFT_PS_PS_HANDLER_H_
