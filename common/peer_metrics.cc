#include "common/peer_metrics.h"

namespace weft {

PeerSeries PeerTraffic(const std::string& peer, const std::string& channel) {
  metrics::Registry& r = metrics::Registry::Default();
  static auto* const sent = r.AddCounter("weft_peer_sent_bytes_total",
                                         "Bytes this task sent to a peer task, by channel.", {"peer", "channel"});
  static auto* const received = r.AddCounter(
      "weft_peer_received_bytes_total", "Bytes this task received from a peer task, by channel.", {"peer", "channel"});
  static auto* const recv_seconds = r.AddHistogram(
      "weft_recv_tensor_seconds", "Time from a RecvTensor request to its tensor, per sending task.", {"peer"});
  PeerSeries s;
  s.sent = sent->With({peer, channel});
  s.received = received->With({peer, channel});
  if (channel == "recv_tensor") s.recv_tensor_seconds = recv_seconds->With({peer});
  return s;
}

metrics::Histogram* AllReduceSeconds() {
  static metrics::Histogram* const h =
      metrics::Registry::Default()
          .AddHistogram("weft_allreduce_seconds", "One all-reduce on this task, from its start to its result.", {})
          ->With({});
  return h;
}

}  // namespace weft
