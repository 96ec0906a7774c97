// gRPC's side of the metrics (common/metrics.h): a server interceptor that
// counts every RPC a daemon serves by service, method and status code and
// times it, for all of its services at once (ConfigureServer installs it).
//
//   weft_grpc_server_handled_total{grpc_service, grpc_method, grpc_code}
//   weft_grpc_server_handling_seconds{grpc_service, grpc_method}
//
// The series of a method are looked up once and kept: an RPC costs a
// shared-lock map lookup and a few atomic adds, no allocation.
//
// Thread-safety: thread-safe.
#ifndef WEFT_COMMON_GRPC_METRICS_H_
#define WEFT_COMMON_GRPC_METRICS_H_

#include <memory>

#include "grpcpp/support/server_interceptor.h"

namespace weft {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewServerMetricsInterceptorFactory();

}  // namespace weft

#endif  // WEFT_COMMON_GRPC_METRICS_H_
