// One rank of a ring all-reduce benchmark over weft's transports.
//
//   allreduce_bench --rank=R --addresses=h:p,h:p,... --bytes=N --reps=K
//                   [--warmup=W] [--chunk_bytes=C] [--timeout_s=T]
//                   [--inline_reduce=true] [--transport=shm|grpc|socket]
//                   [--ring_bytes=B] [--spin_us=S] [--tls_dir=DIR]
//
// --transport=shm (the default, as a worker runs): chunks through
// shared-memory rings of --ring_bytes between the ranks (all on this host),
// waiting sides spinning --spin_us before they sleep; grpc: over gRPC
// streams only (--shared_memory=false --collective_transport=grpc); socket:
// over the sockets workers on different hosts use (--shared_memory=false).
// With --tls_dir, holding the CA (ca.crt) and each rank's certificate and
// key (`weft certs issue DIR --name=/job:worker/task:R`), gRPC and the
// sockets use mutual TLS, as a cluster does; without, plaintext.
//
// Serves CollectiveService on addresses[R], then all-reduces a float32
// tensor of N bytes W + K times. Each repetition starts after a one-element
// all-reduce (a barrier), as the gloo peer's does, and counts the slowest
// rank's time. Rank 0 prints one JSON line: median_ms, min_ms, max_ms and
// busbw_GBps = bytes * 2(n-1)/n / median (nccl-tests), and what the timed
// repetitions cost all ranks together per call (barriers included):
// cpu_ms (user + system) and ctx_switches (voluntary + involuntary), from
// getrusage. Exits non-zero, with the reason on stderr, when a collective
// fails or the first result is wrong.
//
// --inline_reduce=true (the default) sums chunks on the gRPC thread that
// received them, as WorkerCollectives does; false hands them to a one-thread
// reduce pool, as weft did before.
#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/certs.h"
#include "common/grpc_security.h"
#include "common/grpc_util.h"
#include "common/tensor.h"
#include "common/thread_pool.h"
#include "grpcpp/grpcpp.h"
#include "worker/collective/collective_executor.h"
#include "worker/collective/grpc_collective_service.h"
#include "worker/collective/grpc_collective_transport.h"
#include "worker/collective/grpc_shm_offerer.h"
#include "worker/collective/shm_collective_transport.h"
#include "worker/collective/socket_collective_transport.h"

namespace weft {
namespace collective {
namespace {

struct Flags {
  int rank = 0;
  std::vector<std::string> addresses;
  int64_t bytes = 64 << 20;
  int reps = 10;
  int warmup = 2;
  int64_t chunk_bytes = kDefaultChunkBytes;
  int timeout_s = 120;
  bool inline_reduce = true;  // reduce on the receiving thread, no compute pool
  std::string transport = "shm";
  int64_t ring_bytes = int64_t{8} << 20;
  int spin_us = 50;
  std::string tls_dir;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::pair<std::string, std::string> kv = absl::StrSplit(argv[i], absl::MaxSplits('=', 1));
    const std::string& k = kv.first;
    const std::string& v = kv.second;
    bool ok = true;
    if (k == "--rank") ok = absl::SimpleAtoi(v, &f->rank);
    else if (k == "--addresses") f->addresses = absl::StrSplit(v, ',', absl::SkipEmpty());
    else if (k == "--bytes") ok = absl::SimpleAtoi(v, &f->bytes);
    else if (k == "--reps") ok = absl::SimpleAtoi(v, &f->reps);
    else if (k == "--warmup") ok = absl::SimpleAtoi(v, &f->warmup);
    else if (k == "--chunk_bytes") ok = absl::SimpleAtoi(v, &f->chunk_bytes);
    else if (k == "--timeout_s") ok = absl::SimpleAtoi(v, &f->timeout_s);
    else if (k == "--inline_reduce") ok = absl::SimpleAtob(v, &f->inline_reduce);
    else if (k == "--transport") ok = (f->transport = v) == "shm" || v == "grpc" || v == "socket";
    else if (k == "--tls_dir") f->tls_dir = v;
    else if (k == "--ring_bytes") ok = absl::SimpleAtoi(v, &f->ring_bytes);
    else if (k == "--spin_us") ok = absl::SimpleAtoi(v, &f->spin_us);
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "allreduce_bench: bad flag %s\n", argv[i]);
      return false;
    }
  }
  if (f->addresses.empty() || f->rank < 0 || f->rank >= static_cast<int>(f->addresses.size()) || f->reps < 1 ||
      f->bytes < 4 || f->chunk_bytes < 4) {
    std::fprintf(stderr, "allreduce_bench: need --rank in [0, n), --addresses (n of them), --bytes >= 4, --reps >= 1\n");
    return false;
  }
  return true;
}

// This process's CPU time and context switches so far.
struct Usage {
  double cpu_ms = 0;
  double switches = 0;
};
Usage GetUsage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return Usage{ms(u.ru_utime) + ms(u.ru_stime), static_cast<double>(u.ru_nvcsw + u.ru_nivcsw)};
}

// This rank's certificate files in --tls_dir.
absl::StatusOr<TlsFiles> FilesFor(const Flags& f) {
  absl::StatusOr<std::string> base = CertFileBase(absl::StrCat("/job:worker/task:", f.rank));
  if (!base.ok()) return base.status();
  TlsFiles files;
  files.ca = f.tls_dir + "/ca.crt";
  files.cert = absl::StrCat(f.tls_dir, "/", *base, ".crt");
  files.key = absl::StrCat(f.tls_dir, "/", *base, ".key");
  return files;
}

// gRPC's security: mTLS with --tls_dir (as a cluster runs), else plaintext.
absl::StatusOr<std::shared_ptr<const TransportSecurity>> SecurityFor(const Flags& f) {
  if (f.tls_dir.empty()) return TransportSecurity::Insecure();
  absl::StatusOr<TlsFiles> files = FilesFor(f);
  if (!files.ok()) return files.status();
  return TransportSecurity::ForDaemon(*files, absl::StrCat("/job:worker/task:", f.rank));
}

absl::StatusOr<std::unique_ptr<SocketCollectiveTransport>> StartSockets(const Flags& f,
                                                                          CollectiveTransportInterface* network,
                                                                          CollectiveMailbox* mailbox,
                                                                          SocketEndpointsInterface* endpoints) {
  SocketCollectiveTransport::Options o;
  if (!f.tls_dir.empty()) {
    absl::StatusOr<TlsFiles> files = FilesFor(f);
    if (!files.ok()) return files.status();
    absl::StatusOr<std::shared_ptr<const TlsSocketContext>> tls = TlsSocketContext::FromFiles(*files);
    if (!tls.ok()) return tls.status();
    o.tls = *std::move(tls);
  }
  o.listen_host = "127.0.0.1";
  o.endpoints = endpoints;
  return SocketCollectiveTransport::Create(network, mailbox, std::move(o));
}

int Run(const Flags& f) {
  const int n = static_cast<int>(f.addresses.size());
  absl::StatusOr<std::shared_ptr<const TransportSecurity>> security = SecurityFor(f);
  if (!security.ok()) {
    std::fprintf(stderr, "allreduce_bench: rank %d: %s\n", f.rank, security.status().ToString().c_str());
    return 1;
  }
  CollectiveMailbox mailbox;
  GrpcCollectiveService service(&mailbox, *security);
  ThreadPool pool("reduce", 1);
  GrpcCollectiveTransport::Options network_options;
  network_options.credentials = (*security)->ChannelCredentials();
  auto network = std::make_unique<GrpcCollectiveTransport>(network_options);
  GrpcShmOfferer offerer((*security)->ChannelCredentials());
  std::unique_ptr<ShmCollectiveTransport> shm;
  CollectiveTransportInterface* transport = network.get();
  std::unique_ptr<SocketCollectiveTransport> sockets;
  if (f.transport == "socket") {
    absl::StatusOr<std::unique_ptr<SocketCollectiveTransport>> made = StartSockets(f, network.get(), &mailbox, &offerer);
    if (!made.ok()) {
      std::fprintf(stderr, "allreduce_bench: rank %d: %s\n", f.rank, made.status().ToString().c_str());
      return 1;
    }
    sockets = *std::move(made);
    service.SetSocketPort(sockets->port());
    transport = sockets.get();
  }
  if (f.transport == "shm") {
    ShmCollectiveTransport::Options o;
    o.offerer = &offerer;
    o.ring_bytes = static_cast<size_t>(f.ring_bytes);
    o.spin = absl::Microseconds(f.spin_us);
    shm = std::make_unique<ShmCollectiveTransport>(network.get(), &mailbox, o);
    transport = shm.get();
  }
  // Served before any rank sends (the server starts below, after this).
  service.SetAttachHandler([&shm](const std::string& caller, const AttachShmRequest& r) -> absl::StatusOr<AttachShmResponse> {
    if (shm == nullptr) return absl::FailedPreconditionError("--transport=grpc");
    return shm->Attach(caller, r);
  });
  grpc::ServerBuilder builder;
  ConfigureServer(&builder);
  ConfigureCollectiveServer(&builder);
  builder.AddListeningPort(f.addresses[f.rank], (*security)->ServerCredentials(/*require_client_certificate=*/true));
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    std::fprintf(stderr, "allreduce_bench: rank %d cannot serve on %s\n", f.rank, f.addresses[f.rank].c_str());
    return 1;
  }
  auto executor = std::make_unique<CollectiveExecutor>(transport, &mailbox, CollectiveExecutor::Options{f.inline_reduce ? nullptr : &pool});

  CollectiveParams params;
  params.group.group_key = 1;
  params.group.rank = f.rank;
  for (int r = 0; r < n; ++r) params.group.members.push_back({absl::StrCat("/job:worker/task:", r), f.addresses[r]});
  params.chunk_bytes = static_cast<size_t>(f.chunk_bytes);
  params.timeout = absl::Seconds(f.timeout_s);
  auto run = [&](int64_t instance, int64_t step, Tensor* t) {
    CollectiveParams p = params;
    p.instance_key = instance;
    p.step_id = step;
    absl::Status s = executor->AllReduce(p, t);
    if (!s.ok()) std::fprintf(stderr, "allreduce_bench: rank %d: %s\n", f.rank, s.ToString().c_str());
    return s.ok();
  };

  Tensor data(DType::kFloat32, TensorShape{f.bytes / 4});
  Tensor token(DType::kFloat32, TensorShape{1});
  std::vector<double> times;
  const int total = f.warmup + f.reps;
  Usage usage_start;
  for (int i = 0; i < total; ++i) {
    if (i == f.warmup) usage_start = GetUsage();
    if (i <= 1) std::fill(data.flat<float>().begin(), data.flat<float>().end(), static_cast<float>(f.rank));
    if (!run(/*instance=*/1, i, &token)) return 1;  // barrier
    const auto t0 = std::chrono::steady_clock::now();
    if (!run(/*instance=*/2, i, &data)) return 1;
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i == 0) {
      const float want = n * (n - 1) / 2.0f;
      for (float v : data.flat<float>()) {
        if (v != want) {
          std::fprintf(stderr, "allreduce_bench: rank %d got %g, expected %g\n", f.rank, v, want);
          return 1;
        }
      }
    }
    if (i >= f.warmup) times.push_back(dt);
  }
  const Usage usage_end = GetUsage();
  // The slowest rank's time per repetition: everyone's times, summed over a
  // tensor where each rank fills only its own row; the last two elements sum
  // every rank's CPU time and context switches.
  Tensor all(DType::kFloat32, TensorShape{n * f.reps + 2});
  std::fill(all.flat<float>().begin(), all.flat<float>().end(), 0.f);
  for (int k = 0; k < f.reps; ++k) all.flat<float>()[f.rank * f.reps + k] = static_cast<float>(times[k] * 1e3);
  all.flat<float>()[n * f.reps] = static_cast<float>(usage_end.cpu_ms - usage_start.cpu_ms);
  all.flat<float>()[n * f.reps + 1] = static_cast<float>(usage_end.switches - usage_start.switches);
  if (!run(/*instance=*/3, 0, &all)) return 1;
  std::vector<double> ms(f.reps, 0.0);
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < f.reps; ++k) ms[k] = std::max<double>(ms[k], all.flat<float>()[r * f.reps + k]);
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  if (f.rank == 0) {
    std::printf(
        "{\"impl\":\"weft-%s-ring\",\"ranks\":%d,\"bytes\":%lld,\"chunk_bytes\":%lld,\"reps\":%d,"
        "\"median_ms\":%.3f,\"min_ms\":%.3f,\"max_ms\":%.3f,\"busbw_GBps\":%.3f,\"cpu_ms\":%.3f,"
        "\"ctx_switches\":%.1f}\n",
        f.transport.c_str(), n, static_cast<long long>(f.bytes), static_cast<long long>(f.chunk_bytes), f.reps, median, ms.front(),
        ms.back(), f.bytes * 2.0 * (n - 1) / n / (median * 1e-3) / 1e9, all.flat<float>()[n * f.reps] / f.reps,
        all.flat<float>()[n * f.reps + 1] / f.reps);
    std::fflush(stdout);
  }
  // A last barrier so that no rank closes its streams while a peer still
  // needs a chunk from them.
  if (!run(/*instance=*/4, 0, &token)) return 1;
  executor.reset();
  shm.reset();
  network.reset();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

}  // namespace
}  // namespace collective
}  // namespace weft

int main(int argc, char** argv) {
  // gRPC receives into freshly malloc'ed slices that the reduction frees on
  // another thread. With glibc's defaults every free of a chunk trims the
  // arena (madvise + a TLB shootdown on every core), which made a 64 MiB
  // all-reduce ~7x slower. A daemon doing collectives wants the same
  // settings (or a caching malloc).
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
#ifdef NDEBUG
  // As the weft binary: Debian's Abseil keeps its mutex deadlock detector on
  // (a global graph updated on every lock), which optimised builds turn off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  weft::collective::Flags flags;
  if (!weft::collective::ParseFlags(argc, argv, &flags)) return 2;
  return weft::collective::Run(flags);
}
