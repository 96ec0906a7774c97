#include "master/dashboard/assets.h"

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace weft {
namespace master {
namespace {

// The files beside this test in the runfiles (data of the test).
std::string ReadSource(const std::string& name) {
  const std::string path = "master/dashboard/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST(DashboardAssetsTest, EveryFileIsEmbeddedByteForByte) {
  const std::map<std::string, std::pair<std::string, std::string>> want = {
      {"/", {"index.html", "text/html; charset=utf-8"}},
      {"/dashboard.js", {"dashboard.js", "text/javascript; charset=utf-8"}},
      {"/dashboard.css", {"dashboard.css", "text/css; charset=utf-8"}},
  };
  ASSERT_EQ(DashboardAssets().size(), want.size());
  for (const DashboardAsset& a : DashboardAssets()) {
    auto it = want.find(a.path);
    ASSERT_NE(it, want.end()) << "unexpected asset " << a.path;
    EXPECT_EQ(a.content_type, it->second.second) << a.path;
    const std::string source = ReadSource(it->second.first);
    EXPECT_GT(source.size(), 100u) << it->second.first;
    EXPECT_TRUE(a.body == source) << a.path << " (" << a.body.size() << " bytes) differs from "
                                  << it->second.first << " (" << source.size() << " bytes)";
  }
}

TEST(DashboardAssetsTest, ThePageLoadsTheScriptAndStyleSheetItIsServedWith) {
  for (const DashboardAsset& a : DashboardAssets()) {
    if (std::string(a.path) != "/") continue;
    EXPECT_NE(a.body.find("src=\"dashboard.js\""), std::string_view::npos);
    EXPECT_NE(a.body.find("href=\"dashboard.css\""), std::string_view::npos);
    EXPECT_NE(a.body.find("id=\"jobs\""), std::string_view::npos);
    EXPECT_NE(a.body.find("id=\"loss-curve\""), std::string_view::npos);
    return;
  }
  FAIL() << "no asset for /";
}

}  // namespace
}  // namespace master
}  // namespace weft
