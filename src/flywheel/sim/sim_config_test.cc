#include "flywheel/sim/sim_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace flywheel::sim {
namespace {

std::string WriteTemp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

// Every shipped config with a [cluster] section is a simulation config that loads as shipped.
TEST(SimConfigTest, SimulatorExamplesLoad) {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  ASSERT_NE(source, nullptr);
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(source) + "/examples")) {
    if (entry.path().extension() != ".toml") continue;
    absl::StatusOr<toml::table> table = config::ParseTomlFile(entry.path().string());
    ASSERT_TRUE(table.ok()) << table.status();
    if (!table->contains("cluster")) continue;
    absl::StatusOr<SimConfig> config = LoadSimConfig(entry.path().string());
    EXPECT_TRUE(config.ok()) << entry.path() << ": " << config.status();
    ++loaded;
  }
  EXPECT_GE(loaded, 1);
}

TEST(SimConfigTest, MistypedKeyAndBadValueAreNamed) {
  const std::string typo = WriteTemp("flywheel_sim_typo.toml", "[cluster]\ndevice = 8\n");
  absl::Status status = LoadSimConfig(typo).status();
  EXPECT_NE(status.message().find("did you mean cluster.devices?"), std::string_view::npos)
      << status;
  const std::string bad = WriteTemp("flywheel_sim_bad.toml", "[run]\nmode = \"async\"\n");
  status = LoadSimConfig(bad, {"cluster.devices=1"}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("two replicas"), std::string_view::npos) << status;
  EXPECT_NE(status.message().find(bad), std::string_view::npos) << status;
}

TEST(SimConfigTest, PrintedConfigLoadsBack) {
  SimConfig config;
  config.run.mode = SimMode::kAsync;
  config.workload.env_latency.model = LatencyKind::kPareto;
  const std::string path = WriteTemp("flywheel_sim_roundtrip.toml", FormatSimConfig(config));
  absl::StatusOr<SimConfig> loaded = LoadSimConfig(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->run.mode, SimMode::kAsync);
  EXPECT_EQ(loaded->workload.env_latency.model, LatencyKind::kPareto);
  EXPECT_EQ(FormatSimConfig(*loaded), FormatSimConfig(config));
}

}  // namespace
}  // namespace flywheel::sim
