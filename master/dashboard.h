// The master's monitoring pages beside /metrics (common/monitoring_server.h):
// the web dashboard (its HTML, CSS and JS are built into the binary from
// master/dashboard/) and /api/overview, the JSON it polls: the cluster's
// tasks with their health, the jobs with their progress, curves and
// diagnosis. Also the master's cluster-wide gauges (tasks up, jobs by state),
// read at each scrape.
//
// Who may read these pages is the monitoring port's rule: a cluster member
// or an admin, since they show every user's jobs.
//
// Thread-safety: pages are served from several threads at once; the
// constructor and destructor are not thread-safe.
#ifndef WEFT_MASTER_DASHBOARD_H_
#define WEFT_MASTER_DASHBOARD_H_

#include <map>
#include <string>

#include "absl/time/time.h"
#include "common/http_server.h"
#include "master/master.h"

namespace weft {
namespace master {

class MonitoringPages {
 public:
  // `master` must outlive this object; `address` is where it serves gRPC.
  // Registers the cluster gauges, which the destructor removes.
  MonitoringPages(Master* master, std::string address);
  ~MonitoringPages();
  MonitoringPages(const MonitoringPages&) = delete;
  MonitoringPages& operator=(const MonitoringPages&) = delete;

  // "/", "/dashboard.js", "/dashboard.css" and "/api/overview".
  std::map<std::string, HttpHandler> Pages();
  // The body of /api/overview.
  std::string OverviewJson();

 private:
  Master* const master_;
  const std::string address_;
  // How long a page or a scrape waits for the tasks' GetStatus.
  const absl::Duration probe_timeout_ = absl::Seconds(1);
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_DASHBOARD_H_
