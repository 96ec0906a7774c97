#include "master/master.h"

#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/tensor_proto_coding.h"

namespace weft {
namespace master {

Master::Master(MasterOptions options)
    : options_(std::move(options)),
      jobs_(JobManagerOptions{options_.workers, options_.store, options_.progress_interval, /*env=*/nullptr,
                              options_.preempt_jobs_on_shutdown}),
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

absl::StatusOr<std::shared_ptr<MasterSession>> Master::FindSession(const std::string& handle) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(handle);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("no session '", handle, "' (closed, reset, or never created)"));
  }
  return it->second;
}

void Master::CreateSessionAsync(const CreateSessionRequest* request, CreateSessionResponse* response,
                                StatusCallback done) {
  Schedule(std::move(done), [this, request, response]() -> absl::Status {
    const std::string handle = absl::StrFormat("session-%016x", absl::Uniform<uint64_t>(absl::BitGen()));
    ASSIGN_OR_RETURN(std::unique_ptr<MasterSession> s,
                     MasterSession::Create(handle, request->graph_def(), options_.workers, options_.session_options));
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("the master is shutting down");
    sessions_[handle] = std::move(s);
    response->set_session_handle(handle);
    return absl::OkStatus();
  });
}

void Master::ExtendSessionAsync(const ExtendSessionRequest* request, ExtendSessionResponse*, StatusCallback done) {
  Schedule(std::move(done), [this, request]() -> absl::Status {
    ASSIGN_OR_RETURN(std::shared_ptr<MasterSession> s, FindSession(request->session_handle()));
    return s->Extend(request->graph_def());
  });
}

void Master::RunStepAsync(const RunStepRequest* request, RunStepResponse* response, StatusCallback done) {
  Schedule(std::move(done), [this, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(std::shared_ptr<MasterSession> s, FindSession(request->session_handle()));
    std::vector<std::pair<std::string, Tensor>> feeds;
    for (const NamedTensorProto& f : request->feed()) {
      auto t = TensorFromProto(f.tensor());
      if (!t.ok()) return Annotate(t.status(), absl::StrCat("feed '", f.name(), "'"));
      feeds.emplace_back(f.name(), *std::move(t));
    }
    const std::vector<std::string> fetches(request->fetch().begin(), request->fetch().end());
    const std::vector<std::string> targets(request->target().begin(), request->target().end());
    std::vector<Tensor> outputs;
    RETURN_IF_ERROR(s->Run(feeds, fetches, targets, &outputs));
    for (size_t i = 0; i < outputs.size(); ++i) {
      NamedTensorProto* t = response->add_tensor();
      t->set_name(fetches[i]);
      TensorToProto(outputs[i], t->mutable_tensor());
    }
    return absl::OkStatus();
  });
}

void Master::CloseSessionAsync(const CloseSessionRequest* request, CloseSessionResponse*, StatusCallback done) {
  Schedule(std::move(done), [this, request]() -> absl::Status {
    std::shared_ptr<MasterSession> s;
    {
      absl::MutexLock lock(&mu_);
      auto it = sessions_.find(request->session_handle());
      if (it == sessions_.end()) {
        return absl::NotFoundError(absl::StrCat("no session '", request->session_handle(), "'"));
      }
      s = std::move(it->second);
      sessions_.erase(it);
    }
    return s->Close();  // waits for its running steps
  });
}

void Master::ListDevicesAsync(const ListDevicesRequest*, ListDevicesResponse* response, StatusCallback done) {
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

void Master::ResetAsync(const ResetRequest*, ResetResponse*, StatusCallback done) {
  Schedule(std::move(done), [this] { return CloseAllSessions(); });
}

void Master::SubmitJobAsync(const SubmitJobRequest* request, SubmitJobResponse* response, StatusCallback done) {
  // Lowering a large model takes a while: off the caller's thread.
  Schedule(std::move(done), [this, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(std::string id, jobs_.Submit(request->job()));
    response->set_job_id(id);
    return absl::OkStatus();
  });
}

void Master::GetJobAsync(const GetJobRequest* request, JobStatus* response, StatusCallback done) {
  absl::StatusOr<JobStatus> s = jobs_.Get(request->job_id());
  if (s.ok()) *response = *std::move(s);
  done(s.status());
}

void Master::ListJobsAsync(const ListJobsRequest*, ListJobsResponse* response, StatusCallback done) {
  for (JobStatus& s : jobs_.List()) *response->add_job() = std::move(s);
  done(absl::OkStatus());
}

void Master::CancelJobAsync(const CancelJobRequest* request, CancelJobResponse*, StatusCallback done) {
  done(jobs_.Cancel(request->job_id()));  // returns at once: the job stops on its own thread
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
