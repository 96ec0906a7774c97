// The data plane's series (docs/observability.md), in one place so that
// every transport names them alike:
//
//   weft_peer_sent_bytes_total{peer, channel}
//   weft_peer_received_bytes_total{peer, channel}
//       bytes this task sent to / received from each peer task, by channel
//       ("recv_tensor": tensors pulled with RecvTensor; "collective": the
//       all-reduce ring's chunks);
//   weft_recv_tensor_seconds{peer}
//       from a RecvTensor's request to its tensor, per sending task;
//   weft_allreduce_seconds
//       one all-reduce on this task, from its start to its result.
//
// Looking a series up allocates: do it once per stream or peer and keep the
// pointers (they live as long as the process).
//
// Thread-safety: thread-safe.
#ifndef WEFT_COMMON_PEER_METRICS_H_
#define WEFT_COMMON_PEER_METRICS_H_

#include <string>

#include "common/metrics.h"

namespace weft {

struct PeerSeries {
  metrics::Counter* sent = nullptr;
  metrics::Counter* received = nullptr;
  metrics::Histogram* recv_tensor_seconds = nullptr;  // channel "recv_tensor" only
};

// `peer`: "/job:worker/task:1" ("" when unauthenticated); `channel`:
// "recv_tensor" or "collective".
PeerSeries PeerTraffic(const std::string& peer, const std::string& channel);

metrics::Histogram* AllReduceSeconds();

}  // namespace weft

#endif  // WEFT_COMMON_PEER_METRICS_H_
