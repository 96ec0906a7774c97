// MasterClient: the C++ client of a weft master (MasterService over gRPC).
//
// Jobs: SubmitJob, GetJob, ListJobs, CancelJob, and WatchJob, which blocks
// and calls back with every status the master streams until the job ends.
// Interactive graphs: RemoteSession, a TensorFlow-style session whose graph
// lives on the master and runs on the cluster's tasks.
//
// Every unary call carries a deadline (`timeout`, or `step_timeout` for
// RunStep). Errors keep the master's status code; a transport failure
// (UNAVAILABLE, DEADLINE_EXCEEDED) names the master's address.
//
// Thread-safety: MasterClient is thread-safe (calls share one channel).
// RemoteSession is thread-safe for Run; Close and the destructor must not
// race with other calls on the same session.
#ifndef WEFT_CLIENT_GRPC_MASTER_CLIENT_H_
#define WEFT_CLIENT_GRPC_MASTER_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tensor.h"
#include "grpcpp/grpcpp.h"
#include "proto/graph.pb.h"
#include "proto/job.pb.h"
#include "proto/master_service.grpc.pb.h"

namespace weft {

struct MasterClientOptions {
  absl::Duration timeout = absl::Seconds(30);      // every call but RunStep
  absl::Duration step_timeout = absl::Minutes(10);  // RunStep
  // TLS (and a token) for the master: client/grpc_client_auth.h. Null: plaintext,
  // for a master started with --insecure.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

class MasterClient {
 public:
  // A client of the master at "host:port" (a channel from NewChannel).
  static std::unique_ptr<MasterClient> Create(const std::string& target, MasterClientOptions options = {});
  MasterClient(std::shared_ptr<grpc::Channel> channel, std::string target, MasterClientOptions options);

  const std::string& target() const { return target_; }

  // The new job's id; INVALID_ARGUMENT names what is wrong with the job.
  absl::StatusOr<std::string> SubmitJob(const JobSpec& job);
  absl::StatusOr<JobStatus> GetJob(const std::string& job_id);
  absl::StatusOr<std::vector<JobStatus>> ListJobs();
  absl::Status CancelJob(const std::string& job_id);
  absl::Status ScaleJob(const std::string& job_id, int workers);
  // `weft trace`: the job's next `steps` steps as Chrome trace JSON. Waits
  // up to 90 s (the master records for at most a minute).
  absl::StatusOr<TraceJobResponse> TraceJob(const std::string& job_id, int steps);
  // Calls `on_status` on this thread with each status the master sends (the
  // current one first) and returns when the stream ends: OK after the job's
  // terminal status, NOT_FOUND for an unknown job, or the transport's error.
  absl::Status WatchJob(const std::string& job_id, const std::function<void(const JobStatus&)>& on_status);
  absl::StatusOr<std::vector<DeviceAttributes>> ListDevices();
  // Blocks until the channel to the master is connected (at once when it
  // is), for at most `timeout`; UNAVAILABLE naming the master otherwise. For
  // riding out a master restart: the channel retries its connection at least
  // once a second (common/grpc_util.h), and this waits without polling.
  absl::Status WaitForConnection(absl::Duration timeout);
  // No containers: closes every session on the master and clears every
  // variable container on its tasks (an admin's call). Containers named:
  // clears the caller's own containers of those names (any user).
  absl::Status Reset(const std::vector<std::string>& containers = {});

  // The raw session calls; RemoteSession is the friendlier face.
  absl::StatusOr<std::string> CreateSession(const GraphDef& graph);
  absl::Status ExtendSession(const std::string& handle, const GraphDef& graph);
  absl::Status RunStep(const RunStepRequest& request, RunStepResponse* response);
  absl::Status CloseSession(const std::string& handle);

 private:
  // Runs one unary call: `start` issues it on stub()->async() with the
  // context and completion callback given.
  absl::Status Call(absl::Duration timeout,
                    const std::function<void(grpc::ClientContext*, std::function<void(grpc::Status)>)>& start);
  absl::Status FromRpc(const grpc::Status& s) const;

  const std::string target_;
  const MasterClientOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<MasterService::Stub> stub_;
};

// A graph held by the master: Create, Extend, Run, Close.
class RemoteSession {
 public:
  // `client` must outlive the session.
  static absl::StatusOr<std::unique_ptr<RemoteSession>> Create(MasterClient* client, const GraphDef& graph);
  // Closes the session if Close has not been called (errors are logged).
  ~RemoteSession();
  RemoteSession(const RemoteSession&) = delete;
  RemoteSession& operator=(const RemoteSession&) = delete;

  const std::string& handle() const { return handle_; }
  absl::Status Extend(const GraphDef& graph);
  // Feeds (tensor name, value); returns one tensor per fetch, in order.
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                          const std::vector<std::string>& fetches,
                                          const std::vector<std::string>& targets = {});
  // Later calls fail with FAILED_PRECONDITION. Idempotent.
  absl::Status Close();

 private:
  RemoteSession(MasterClient* client, std::string handle) : client_(client), handle_(std::move(handle)) {}

  MasterClient* const client_;
  const std::string handle_;
  bool closed_ = false;
};

}  // namespace weft

#endif  // WEFT_CLIENT_GRPC_MASTER_CLIENT_H_
