#include "master/grpc_master_service.h"

#include <functional>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "master/grpc_upload_reactor.h"

namespace weft {
namespace master {
namespace {

// Authenticates the caller, hands a unary call to `handler` (which decides
// what the caller may do) and finishes it from the handler's callback,
// logging a refusal.
template <typename Request, typename Response>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const PeerAuthenticator& auth, const char* what,
                                const Request* request, Response* response, Master* master,
                                void (Master::*handler)(const Caller&, const Request*, Response*, StatusCallback)) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<Caller> caller = Authorize(auth, *ctx, what, nullptr);
  if (!caller.ok()) {
    reactor->Finish(ToGrpcStatus(caller.status()));
    return reactor;
  }
  (master->*handler)(*caller, request, response,
                     [reactor, what, who = caller->Describe(), peer = ctx->peer()](const absl::Status& s) {
                       if (s.code() == absl::StatusCode::kPermissionDenied) {
                         Logger("auth")->warn("refused {} from {} at {}: {}", what, who, peer,
                                              std::string(s.message()));
                       }
                       reactor->Finish(ToGrpcStatus(s));
                     });
  return reactor;
}

// Streams a job's statuses. Lives until OnDone, which unsubscribes (waiting
// out a delivery in progress) and deletes it. Decisions are made under mu_;
// the gRPC calls they lead to (StartWrite, Finish) are made after releasing
// it, so a reaction that gRPC runs inline cannot deadlock on it.
class WatchJobReactor final : public grpc::ServerWriteReactor<JobStatus> {
 public:
  // A watch refused before it starts. `on_done` runs once the reactor is
  // gone (OnDone).
  WatchJobReactor(const grpc::Status& refused, std::function<void()> on_done) : on_done_(std::move(on_done)) {
    {
      absl::MutexLock lock(&mu_);
      finished_ = true;
    }
    Finish(refused);
  }

  WatchJobReactor(JobManager* jobs, const std::string& job_id, std::function<void()> on_done)
      : on_done_(std::move(on_done)) {
    // The first status arrives inside Watch; writes started before gRPC
    // binds the reactor are held until it does.
    auto watch = jobs->Watch(job_id, [this](const JobStatus& s) { OnStatus(s); });
    Action a;
    {
      absl::MutexLock lock(&mu_);
      if (watch.ok()) {
        watch_ = *std::move(watch);
      } else {
        a = FinishLocked(ToGrpcStatus(watch.status()));
      }
    }
    Do(a);
  }

  void OnWriteDone(bool ok) override {
    Action a;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      // Not ok: the stream is broken, the client went away.
      a = ok ? NextLocked() : FinishLocked(Cancelled());
    }
    Do(a);
  }

  void OnCancel() override {
    Action a;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      // With a write in flight, OnWriteDone follows and finishes.
      if (!writing_) a = FinishLocked(Cancelled());
    }
    Do(a);
  }

  void OnDone() override {
    std::unique_ptr<JobWatch> watch;
    {
      absl::MutexLock lock(&mu_);
      watch = std::move(watch_);
    }
    watch.reset();  // after this no OnStatus runs
    std::function<void()> on_done = std::move(on_done_);
    delete this;
    if (on_done) on_done();
  }

 private:
  struct Action {
    enum { kNone, kWrite, kFinish } kind = kNone;
    grpc::Status status;
  };

  static grpc::Status Cancelled() { return grpc::Status(grpc::StatusCode::CANCELLED, "the client stopped watching"); }

  void OnStatus(const JobStatus& s) {
    Action a;
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      pending_ = s;
      has_pending_ = true;
      if (IsTerminal(s.state())) terminal_ = true;
      a = NextLocked();
    }
    Do(a);
  }

  // What to do now that no write is in flight.
  Action NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return {};
    if (cancelled_) return FinishLocked(Cancelled());
    if (has_pending_) {
      current_ = std::move(pending_);
      has_pending_ = false;
      writing_ = true;
      return {Action::kWrite, grpc::Status::OK};
    }
    if (terminal_) return FinishLocked(grpc::Status::OK);
    return {};
  }

  Action FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return {};
    finished_ = true;
    return {Action::kFinish, status};
  }

  void Do(const Action& a) {
    // current_ is only reassigned once this write is done (writing_).
    if (a.kind == Action::kWrite) StartWrite(&current_);
    if (a.kind == Action::kFinish) Finish(a.status);
  }

  std::function<void()> on_done_;
  absl::Mutex mu_;
  std::unique_ptr<JobWatch> watch_ ABSL_GUARDED_BY(mu_);
  JobStatus current_;                       // being written; see Do
  JobStatus pending_ ABSL_GUARDED_BY(mu_);  // newest not yet written
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool terminal_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* GrpcMasterService::CreateSession(grpc::CallbackServerContext* ctx,
                                                           const CreateSessionRequest* request,
                                                           CreateSessionResponse* response) {
  return Unary(ctx, auth_, "MasterService.CreateSession", request, response, master_, &Master::CreateSessionAsync);
}

grpc::ServerUnaryReactor* GrpcMasterService::ExtendSession(grpc::CallbackServerContext* ctx,
                                                           const ExtendSessionRequest* request,
                                                           ExtendSessionResponse* response) {
  return Unary(ctx, auth_, "MasterService.ExtendSession", request, response, master_, &Master::ExtendSessionAsync);
}

grpc::ServerUnaryReactor* GrpcMasterService::RunStep(grpc::CallbackServerContext* ctx, const RunStepRequest* request,
                                                     RunStepResponse* response) {
  return Unary(ctx, auth_, "MasterService.RunStep", request, response, master_, &Master::RunStepAsync);
}

grpc::ServerUnaryReactor* GrpcMasterService::CloseSession(grpc::CallbackServerContext* ctx,
                                                          const CloseSessionRequest* request,
                                                          CloseSessionResponse* response) {
  return Unary(ctx, auth_, "MasterService.CloseSession", request, response, master_, &Master::CloseSessionAsync);
}

grpc::ServerUnaryReactor* GrpcMasterService::ListDevices(grpc::CallbackServerContext* ctx,
                                                         const ListDevicesRequest* request,
                                                         ListDevicesResponse* response) {
  return Unary(ctx, auth_, "MasterService.ListDevices", request, response, master_, &Master::ListDevicesAsync);
}

grpc::ServerUnaryReactor* GrpcMasterService::Reset(grpc::CallbackServerContext* ctx, const ResetRequest* request,
                                                   ResetResponse* response) {
  return Unary(ctx, auth_, "MasterService.Reset", request, response, master_, &Master::ResetAsync);
}

grpc::ServerUnaryReactor* GrpcMasterService::SubmitJob(grpc::CallbackServerContext* ctx,
                                                       const SubmitJobRequest* request, SubmitJobResponse* response) {
  return Unary(ctx, auth_, "MasterService.SubmitJob", request, response, master_, &Master::SubmitJobAsync);
}

grpc::ServerUnaryReactor* GrpcMasterService::GetJob(grpc::CallbackServerContext* ctx, const GetJobRequest* request,
                                                    JobStatus* response) {
  return Unary(ctx, auth_, "MasterService.GetJob", request, response, master_, &Master::GetJobAsync);
}

grpc::ServerUnaryReactor* GrpcMasterService::ListJobs(grpc::CallbackServerContext* ctx,
                                                      const ListJobsRequest* request, ListJobsResponse* response) {
  return Unary(ctx, auth_, "MasterService.ListJobs", request, response, master_, &Master::ListJobsAsync);
}

grpc::ServerUnaryReactor* GrpcMasterService::CancelJob(grpc::CallbackServerContext* ctx,
                                                       const CancelJobRequest* request, CancelJobResponse* response) {
  return Unary(ctx, auth_, "MasterService.CancelJob", request, response, master_, &Master::CancelJobAsync);
}

grpc::ServerUnaryReactor* GrpcMasterService::RegisterWorker(grpc::CallbackServerContext* ctx,
                                                            const RegisterWorkerRequest* request,
                                                            RegisterWorkerResponse* response) {
  return Unary(ctx, auth_, "MasterService.RegisterWorker", request, response, master_, &Master::RegisterWorkerAsync);
}

grpc::ServerUnaryReactor* GrpcMasterService::ScaleJob(grpc::CallbackServerContext* ctx, const ScaleJobRequest* request,
                                                      ScaleJobResponse* response) {
  return Unary(ctx, auth_, "MasterService.ScaleJob", request, response, master_, &Master::ScaleJobAsync);
}

grpc::ServerUnaryReactor* GrpcMasterService::TraceJob(grpc::CallbackServerContext* ctx,
                                                      const TraceJobRequest* request, TraceJobResponse* response) {
  return Unary(ctx, auth_, "MasterService.TraceJob", request, response, master_, &Master::TraceJobAsync);
}

grpc::ServerUnaryReactor* GrpcMasterService::ReadJobCheckpoint(grpc::CallbackServerContext* ctx,
                                                               const ReadJobCheckpointRequest* request,
                                                               ReadJobCheckpointResponse* response) {
  return Unary(ctx, auth_, "MasterService.ReadJobCheckpoint", request, response, master_,
               &Master::ReadJobCheckpointAsync);
}

grpc::ServerReadReactor<UploadDatasetRequest>* GrpcMasterService::UploadDataset(grpc::CallbackServerContext* ctx,
                                                                                UploadDatasetResponse* response) {
  static constexpr char kWhat[] = "MasterService.UploadDataset";
  absl::StatusOr<Caller> caller =
      Authorize(auth_, *ctx, kWhat, [](const Caller& c) { return RequireUser(c, kWhat); });
  if (!caller.ok()) return new UploadDatasetReactor(ToGrpcStatus(caller.status()));
  DatasetUploads* uploads = master_->uploads();
  if (uploads == nullptr) {
    return new UploadDatasetReactor(
        grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "this master keeps no uploaded datasets"));
  }
  absl::StatusOr<std::unique_ptr<DatasetUploads::Upload>> upload = uploads->Begin(*caller);
  if (!upload.ok()) return new UploadDatasetReactor(ToGrpcStatus(upload.status()));
  return new UploadDatasetReactor(*std::move(upload), response, &upload_pool_, caller->Describe(), ctx->peer());
}

grpc::ServerWriteReactor<JobStatus>* GrpcMasterService::WatchJob(grpc::CallbackServerContext* ctx,
                                                                 const WatchJobRequest* request) {
  constexpr char kWhat[] = "MasterService.WatchJob";
  absl::StatusOr<Caller> caller = Authorize(auth_, *ctx, kWhat, [&](const Caller& c) {
    return master_->AuthorizeJob(c, request->job_id());
  });
  {
    absl::MutexLock lock(&mu_);
    ++active_watches_;
  }
  auto on_done = [this] { WatchEnded(); };
  if (!caller.ok()) return new WatchJobReactor(ToGrpcStatus(caller.status()), std::move(on_done));
  return new WatchJobReactor(master_->jobs(), request->job_id(), std::move(on_done));
}

void GrpcMasterService::WatchEnded() {
  absl::MutexLock lock(&mu_);
  --active_watches_;
}

int GrpcMasterService::active_watches() const {
  absl::MutexLock lock(&mu_);
  return active_watches_;
}

bool GrpcMasterService::AwaitActiveWatches(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_watches_ == n; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

}  // namespace master
}  // namespace weft
