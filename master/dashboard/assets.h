// The web dashboard's static files (index.html, dashboard.js, dashboard.css
// beside this header), built into the binary so that the master serves them
// with nothing read from disk or fetched from the internet at run time. The
// bodies are generated from those files by embed.py (see BUILD).
//
// Thread-safety: DashboardAssets() may be called from any thread; what it
// returns is immutable and lives for the whole program.
#ifndef WEFT_MASTER_DASHBOARD_ASSETS_H_
#define WEFT_MASTER_DASHBOARD_ASSETS_H_

#include <string_view>
#include <vector>

namespace weft {
namespace master {

struct DashboardAsset {
  const char* path;          // the URL path it is served at, e.g. "/dashboard.js"
  const char* content_type;  // with its charset, e.g. "text/javascript; charset=utf-8"
  std::string_view body;     // the file's bytes, exactly
};

// "/" (index.html), "/dashboard.js", "/dashboard.css".
const std::vector<DashboardAsset>& DashboardAssets();

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_DASHBOARD_ASSETS_H_
