#include "master/master.h"

#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/tensor_proto_coding.h"
#include "master/checkpoint_reader.h"
#include "master/cluster_probe.h"
#include "master/containers.h"

namespace weft {
namespace master {
namespace {

// `weft trace`: at most this many steps, recorded for at most this long.
constexpr int kMaxTraceSteps = 100;
constexpr absl::Duration kTraceTimeout = absl::Seconds(60);

}  // namespace

Master::Master(MasterOptions options)
    : options_(std::move(options)),
      joins_(options_.workers),
      jobs_(JobManagerOptions{options_.workers, options_.store, options_.progress_interval, /*env=*/nullptr,
                              options_.preempt_jobs_on_shutdown, options_.checkpoint_root,
                              options_.max_running_jobs, options_.max_queued_jobs, options_.step_watch,
                              options_.uploads}),
      pool_(std::make_unique<ThreadPool>("master", options_.num_threads > 0 ? options_.num_threads : 1)) {}

Master::~Master() { Shutdown(); }

void Master::Schedule(StatusCallback done, std::function<absl::Status()> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (!shutting_down_) {
      pool_->Schedule([done = std::move(done), fn = std::move(fn)] { done(fn()); });
      return;
    }
  }
  done(absl::UnavailableError("the master is shutting down"));
}

absl::StatusOr<std::shared_ptr<MasterSession>> Master::FindSession(const Caller& caller,
                                                                  const std::string& handle) const {
  RETURN_IF_ERROR(RequireUser(caller, "the session calls"));
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(handle);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("no session '", handle, "' (closed, reset, or never created)"));
  }
  auto owner = session_owners_.find(handle);
  RETURN_IF_ERROR(RequireOwnerOrAdmin(caller, owner == session_owners_.end() ? "" : owner->second,
                                      absl::StrCat("session ", handle)));
  return it->second;
}

void Master::CreateSessionAsync(const Caller& caller, const CreateSessionRequest* request,
                                CreateSessionResponse* response, StatusCallback done) {
  if (absl::Status s = RequireUser(caller, "MasterService.CreateSession"); !s.ok()) return done(s);
  Schedule(std::move(done), [this, owner = caller.owner(), request, response]() -> absl::Status {
    // 128 random bits: a handle is not guessable from another.
    absl::BitGen gen;
    const std::string handle = absl::StrFormat("session-%016x%016x", absl::Uniform<uint64_t>(gen),
                                               absl::Uniform<uint64_t>(gen));
    // The tasks see each container under its owner's name only.
    GraphDef graph = request->graph_def();
    RETURN_IF_ERROR(ScopeContainers(owner, &graph));
    ASSIGN_OR_RETURN(std::unique_ptr<MasterSession> s,
                     MasterSession::Create(handle, graph, options_.workers, options_.session_options));
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("the master is shutting down");
    sessions_[handle] = std::move(s);
    session_owners_[handle] = owner;
    response->set_session_handle(handle);
    return absl::OkStatus();
  });
}

void Master::ExtendSessionAsync(const Caller& caller, const ExtendSessionRequest* request, ExtendSessionResponse*,
                                StatusCallback done) {
  Schedule(std::move(done), [this, caller, request]() -> absl::Status {
    ASSIGN_OR_RETURN(std::shared_ptr<MasterSession> s, FindSession(caller, request->session_handle()));
    // Scoped by the caller, as at CreateSession: an admin extending another
    // user's session names the admin's own containers.
    GraphDef graph = request->graph_def();
    RETURN_IF_ERROR(ScopeContainers(caller.owner(), &graph));
    return s->Extend(graph);
  });
}

namespace {

absl::Status DecodeFeeds(const RunStepRequest& request, std::vector<std::pair<std::string, Tensor>>* feeds) {
  for (const NamedTensorProto& f : request.feed()) {
    auto t = TensorFromProto(f.tensor());
    if (!t.ok()) return Annotate(t.status(), absl::StrCat("feed '", f.name(), "'"));
    feeds->emplace_back(f.name(), *std::move(t));
  }
  return absl::OkStatus();
}

void FillFetches(const RunStepRequest& request, std::vector<Tensor>& outputs, RunStepResponse* response) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    NamedTensorProto* t = response->add_tensor();
    t->set_name(request.fetch(static_cast<int>(i)));
    TensorToProto(outputs[i], t->mutable_tensor());
  }
}

}  // namespace

void Master::RunStepAsync(const Caller& caller, const RunStepRequest* request, RunStepResponse* response,
                          StatusCallback done) {
  // A step whose plan is built takes no thread of the master's: it starts on
  // this (the RPC's) thread and answers from the thread of the last task's
  // answer. Only a step that must first register its partitions, and so
  // wait, goes to the pool.
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return done(absl::UnavailableError("the master is shutting down"));
  }
  absl::StatusOr<std::shared_ptr<MasterSession>> session = FindSession(caller, request->session_handle());
  if (!session.ok()) return done(session.status());
  std::vector<std::pair<std::string, Tensor>> feeds;
  if (absl::Status s = DecodeFeeds(*request, &feeds); !s.ok()) return done(s);
  const std::vector<std::string> fetches(request->fetch().begin(), request->fetch().end());
  const std::vector<std::string> targets(request->target().begin(), request->target().end());
  // The callback holds the session, so it outlives the step's end.
  const bool started = (*session)->RunAsync(
      feeds, fetches, targets, 1,
      [request, response, done, held = *session](absl::Status s, std::vector<Tensor> outputs) {
        if (s.ok()) FillFetches(*request, outputs, response);
        done(s);
      });
  if (started) return;
  Schedule(std::move(done), [request, response, session = *std::move(session), feeds = std::move(feeds), fetches,
                             targets]() -> absl::Status {
    std::vector<Tensor> outputs;
    RETURN_IF_ERROR(session->Run(feeds, fetches, targets, &outputs));
    FillFetches(*request, outputs, response);
    return absl::OkStatus();
  });
}

void Master::CloseSessionAsync(const Caller& caller, const CloseSessionRequest* request, CloseSessionResponse*,
                                StatusCallback done) {
  Schedule(std::move(done), [this, caller, request]() -> absl::Status {
    RETURN_IF_ERROR(FindSession(caller, request->session_handle()).status());
    std::shared_ptr<MasterSession> s;
    {
      absl::MutexLock lock(&mu_);
      auto it = sessions_.find(request->session_handle());
      if (it == sessions_.end()) {
        return absl::NotFoundError(absl::StrCat("no session '", request->session_handle(), "'"));
      }
      s = std::move(it->second);
      sessions_.erase(it);
      session_owners_.erase(request->session_handle());
    }
    return s->Close();  // waits for its running steps
  });
}

void Master::ListDevicesAsync(const Caller& caller, const ListDevicesRequest*, ListDevicesResponse* response,
                              StatusCallback done) {
  if (absl::Status s = RequireUser(caller, "MasterService.ListDevices"); !s.ok()) return done(s);
  Schedule(std::move(done), [this, response]() -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<DeviceAttributes> devices, ListClusterDevices(options_.workers));
    for (DeviceAttributes& d : devices) *response->add_device() = std::move(d);
    return absl::OkStatus();
  });
}

absl::Status Master::CloseAllSessions() {
  std::map<std::string, std::shared_ptr<MasterSession>> sessions;
  {
    absl::MutexLock lock(&mu_);
    sessions.swap(sessions_);
    session_owners_.clear();
  }
  absl::Status first;
  for (auto& [handle, s] : sessions) {
    s->AbortRunningSteps(absl::CancelledError("the session was reset"));
  }
  for (auto& [handle, s] : sessions) {
    absl::Status closed = s->Close();
    if (first.ok()) first = closed;
  }
  return first;
}

void Master::ResetAsync(const Caller& caller, const ResetRequest* request, ResetResponse*, StatusCallback done) {
  // Everything (every user's sessions and containers): an admin. One's own
  // containers: any user.
  const bool all = request->container().empty();
  absl::Status allowed = all ? RequireAdmin(caller, "MasterService.Reset")
                             : RequireUser(caller, "MasterService.Reset of containers");
  if (!allowed.ok()) return done(allowed);
  absl::StatusOr<ResetContainersRequest> tasks = TaskResetRequest(caller.owner(), *request);
  if (!tasks.ok()) return done(tasks.status());
  Schedule(std::move(done), [this, all, tasks = *std::move(tasks)] {
    absl::Status closed = all ? CloseAllSessions() : absl::OkStatus();
    absl::Status cleared = ResetContainersOnEveryTask(options_.workers, tasks);
    return closed.ok() ? cleared : closed;
  });
}

void Master::SubmitJobAsync(const Caller& caller, const SubmitJobRequest* request, SubmitJobResponse* response,
                            StatusCallback done) {
  if (absl::Status s = RequireUser(caller, "MasterService.SubmitJob"); !s.ok()) return done(s);
  // A job trains on an uploaded dataset only when its owner uploaded it.
  if (const std::string& id = request->job().dataset().upload_id(); !id.empty()) {
    absl::Status s = options_.uploads == nullptr
                         ? absl::FailedPreconditionError("this master keeps no uploaded datasets (upload_id)")
                         : options_.uploads->Authorize(caller, id);
    if (!s.ok()) return done(s);
  }
  // Lowering a large model takes a while: off the caller's thread.
  Schedule(std::move(done), [this, owner = caller.owner(), request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(std::string id, jobs_.Submit(request->job(), owner));
    response->set_job_id(id);
    return absl::OkStatus();
  });
}

absl::Status Master::AuthorizeJob(const Caller& caller, const std::string& job_id) const {
  RETURN_IF_ERROR(RequireUser(caller, "the job calls"));
  ASSIGN_OR_RETURN(JobStatus status, jobs_.Get(job_id));
  return RequireOwnerOrAdmin(caller, status.owner(), absl::StrCat("job ", job_id));
}

void Master::GetJobAsync(const Caller& caller, const GetJobRequest* request, JobStatus* response,
                         StatusCallback done) {
  if (absl::Status a = AuthorizeJob(caller, request->job_id()); !a.ok()) return done(a);
  absl::StatusOr<JobStatus> s = jobs_.Get(request->job_id());
  if (s.ok()) *response = *std::move(s);
  done(s.status());
}

void Master::ListJobsAsync(const Caller& caller, const ListJobsRequest*, ListJobsResponse* response,
                           StatusCallback done) {
  if (absl::Status s = RequireUser(caller, "MasterService.ListJobs"); !s.ok()) return done(s);
  const bool all = caller.insecure() || caller.admin;
  for (JobStatus& s : jobs_.List()) {
    if (all || s.owner() == caller.name) *response->add_job() = std::move(s);
  }
  done(absl::OkStatus());
}

void Master::CancelJobAsync(const Caller& caller, const CancelJobRequest* request, CancelJobResponse*,
                            StatusCallback done) {
  if (absl::Status a = AuthorizeJob(caller, request->job_id()); !a.ok()) return done(a);
  done(jobs_.Cancel(request->job_id()));  // returns at once: the job stops on its own thread
}

void Master::ScaleJobAsync(const Caller& caller, const ScaleJobRequest* request, ScaleJobResponse*,
                           StatusCallback done) {
  if (absl::Status a = AuthorizeJob(caller, request->job_id()); !a.ok()) return done(a);
  done(jobs_.Scale(request->job_id(), request->workers()));
}

void Master::RegisterWorkerAsync(const Caller& caller, const RegisterWorkerRequest* request,
                                 RegisterWorkerResponse* response, StatusCallback done) {
  joins_.Join(caller, request, response, std::move(done));
}

void Master::TraceJobAsync(const Caller& caller, const TraceJobRequest* request, TraceJobResponse* response,
                           StatusCallback done) {
  if (absl::Status a = AuthorizeJob(caller, request->job_id()); !a.ok()) return done(a);
  if (request->steps() < 1 || request->steps() > kMaxTraceSteps) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("trace of ", request->steps(), " steps: steps must be 1..", kMaxTraceSteps)));
  }
  Schedule(std::move(done), [this, request, response] {
    ASSIGN_OR_RETURN(*response, jobs_.Trace(request->job_id(), request->steps(), kTraceTimeout));
    return absl::OkStatus();
  });
}

void Master::ReadJobCheckpointAsync(const Caller& caller, const ReadJobCheckpointRequest* request,
                                    ReadJobCheckpointResponse* response, StatusCallback done) {
  if (absl::Status a = AuthorizeJob(caller, request->job_id()); !a.ok()) return done(a);
  // Reading shard files takes a while: off the caller's thread.
  Schedule(std::move(done), [this, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(JobStatus status, jobs_.Get(request->job_id()));
    if (status.checkpoint_path().empty()) {
      return absl::FailedPreconditionError(absl::StrCat("job ", request->job_id(), " has written no checkpoint"));
    }
    // checkpoint_path is the newest step-* directory of the job's own.
    const std::string& newest = status.checkpoint_path();
    const std::string job_dir = newest.substr(0, newest.find_last_of('/'));
    ASSIGN_OR_RETURN(*response, ReadCheckpointPage(Env::Default(), job_dir, request->step(), request->first()));
    return absl::OkStatus();
  });
}

void Master::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
  }
  jobs_.Shutdown();
  absl::Status s = CloseAllSessions();
  if (!s.ok()) Logger("master")->warn("closing sessions at shutdown: {}", s.ToString());
  std::unique_ptr<ThreadPool> pool;
  {
    absl::MutexLock lock(&mu_);
    pool = std::move(pool_);
  }
  pool.reset();  // runs what was queued (each answers promptly now) and joins
  // A session created by work that was queued before shutdown began.
  CloseAllSessions().IgnoreError();
}

}  // namespace master
}  // namespace weft
