#include "worker/worker_server.h"

#include <netdb.h>
#include <sys/socket.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/cluster_spec.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "graph/device_name.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "worker/ring_pulls.h"

namespace weft {
namespace worker {
namespace {

// The IP address the collective sockets listen on: the listen address's
// host, a name resolved to its first address ("localhost": 127.0.0.1), so
// the socket is never reachable where the gRPC port is not; "" (every
// address) only for an empty host or 0.0.0.0.
std::string ListenHost(const std::string& listen_address) {
  const std::string host = listen_address.find(':') == std::string::npos ? "" : AddressHost(listen_address);
  if (host.empty() || host == "0.0.0.0") return "";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return host;  // Listen says why
  char numeric[NI_MAXHOST];
  const bool ok =
      getnameinfo(found->ai_addr, found->ai_addrlen, numeric, sizeof(numeric), nullptr, 0, NI_NUMERICHOST) == 0;
  freeaddrinfo(found);
  return ok ? std::string(numeric) : host;
}

}  // namespace

WorkerServer::WorkerServer(const WorkerServerOptions& options)
    : shutdown_grace_(options.shutdown_grace),
      security_(options.security != nullptr ? options.security : TransportSecurity::Insecure()),
      channels_(security_->ChannelCredentials()) {
  puller_ = std::make_unique<GrpcTensorPuller>(options.cluster, &channels_, options.recv_tensor_timeout);
  WorkerOptions w;
  w.job = options.job;
  w.task_index = options.task_index;
  w.num_cpu_devices = options.num_cpu_devices;
  w.max_gpus = options.max_gpus;
  w.intra_op_threads = options.intra_op_threads;
  w.inter_op_threads = options.inter_op_threads;
  w.compute_threads = options.compute_threads;
  w.limits = options.limits;
  w.rendezvous_limits = options.rendezvous_limits;
  w.datasets = options.datasets;
  w.puller = puller_.get();
  collective::WorkerCollectives::Options c;
  c.timeout = options.collective_timeout;
  c.security = security_;
  c.max_pending_bytes = options.max_pending_collective_bytes;
  c.shared_memory = options.shared_memory;
  c.sockets = options.collective_sockets;
  c.socket_host = ListenHost(options.listen_address);
  c.socket_port = options.collective_port;
  collectives_ =
      std::make_unique<collective::WorkerCollectives>(TaskName(options.job, options.task_index), options.cluster, c);
  w.collectives = collectives_.get();
  // RecvTensor replies between tasks of this host through the same rings.
  puller_->SetShmMailbox(collectives_->shm_mailbox());
  // The master's cluster, sent with RegisterGraph, replaces the one given
  // here (which may be empty: a task started without its peers' ports).
  w.set_cluster = [this](const ClusterDef& cluster) { SetCluster(cluster); };
  worker_ = std::make_unique<Worker>(w);
  service_ = std::make_unique<GrpcWorkerService>(worker_.get(), security_);
  if (options.shared_memory) {
    service_->SetShmReply([c = collectives_.get()](const std::string& task, int64_t step_id, uint64_t pull_id,
                                                   const Tensor& value, std::string header, StatusCallback& done) {
      return c->SendTensorThroughRing(task, step_id, pull_id, value, std::move(header), done);
    });
    // Pulls between tasks of this host that have rings both ways skip gRPC.
    puller_->SetRingRequester([c = collectives_.get()](const std::string& task, int64_t step_id, uint64_t pull_id,
                                                       std::string request, StatusCallback& done) {
      return c->SendPullRequestThroughRing(task, step_id, pull_id, std::move(request), done);
    });
    collectives_->SetPullRequestHandler(
        [w = worker_.get(), c = collectives_.get()](const std::string& caller, const collective::ChunkKey& key,
                                                    std::string request) {
          ServeRingPull(w, c, caller, key, request);
        });
  }
  for (const ExtraServiceFactory& make : options.extra_services) {
    extra_services_.push_back(make(worker_.get(), security_));
  }
}

WorkerServer::~WorkerServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<WorkerServer>> StartWorkerServer(const WorkerServerOptions& options) {
  std::unique_ptr<WorkerServer> s(new WorkerServer(options));
  if (!s->collectives_->start_status().ok()) {
    s->worker_->Shutdown();
    return s->collectives_->start_status();
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigureServer(&builder);
  builder.AddListeningPort(options.listen_address,
                           s->security_->ServerCredentials(/*require_client_certificate=*/true), &s->port_);
  collective::ConfigureCollectiveServer(&builder);
  builder.RegisterService(s->service_.get());
  builder.RegisterService(s->collectives_->service());
  for (auto& extra : s->extra_services_) builder.RegisterService(extra->service());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    s->server_.reset();
    s->worker_->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("task ", s->task(), " could not listen on ", options.listen_address));
  }
  const size_t colon = options.listen_address.rfind(':');
  s->address_ = absl::StrCat(options.listen_address.substr(0, colon), ":", s->port_);
  s->server_->GetHealthCheckService()->SetServingStatus(true);
  Logger("worker")->info("task {} serving on {} ({}); collective sockets {}", s->task(), s->address_,
                         s->security_->insecure() ? "insecure" : "mTLS",
                         s->collectives_->socket_port() != 0 ? absl::StrCat("on port ", s->collectives_->socket_port())
                                                             : std::string("off"));
  return s;
}

void WorkerServer::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  stopped_ = true;
  if (server_ != nullptr) server_->GetHealthCheckService()->SetServingStatus(false);
  worker_->Shutdown();
  collectives_->Close(absl::UnavailableError(absl::StrCat("task ", worker_->task(), " is shutting down")));
  for (auto& extra : extra_services_) extra->Shutdown();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(shutdown_grace_));
    server_->Wait();
  }
  Logger("worker")->info("task {} stopped", worker_->task());
}

void WorkerServer::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&stopped_));
}

}  // namespace worker
}  // namespace weft
