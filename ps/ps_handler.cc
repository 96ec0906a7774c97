#include "ps/ps_handler.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/tensor_proto_coding.h"
#include "ps/shard_file.h"

namespace weft {
namespace ps {
namespace {

using Stores = std::vector<worker::GraphMgr::SessionResources>;

// A path without a checkpoint root: absolute, naming a file.
absl::Status CheckAbsolutePath(const std::string& path, absl::string_view what) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no path given"));
  if (path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(what, ": path '", path, "' is not absolute"));
  }
  if (path.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat(what, ": path '", path, "' names a directory, not a file"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ConfinedRoot> OpenRoot(const std::string& root) {
  if (root.empty()) return absl::FailedPreconditionError("no checkpoint root configured");
  return ConfinedRoot::Open(root, /*create=*/true);
}

absl::Status NoSession(const std::string& session, const std::string& task) {
  return absl::NotFoundError(absl::StrCat("session '", session, "' has no variables on task ", task,
                                          " (no graph of it is registered here)"));
}

// A variable as found in a session's stores.
struct Found {
  Tensor value;
  std::string device;
  ResourceMgr* store = nullptr;
};

// Every variable of a session, by name. FAILED_PRECONDITION when two devices
// of the session hold one name (a shard file has one entry per name).
absl::StatusOr<std::map<std::string, Found>> CollectVariables(const Stores& stores, const std::string& session) {
  std::map<std::string, Found> out;
  for (const auto& s : stores) {
    for (const std::string& name : s.resources->VariableNames()) {
      auto value = s.resources->LookupVariable(name);
      if (!value.ok()) continue;  // removed meanwhile
      auto [it, inserted] = out.emplace(name, Found{*std::move(value), s.device, s.resources.get()});
      if (!inserted) {
        return absl::FailedPreconditionError(absl::StrCat("session '", session, "' holds variable '", name,
                                                          "' on two devices (", it->second.device, ", ", s.device,
                                                          "); a shard holds one value per name"));
      }
    }
  }
  return out;
}

// A step number from a request: never negative (0 means "none" where the
// field is optional). `field` names it in the request.
absl::Status CheckStep(int64_t step, absl::string_view field, absl::string_view what) {
  if (step >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", field, " ", step, " is negative"));
}

// A count that goes into an int32 response field (a shard file read from
// disk may claim any number of entries).
absl::StatusOr<int32_t> CountField(size_t n, absl::string_view field, absl::string_view what) {
  if (n > static_cast<size_t>(INT32_MAX)) {
    return absl::OutOfRangeError(absl::StrCat(what, ": ", n, " variables do not fit ", field));
  }
  return static_cast<int32_t>(n);
}

// SaveShardRequest.variable: named variables, each once. A name given twice
// would write a shard with two entries of one name, which no restore reads.
absl::Status CheckVariableNames(const google::protobuf::RepeatedPtrField<std::string>& names,
                                absl::string_view what) {
  absl::flat_hash_map<absl::string_view, int> first;  // name -> its index
  first.reserve(static_cast<size_t>(names.size()));
  for (int i = 0; i < names.size(); ++i) {
    const std::string& name = names.Get(i);
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": variable[", i, "] is empty (a variable name)"));
    }
    auto [it, inserted] = first.emplace(name, i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": variable[", i, "] '", name,
                                                     "' repeats variable[", it->second, "]; name each once"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

PsHandler::PsHandler(worker::Worker* worker, const PsHandlerOptions& options)
    : worker_(worker),
      env_(options.env),
      checkpoint_root_(options.checkpoint_root),
      root_(OpenRoot(options.checkpoint_root)),
      io_pool_(std::make_unique<ThreadPool>(worker->task() + "/ps_io", std::max(options.io_threads, 1))) {}

PsHandler::~PsHandler() { Shutdown(); }

void PsHandler::Shutdown() {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  if (io_pool_ == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  io_pool_.reset();  // runs what is queued, then joins
}

void PsHandler::Schedule(std::function<void()> fn, const StatusCallback& done) {
  {
    absl::MutexLock lock(&mu_);
    if (!shutting_down_) {
      io_pool_->Schedule(std::move(fn));
      return;
    }
  }
  done(absl::UnavailableError(absl::StrCat("task ", task(), " is shutting down")));
}

absl::Status PsHandler::CheckShardPath(const std::string& path, const std::string& what) const {
  if (checkpoint_root_.empty()) return CheckAbsolutePath(path, what);
  if (!root_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": the checkpoint root ", checkpoint_root_,
                                                      " cannot be used: ", root_.status().message()));
  }
  absl::Status s = ConfinedRoot::CheckRelative(path);
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message(), " (checkpoint root ", root_->path(),
                                                   "; shard paths are relative to it)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PsHandler::LocalShardPath(const std::string& path, bool for_save,
                                                      const std::string& what) const {
  RETURN_IF_ERROR(CheckShardPath(path, what));
  if (checkpoint_root_.empty()) {
    if (for_save) RETURN_IF_ERROR(CreatePrivateDirs(DirName(path)));
    return path;
  }
  absl::StatusOr<std::string> resolved = root_->Resolve(path, /*create_dirs=*/for_save);
  if (!resolved.ok()) return Annotate(resolved.status(), what);
  return resolved;
}

void PsHandler::ListShardsAsync(const ListShardsRequest* request, ListShardsResponse* response,
                                      StatusCallback done) {
  done(ListShards(*request, response));
}

void PsHandler::SaveShardAsync(const SaveShardRequest* request, SaveShardResponse* response,
                                     StatusCallback done) {
  Schedule([this, request, response, done] { done(SaveShard(*request, response)); }, done);
}

void PsHandler::RestoreShardAsync(const RestoreShardRequest* request, RestoreShardResponse* response,
                                        StatusCallback done) {
  Schedule([this, request, response, done] { done(RestoreShard(*request, response)); }, done);
}

absl::Status PsHandler::ListShards(const ListShardsRequest& request, ListShardsResponse* response) {
  response->set_task(task());
  // session -> its stores, sorted by handle.
  std::map<std::string, Stores> sessions;
  for (auto& s : worker_->ListSessionResources()) sessions[s.session_handle].push_back(std::move(s));
  std::vector<std::string> wanted(request.session_handle().begin(), request.session_handle().end());
  if (wanted.empty()) {
    for (const auto& [handle, stores] : sessions) wanted.push_back(handle);
  } else {
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  }
  for (const std::string& handle : wanted) {
    auto it = sessions.find(handle);
    if (it == sessions.end()) return NoSession(handle, task());
    ASSIGN_OR_RETURN(auto vars, CollectVariables(it->second, handle));
    SessionVariables* out = response->add_session();
    out->set_session_handle(handle);
    for (const auto& [name, found] : vars) {
      VariableInfo* v = out->add_variable();
      v->set_name(name);
      v->set_dtype(DTypeToProto(found.value.dtype()));
      ShapeToProto(found.value.shape(), v->mutable_shape());
      v->set_bytes(static_cast<int64_t>(found.value.TotalBytes()));
      v->set_device(found.device);
    }
  }
  return absl::OkStatus();
}

absl::Status PsHandler::SaveShard(const SaveShardRequest& request, SaveShardResponse* response) {
  const std::string what = absl::StrCat("SaveShard of session '", request.session_handle(), "' on ", task());
  RETURN_IF_ERROR(CheckShardPath(request.path(), what));
  RETURN_IF_ERROR(CheckStep(request.global_step(), "global_step", what));
  RETURN_IF_ERROR(CheckVariableNames(request.variable(), what));
  const Stores stores = worker_->ListSessionResources(request.session_handle());
  if (stores.empty()) return NoSession(request.session_handle(), task());
  ASSIGN_OR_RETURN(auto vars, CollectVariables(stores, request.session_handle()));

  Shard shard;
  shard.owner_task = task();
  shard.global_step = request.global_step();
  auto add = [&](const std::string& name, const Found& f) { shard.tensors.push_back({name, f.value, f.device}); };
  if (request.variable().empty()) {
    for (const auto& [name, f] : vars) add(name, f);
  } else {
    for (const std::string& name : request.variable()) {
      auto it = vars.find(name);
      if (it == vars.end()) {
        return absl::NotFoundError(absl::StrCat(what, ": no variable named '", name, "' (the session has ",
                                                vars.size(), " variables)"));
      }
      add(name, it->second);
    }
  }
  ASSIGN_OR_RETURN(const int32_t num_variables, CountField(shard.tensors.size(), "num_variables", what));
  ASSIGN_OR_RETURN(const std::string path, LocalShardPath(request.path(), /*for_save=*/true, what));
  ASSIGN_OR_RETURN(ShardFileInfo info, WriteShard(env_, path, shard));
  response->set_path(request.path());  // as the caller named it
  response->set_size(info.size);
  response->set_crc32c(info.crc32c);
  response->set_num_variables(num_variables);
  response->set_owner_task(task());
  Logger("ps")->info("saved {} variables of session '{}' at step {} to {} ({} bytes)", shard.tensors.size(),
                     request.session_handle(), request.global_step(), path, info.size);
  return absl::OkStatus();
}

absl::Status PsHandler::RestoreShard(const RestoreShardRequest& request, RestoreShardResponse* response) {
  const std::string what = absl::StrCat("RestoreShard of session '", request.session_handle(), "' on ", task());
  RETURN_IF_ERROR(CheckStep(request.expect_global_step(), "expect_global_step", what));
  ASSIGN_OR_RETURN(const std::string path, LocalShardPath(request.path(), /*for_save=*/false, what));
  const Stores stores = worker_->ListSessionResources(request.session_handle());
  if (stores.empty()) return NoSession(request.session_handle(), task());
  // Validates the whole file (every checksum) before anything changes.
  ASSIGN_OR_RETURN(Shard shard, ReadShard(env_, path));
  if (request.expect_global_step() != 0 && shard.global_step != request.expect_global_step()) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": ", request.path(), " holds step ", shard.global_step,
                                                      ", expected step ", request.expect_global_step()));
  }
  ASSIGN_OR_RETURN(auto vars, CollectVariables(stores, request.session_handle()));

  // Plan every assignment, then apply them all: all or nothing.
  std::vector<std::pair<ResourceMgr*, ShardTensor*>> plan;
  for (ShardTensor& t : shard.tensors) {
    ResourceMgr* target = nullptr;
    auto it = vars.find(t.name);
    if (it != vars.end()) {
      const Tensor& have = it->second.value;
      if (have.dtype() != t.value.dtype() || have.shape() != t.value.shape()) {
        return absl::FailedPreconditionError(
            absl::StrCat(what, ": variable '", t.name, "' is ", DTypeName(have.dtype()), have.shape().DebugString(),
                         " but ", request.path(), " holds ", DTypeName(t.value.dtype()),
                         t.value.shape().DebugString()));
      }
      target = it->second.store;
    } else {
      // Not created yet: where the shard says it lived, or the only device.
      for (const auto& s : stores) {
        if (s.device == t.device) target = s.resources.get();
      }
      if (target == nullptr && stores.size() == 1) target = stores.front().resources.get();
      if (target == nullptr) {
        std::vector<std::string> devices;
        for (const auto& s : stores) devices.push_back(s.device);
        return absl::FailedPreconditionError(
            absl::StrCat(what, ": variable '", t.name, "' does not exist yet and its device '", t.device,
                         "' is not one of the session's (", absl::StrJoin(devices, ", "), ")"));
      }
    }
    plan.emplace_back(target, &t);
  }
  ASSIGN_OR_RETURN(const int32_t num_variables, CountField(plan.size(), "num_variables", what));
  for (auto& [store, t] : plan) store->SetVariable(t->name, std::move(t->value));
  response->set_global_step(shard.global_step);
  response->set_owner_task(shard.owner_task);
  response->set_num_variables(num_variables);
  Logger("ps")->info("restored {} variables of session '{}' from {} (step {})", plan.size(),
                     request.session_handle(), path, shard.global_step);
  return absl::OkStatus();
}

}  // namespace ps
}  // namespace weft
