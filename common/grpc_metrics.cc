#include "common/grpc_metrics.h"

#include <array>
#include <chrono>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"

namespace weft {
namespace {

constexpr int kNumCodes = 17;  // grpc::StatusCode OK .. UNAUTHENTICATED

const char* CodeName(int code) {
  static const char* const kNames[kNumCodes] = {
      "OK",        "CANCELLED",         "UNKNOWN",           "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS",    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",      "UNIMPLEMENTED",     "INTERNAL",         "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  return code >= 0 && code < kNumCodes ? kNames[code] : "UNKNOWN";
}

// One method's series.
struct MethodSeries {
  std::string service;
  std::string method;
  metrics::Histogram* seconds = nullptr;
  std::array<std::atomic<metrics::Counter*>, kNumCodes> handled{};
};

class Series {
 public:
  Series()
      : handled_(metrics::Registry::Default().AddCounter(
            "weft_grpc_server_handled_total", "RPCs served, by service, method and status code.",
            {"grpc_service", "grpc_method", "grpc_code"})),
        seconds_(metrics::Registry::Default().AddHistogram(
            "weft_grpc_server_handling_seconds", "Time from an RPC's arrival to its status, by service and method.",
            {"grpc_service", "grpc_method"})) {}

  // "/weft.WorkerService/RunGraph" -> its series (made on first use).
  MethodSeries* For(const char* full_method) {
    const absl::string_view name = full_method != nullptr ? full_method : "";
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = methods_.find(name);
      if (it != methods_.end()) return it->second.get();
    }
    absl::MutexLock lock(&mu_);
    std::unique_ptr<MethodSeries>& m = methods_[name];
    if (m == nullptr) {
      m = std::make_unique<MethodSeries>();
      absl::string_view rest = name.substr(name.empty() || name[0] != '/' ? 0 : 1);
      const size_t slash = rest.find('/');
      m->service = std::string(rest.substr(0, slash));
      m->method = slash == absl::string_view::npos ? "" : std::string(rest.substr(slash + 1));
      m->seconds = seconds_->With({m->service, m->method});
    }
    return m.get();
  }

  metrics::Counter* Handled(MethodSeries* m, int code) {
    if (code < 0 || code >= kNumCodes) code = 2;  // UNKNOWN
    metrics::Counter* c = m->handled[code].load(std::memory_order_acquire);
    if (c == nullptr) {
      c = handled_->With({m->service, m->method, CodeName(code)});
      m->handled[code].store(c, std::memory_order_release);
    }
    return c;
  }

 private:
  metrics::Family<metrics::Counter>* const handled_;
  metrics::Family<metrics::Histogram>* const seconds_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<MethodSeries>> methods_ ABSL_GUARDED_BY(mu_);
};

Series& TheSeries() {
  static auto* s = new Series();
  return *s;
}

class MetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit MetricsInterceptor(MethodSeries* series) : series_(series), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const int code = static_cast<int>(methods->GetSendStatus().error_code());
      TheSeries().Handled(series_, code)->Increment();
      series_->seconds->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
    methods->Proceed();
  }

 private:
  MethodSeries* const series_;
  const std::chrono::steady_clock::time_point start_;
};

class MetricsInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(TheSeries().For(info->method()));
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewServerMetricsInterceptorFactory() {
  return std::make_unique<MetricsInterceptorFactory>();
}

}  // namespace weft
