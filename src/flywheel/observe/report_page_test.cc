#include "flywheel/observe/report_page.h"

#include <gtest/gtest.h>

#include <string>

#include "flywheel/observe/uplot_assets.h"

namespace flywheel {
namespace {

TEST(ReportPageTest, InlinesUplotAndTheDataWithoutReferencesToTheNetwork) {
  ASSERT_GT(UplotJs().size(), 10000u);
  nlohmann::json data = {{"runs", {{{"name", "r1"}, {"metrics", {{{"step", 1}}}}}}}};
  const std::string page = RenderReportPage(data, "flywheel report: r1");
  EXPECT_NE(page.find(UplotJs()), std::string::npos);
  EXPECT_NE(page.find(UplotCss()), std::string::npos);
  EXPECT_NE(page.find("\"name\":\"r1\""), std::string::npos);
  EXPECT_NE(page.find("<title>flywheel report: r1</title>"), std::string::npos);
  EXPECT_EQ(page.find("@CONFIG@"), std::string::npos);
  EXPECT_EQ(page.find("<script src"), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
}

TEST(ReportPageTest, DataCannotCloseItsScriptElement) {
  nlohmann::json data = {
      {"runs", {{{"name", "</script><b>x"}, {"metrics", nlohmann::json::array()}}}}};
  const std::string page = RenderReportPage(data, "a <title> & @CONFIG@");
  EXPECT_EQ(page.find("</script><b>"), std::string::npos);
  EXPECT_NE(page.find("<\\/script><b>x"), std::string::npos);
  EXPECT_NE(page.find("<title>a &lt;title> &amp; &#64;CONFIG&#64;</title>"), std::string::npos);
}

TEST(ReportPageTest, TheLivePageFetchesItsData) {
  const std::string page = RenderLivePage("data.json", 3, "live");
  EXPECT_NE(page.find("{\"live\":{\"path\":\"data.json\",\"refresh_s\":3}}"), std::string::npos);
}

}  // namespace
}  // namespace flywheel
