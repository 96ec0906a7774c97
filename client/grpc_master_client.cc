#include "client/grpc_master_client.h"

#include <chrono>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/tensor_proto_coding.h"

namespace weft {
namespace {

// Reads a WatchJob stream on gRPC's threads into a queue that the caller's
// thread drains, so the user's callback never runs on a gRPC thread.
class WatchReader final : public grpc::ClientReadReactor<JobStatus> {
 public:
  WatchReader(MasterService::Stub* stub, const std::string& job_id) {
    request_.set_job_id(job_id);
    stub->async()->WatchJob(&ctx_, &request_, this);
    StartRead(&incoming_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone follows
    {
      absl::MutexLock lock(&mu_);
      queue_.push_back(std::move(incoming_));
    }
    incoming_.Clear();
    StartRead(&incoming_);
  }

  void OnDone(const grpc::Status& s) override {
    absl::MutexLock lock(&mu_);
    final_ = s;
    done_ = true;
  }

  // Calls `fn` with every status in order; returns the stream's status once
  // the reactor is done (after which it may be destroyed).
  grpc::Status Drain(const std::function<void(const JobStatus&)>& fn) {
    for (;;) {
      JobStatus next;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &WatchReader::ReadyLocked));
        if (queue_.empty()) return final_;  // done_ and nothing left
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      if (fn) fn(next);
    }
  }

 private:
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ || !queue_.empty(); }

  grpc::ClientContext ctx_;
  WatchJobRequest request_;
  JobStatus incoming_;  // touched only by the read chain
  absl::Mutex mu_;
  std::deque<JobStatus> queue_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<MasterClient> MasterClient::Create(const std::string& target, MasterClientOptions options) {
  return std::make_unique<MasterClient>(NewChannel(target, options.credentials), target, options);
}

MasterClient::MasterClient(std::shared_ptr<grpc::Channel> channel, std::string target, MasterClientOptions options)
    : target_(std::move(target)), options_(options), channel_(std::move(channel)),
      stub_(MasterService::NewStub(channel_)) {}

absl::Status MasterClient::FromRpc(const grpc::Status& s) const {
  absl::Status st = FromGrpcStatus(s);
  if (st.code() == absl::StatusCode::kUnavailable || st.code() == absl::StatusCode::kDeadlineExceeded) {
    return Annotate(st, absl::StrCat("master at ", target_));
  }
  return st;
}

absl::Status MasterClient::Call(
    absl::Duration timeout,
    const std::function<void(grpc::ClientContext*, std::function<void(grpc::Status)>)>& start) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  absl::Notification done;
  grpc::Status result;
  start(&ctx, [&](grpc::Status s) {
    result = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return FromRpc(result);
}

absl::StatusOr<std::string> MasterClient::SubmitJob(const JobSpec& job) {
  SubmitJobRequest req;
  *req.mutable_job() = job;
  SubmitJobResponse resp;
  RETURN_IF_ERROR(Call(options_.timeout, [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> cb) {
    stub_->async()->SubmitJob(ctx, &req, &resp, std::move(cb));
  }));
  return resp.job_id();
}

absl::StatusOr<JobStatus> MasterClient::GetJob(const std::string& job_id) {
  GetJobRequest req;
  req.set_job_id(job_id);
  JobStatus resp;
  RETURN_IF_ERROR(Call(options_.timeout, [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> cb) {
    stub_->async()->GetJob(ctx, &req, &resp, std::move(cb));
  }));
  return resp;
}

absl::StatusOr<std::vector<JobStatus>> MasterClient::ListJobs() {
  ListJobsRequest req;
  ListJobsResponse resp;
  RETURN_IF_ERROR(Call(options_.timeout, [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> cb) {
    stub_->async()->ListJobs(ctx, &req, &resp, std::move(cb));
  }));
  return std::vector<JobStatus>(resp.job().begin(), resp.job().end());
}

absl::Status MasterClient::CancelJob(const std::string& job_id) {
  CancelJobRequest req;
  req.set_job_id(job_id);
  CancelJobResponse resp;
  return Call(options_.timeout, [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> cb) {
    stub_->async()->CancelJob(ctx, &req, &resp, std::move(cb));
  });
}

absl::Status MasterClient::ScaleJob(const std::string& job_id, int workers) {
  ScaleJobRequest req;
  req.set_job_id(job_id);
  req.set_workers(workers);
  ScaleJobResponse resp;
  return Call(options_.timeout, [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> cb) {
    stub_->async()->ScaleJob(ctx, &req, &resp, std::move(cb));
  });
}

absl::StatusOr<TraceJobResponse> MasterClient::TraceJob(const std::string& job_id, int steps) {
  TraceJobRequest req;
  req.set_job_id(job_id);
  req.set_steps(steps);
  TraceJobResponse resp;
  RETURN_IF_ERROR(Call(absl::Seconds(90), [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> cb) {
    stub_->async()->TraceJob(ctx, &req, &resp, std::move(cb));
  }));
  return resp;
}

absl::Status MasterClient::WatchJob(const std::string& job_id,
                                    const std::function<void(const JobStatus&)>& on_status) {
  // No deadline: the stream lasts as long as the job. Keepalive on the
  // channel notices a master that disappears.
  WatchReader reader(stub_.get(), job_id);
  return FromRpc(reader.Drain(on_status));
}

absl::StatusOr<std::vector<DeviceAttributes>> MasterClient::ListDevices() {
  ListDevicesRequest req;
  ListDevicesResponse resp;
  RETURN_IF_ERROR(Call(options_.timeout, [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> cb) {
    stub_->async()->ListDevices(ctx, &req, &resp, std::move(cb));
  }));
  return std::vector<DeviceAttributes>(resp.device().begin(), resp.device().end());
}

absl::Status MasterClient::WaitForConnection(absl::Duration timeout) {
  const auto deadline = std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
  if (channel_->WaitForConnected(deadline)) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("master at ", target_, " did not answer within ", absl::FormatDuration(timeout)));
}

absl::Status MasterClient::Reset(const std::vector<std::string>& containers) {
  ResetRequest req;
  for (const std::string& c : containers) req.add_container(c);
  ResetResponse resp;
  return Call(options_.timeout, [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> cb) {
    stub_->async()->Reset(ctx, &req, &resp, std::move(cb));
  });
}

absl::StatusOr<std::string> MasterClient::CreateSession(const GraphDef& graph) {
  CreateSessionRequest req;
  *req.mutable_graph_def() = graph;
  CreateSessionResponse resp;
  RETURN_IF_ERROR(Call(options_.timeout, [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> cb) {
    stub_->async()->CreateSession(ctx, &req, &resp, std::move(cb));
  }));
  return resp.session_handle();
}

absl::Status MasterClient::ExtendSession(const std::string& handle, const GraphDef& graph) {
  ExtendSessionRequest req;
  req.set_session_handle(handle);
  *req.mutable_graph_def() = graph;
  ExtendSessionResponse resp;
  return Call(options_.timeout, [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> cb) {
    stub_->async()->ExtendSession(ctx, &req, &resp, std::move(cb));
  });
}

absl::Status MasterClient::RunStep(const RunStepRequest& request, RunStepResponse* response) {
  return Call(options_.step_timeout, [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> cb) {
    stub_->async()->RunStep(ctx, &request, response, std::move(cb));
  });
}

absl::Status MasterClient::CloseSession(const std::string& handle) {
  CloseSessionRequest req;
  req.set_session_handle(handle);
  CloseSessionResponse resp;
  return Call(options_.timeout, [&](grpc::ClientContext* ctx, std::function<void(grpc::Status)> cb) {
    stub_->async()->CloseSession(ctx, &req, &resp, std::move(cb));
  });
}

absl::StatusOr<std::unique_ptr<RemoteSession>> RemoteSession::Create(MasterClient* client, const GraphDef& graph) {
  ASSIGN_OR_RETURN(std::string handle, client->CreateSession(graph));
  return std::unique_ptr<RemoteSession>(new RemoteSession(client, std::move(handle)));
}

RemoteSession::~RemoteSession() {
  absl::Status s = Close();
  if (!s.ok()) Logger("client")->warn("closing session {}: {}", handle_, s.ToString());
}

absl::Status RemoteSession::Extend(const GraphDef& graph) {
  if (closed_) return absl::FailedPreconditionError(absl::StrCat("session ", handle_, " is closed"));
  return client_->ExtendSession(handle_, graph);
}

absl::StatusOr<std::vector<Tensor>> RemoteSession::Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                                       const std::vector<std::string>& fetches,
                                                       const std::vector<std::string>& targets) {
  if (closed_) return absl::FailedPreconditionError(absl::StrCat("session ", handle_, " is closed"));
  RunStepRequest req;
  req.set_session_handle(handle_);
  for (const auto& [name, value] : feeds) {
    NamedTensorProto* f = req.add_feed();
    f->set_name(name);
    TensorToProto(value, f->mutable_tensor());
  }
  for (const std::string& f : fetches) req.add_fetch(f);
  for (const std::string& t : targets) req.add_target(t);
  RunStepResponse resp;
  RETURN_IF_ERROR(client_->RunStep(req, &resp));
  if (resp.tensor_size() != static_cast<int>(fetches.size())) {
    return absl::InternalError(
        absl::StrCat("the master returned ", resp.tensor_size(), " tensors for ", fetches.size(), " fetches"));
  }
  std::vector<Tensor> out;
  for (const NamedTensorProto& t : resp.tensor()) {
    auto v = TensorFromProto(t.tensor());
    if (!v.ok()) return Annotate(v.status(), absl::StrCat("fetch '", t.name(), "'"));
    out.push_back(*std::move(v));
  }
  return out;
}

absl::Status RemoteSession::Close() {
  if (closed_) return absl::OkStatus();
  closed_ = true;
  return client_->CloseSession(handle_);
}

}  // namespace weft
