// WorkerServer: a task's gRPC server, what `weft worker` and `weft ps` run.
//
// It owns the Worker core, the WorkerService adapter, the standard health
// service (grpc.health.v1, SERVING while up), the channels to its peers and
// the puller that the remote rendezvous uses to fetch their tensors.
//
// Extra services (WorkerServerOptions::extra_services) are served beside the
// WorkerService on the same port: `weft ps` adds the ParameterServer service
// (ps/ps_service.h) this way, so the worker package does not depend on ps/.
//
// Shutdown stops in this order: health turns NOT_SERVING; the Worker aborts
// every step with UNAVAILABLE (completing pending _Recv kernels and
// RecvTensor calls) and joins its threads; each extra service rejects new
// calls and finishes its running ones; the gRPC server stops, letting
// in-flight calls finish until `shutdown_grace` and cancelling the rest.
// Extra services are destroyed after the gRPC server and before the Worker.
//
// Thread-safety: thread-safe. Shutdown may be called from any thread except
// a gRPC or worker callback; the destructor calls it.
#ifndef WEFT_WORKER_WORKER_SERVER_H_
#define WEFT_WORKER_WORKER_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "grpcpp/server.h"
#include "proto/cluster.pb.h"
#include "worker/collective/worker_collectives.h"
#include "worker/grpc_channel_cache.h"
#include "worker/grpc_remote_worker.h"
#include "worker/grpc_worker_service.h"
#include "worker/worker.h"

namespace weft {
namespace worker {

// A gRPC service served beside the WorkerService, built on the server's
// Worker.
class ExtraService {
 public:
  virtual ~ExtraService() = default;
  // Registered with the gRPC server; owned by this object.
  virtual grpc::Service* service() = 0;
  // Called once by WorkerServer::Shutdown, after the Worker stopped and
  // before the gRPC server stops: rejects new calls and finishes the running
  // ones.
  virtual void Shutdown() = 0;
};

// Builds an extra service; the Worker outlives it. `security` is the
// server's, for the service to authenticate its callers with.
using ExtraServiceFactory =
    std::function<std::unique_ptr<ExtraService>(Worker* worker, std::shared_ptr<const TransportSecurity> security)>;

struct WorkerServerOptions {
  std::string job = "worker";
  int task_index = 0;
  // "host:port"; port 0 picks a free one (see WorkerServer::port()).
  std::string listen_address = "0.0.0.0:0";
  // mTLS: the server requires a certificate from the cluster CA and every
  // channel to a peer presents this task's. Null: insecure (tests).
  std::shared_ptr<const TransportSecurity> security;
  // Peer addresses, for pulling tensors and collectives, until the master
  // sends its own with a RegisterGraph (which replaces them). May be empty:
  // a lone task, or one started before its peers' ports were known.
  ClusterDef cluster;
  int num_cpu_devices = 1;
  // GPUs the task opens (-1: every visible one; 0: none).
  int max_gpus = -1;
  int intra_op_threads = 1;
  int inter_op_threads = 2;
  int compute_threads = 4;
  absl::Duration recv_tensor_timeout = kDefaultRecvTensorTimeout;
  absl::Duration shutdown_grace = absl::Seconds(5);
  // Services served beside the WorkerService (the ps's ParameterServer).
  std::vector<ExtraServiceFactory> extra_services;
  // A collective (all-reduce) that has not finished by then fails, naming
  // the peer it waits for.
  absl::Duration collective_timeout = absl::Seconds(60);
  // Quotas (see Worker, GraphMgr, RendezvousMgr and CollectiveMailbox).
  GraphMgrLimits limits;
  RendezvousMgr::Limits rendezvous_limits;
  // WorkerOptions::datasets (borrowed; outlives the server).
  DatasetCache* datasets = nullptr;
  size_t max_pending_collective_bytes = collective::CollectiveMailbox::kDefaultMaxBufferedBytes;
  // Collective chunks to tasks on this host through shared memory
  // (--shared_memory=false: always the network).
  bool shared_memory = true;
  // Collective chunks to tasks on other hosts over sockets of the task's
  // own, accepted on the listen address's host at collective_port (0: any
  // free port) (--collective_transport=grpc: gRPC streams).
  bool collective_sockets = true;
  int collective_port = 0;
};

class WorkerServer {
 public:
  ~WorkerServer();

  const std::string& task() const { return worker_->task(); }
  // The bound port, and "host:port" with it.
  int port() const { return port_; }
  const std::string& address() const { return address_; }
  Worker* worker() { return worker_.get(); }
  // What the task's rendezvous pulls peers' tensors with.
  GrpcTensorPuller* puller() { return puller_.get(); }
  // Replaces the peer addresses used to pull tensors and run collectives.
  // The Worker calls it with the cluster a RegisterGraph carries.
  void SetCluster(const ClusterDef& cluster) {
    puller_->SetCluster(cluster);
    collectives_->SetCluster(cluster);
  }

  // Idempotent; returns once every thread the server started is joined.
  void Shutdown();
  // Blocks until Shutdown (from another thread) completes.
  void Wait();

 private:
  friend absl::StatusOr<std::unique_ptr<WorkerServer>> StartWorkerServer(const WorkerServerOptions&);
  explicit WorkerServer(const WorkerServerOptions& options);

  const absl::Duration shutdown_grace_;
  // Declared in dependency order: destroyed server first, channels last.
  const std::shared_ptr<const TransportSecurity> security_;
  ChannelCache channels_;
  std::unique_ptr<GrpcTensorPuller> puller_;
  // Ring all-reduce for CollectiveAllReduce kernels (its service is
  // registered on the server); outlives the Worker that borrows it.
  std::unique_ptr<collective::WorkerCollectives> collectives_;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<GrpcWorkerService> service_;
  std::vector<std::unique_ptr<ExtraService>> extra_services_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;

  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// Builds and starts the server. UNAVAILABLE naming the address when it cannot
// be bound.
absl::StatusOr<std::unique_ptr<WorkerServer>> StartWorkerServer(const WorkerServerOptions& options);

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_WORKER_SERVER_H_
