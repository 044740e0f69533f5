#include "flywheel/learner/sharded_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kFormatVersion = 1;

std::string ShardFileName(int rank, int world_size) {
  return fmt::format("shard-{:05d}-of-{:05d}.pt", rank, world_size);
}

std::string StagingDir(const CheckpointManager& manager, int64_t step) {
  return (fs::path(manager.options().directory) / fmt::format(".staging-step-{:010d}", step))
      .string();
}

absl::Status Barrier(dist::Communicator* comm, const char* what) {
  if (comm == nullptr) return absl::OkStatus();
  return Annotate(comm->Barrier(), StrCat("sharded checkpoint: ", what));
}

std::string Key(size_t unit, const char* field) { return StrCat("u", unit, "_", field); }

nlohmann::json Manifest(const TrainerShard& shard) {
  nlohmann::json units = nlohmann::json::array();
  std::vector<std::string> files;
  for (size_t u = 0; u < shard.unit_names.size(); ++u) {
    const int64_t length = shard.unit_lengths[u];
    const int64_t shard_length = ShardLength(length, shard.world_size);
    units.push_back({{"name", shard.unit_names[u]},
                     {"length", length},
                     {"shard_length", shard_length},
                     {"padding", shard_length * shard.world_size - length}});
  }
  for (int r = 0; r < shard.world_size; ++r) files.push_back(ShardFileName(r, shard.world_size));
  return {{"format_version", kFormatVersion},
          {"world_size", shard.world_size},
          {"step", shard.step},
          {"version", shard.version},
          {"adam_step", shard.adam_step},
          {"units", units},
          {"shards", files}};
}

absl::Status WriteFileSynced(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path, std::ios::trunc);
    out << text;
    if (!out.flush()) return absl::InternalError(StrCat("sharded checkpoint: writing ", path));
  }
  return FsyncPath(path);
}

}  // namespace

absl::Status WriteShardFile(const std::string& path, const TrainerShard& shard) {
  const std::string temp = path + ".tmp";
  RETURN_IF_ERROR(TorchCall(StrCat("writing ", path), [&] {
    torch::serialize::OutputArchive archive;
    archive.write("format_version", torch::tensor(kFormatVersion, torch::kLong));
    archive.write("counters",
                  torch::tensor({static_cast<int64_t>(shard.world_size),
                                 static_cast<int64_t>(shard.rank), shard.step, shard.version,
                                 shard.adam_step, static_cast<int64_t>(shard.params.size())},
                                torch::kLong));
    for (size_t u = 0; u < shard.params.size(); ++u) {
      archive.write(Key(u, "param"), shard.params[u]);
      archive.write(Key(u, "exp_avg"), shard.exp_avg[u]);
      archive.write(Key(u, "exp_avg_sq"), shard.exp_avg_sq[u]);
    }
    archive.save_to(temp);
  }));
  RETURN_IF_ERROR(FsyncPath(temp));
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec)
    return absl::InternalError(StrCat("sharded checkpoint: renaming ", temp, ": ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<TrainerShard> ReadShardFile(const std::string& path) {
  if (!fs::exists(path)) return absl::NotFoundError(StrCat("sharded checkpoint: no ", path));
  TrainerShard shard;
  torch::Tensor version, counters;
  RETURN_IF_ERROR(TorchCall(StrCat("reading ", path), [&] {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    archive.read("format_version", version);
    archive.read("counters", counters);
    const int64_t units = counters[5].item<int64_t>();
    for (int64_t u = 0; u < units; ++u) {
      torch::Tensor p, m, v;
      archive.read(Key(u, "param"), p);
      archive.read(Key(u, "exp_avg"), m);
      archive.read(Key(u, "exp_avg_sq"), v);
      shard.params.push_back(p);
      shard.exp_avg.push_back(m);
      shard.exp_avg_sq.push_back(v);
    }
  }));
  if (version.item<int64_t>() != kFormatVersion) {
    return absl::FailedPreconditionError(
        StrCat(path, ": shard format ", version.item<int64_t>(), ", expected ", kFormatVersion));
  }
  shard.world_size = static_cast<int>(counters[0].item<int64_t>());
  shard.rank = static_cast<int>(counters[1].item<int64_t>());
  shard.step = counters[2].item<int64_t>();
  shard.version = counters[3].item<int64_t>();
  shard.adam_step = counters[4].item<int64_t>();
  return shard;
}

absl::StatusOr<std::string> SaveShardedCheckpoint(CheckpointManager& manager, LearnerStep& learner,
                                                  dist::Communicator* comm,
                                                  const CheckpointManager::Writer& extra) {
  const int rank = comm ? comm->rank() : 0;
  const int world = comm ? comm->size() : 1;
  if (learner.world_size() != world || learner.rank() != rank) {
    return absl::FailedPreconditionError(StrCat("sharded checkpoint: the learner is rank ",
                                                learner.rank(), " of ", learner.world_size(),
                                                ", the group rank ", rank, " of ", world));
  }
  ASSIGN_OR_RETURN(TrainerShard shard, learner.ExportShard());
  const std::string staging = StagingDir(manager, shard.step);
  if (rank == 0) {
    std::error_code ec;
    fs::remove_all(staging, ec);  // left by a save that crashed
    fs::create_directories(staging, ec);
    if (ec) {
      return absl::InternalError(
          StrCat("sharded checkpoint: creating ", staging, ": ", ec.message()));
    }
  }
  RETURN_IF_ERROR(Barrier(comm, "staging directory"));
  const absl::Status written =
      WriteShardFile((fs::path(staging) / ShardFileName(rank, world)).string(), shard);
  // Every rank learns whether all shards were written (instead of waiting for a rank that
  // failed until the timeout).
  torch::Tensor write_failed = torch::tensor({written.ok() ? 0.0f : 1.0f});
  if (comm != nullptr) RETURN_IF_ERROR(comm->AllReduceMax(write_failed));
  if (!written.ok()) return written;
  if (write_failed.item<float>() > 0) {
    return absl::InternalError("sharded checkpoint: another rank failed to write its shard");
  }
  absl::Status committed = absl::OkStatus();
  if (rank == 0) {
    absl::StatusOr<std::string> saved =
        manager.Save(shard.step, [&](const std::string& dir) -> absl::Status {
          for (int r = 0; r < world; ++r) {
            std::error_code ec;
            const std::string name = ShardFileName(r, world);
            fs::rename(fs::path(staging) / name, fs::path(dir) / name, ec);
            if (ec) {
              return absl::InternalError(
                  StrCat("sharded checkpoint: moving ", name, " of rank ", r, ": ", ec.message()));
            }
          }
          if (extra) RETURN_IF_ERROR(extra(dir));
          return WriteFileSynced((fs::path(dir) / kShardManifestFile).string(),
                                 Manifest(shard).dump(2));
        });
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    committed = saved.status();
  }
  // Nobody goes on before the checkpoint is visible (or known to have failed on rank 0).
  torch::Tensor failed = torch::tensor({committed.ok() ? 0.0f : 1.0f});
  if (comm != nullptr) RETURN_IF_ERROR(comm->AllReduceMax(failed));
  if (!committed.ok()) return committed;
  if (failed.item<float>() > 0) {
    return absl::InternalError("sharded checkpoint: rank 0 failed to commit the checkpoint");
  }
  return manager.PathFor(shard.step);
}

absl::StatusOr<TrainerShard> ReadWholeUnits(const std::string& checkpoint_dir) {
  if (!fs::exists(fs::path(checkpoint_dir) / CheckpointManager::kDoneMarker)) {
    return absl::FailedPreconditionError(
        StrCat("sharded checkpoint: ", checkpoint_dir, " is not complete (no DONE)"));
  }
  const std::string manifest_path = (fs::path(checkpoint_dir) / kShardManifestFile).string();
  nlohmann::json manifest;
  {
    std::ifstream in(manifest_path);
    if (!in) return absl::NotFoundError(StrCat("sharded checkpoint: no ", manifest_path));
    manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  if (manifest.is_discarded() || !manifest.contains("units") ||
      manifest.value("format_version", 0) != kFormatVersion) {
    return absl::DataLossError(
        StrCat(manifest_path, ": not a format ", kFormatVersion, " sharded checkpoint manifest"));
  }
  int world = 0;
  TrainerShard whole;
  RETURN_IF_ERROR(TorchCall(StrCat("reading ", manifest_path), [&] {
    world = manifest.at("world_size").get<int>();
    whole.step = manifest.at("step").get<int64_t>();
    whole.version = manifest.at("version").get<int64_t>();
    whole.adam_step = manifest.at("adam_step").get<int64_t>();
  }));
  std::vector<TrainerShard> shards;
  for (int r = 0; r < world; ++r) {
    ASSIGN_OR_RETURN(TrainerShard s,
                     ReadShardFile((fs::path(checkpoint_dir) / ShardFileName(r, world)).string()));
    if (s.rank != r || s.world_size != world || s.params.size() != manifest["units"].size()) {
      return absl::DataLossError(StrCat(checkpoint_dir, ": shard ", r, " says rank ", s.rank,
                                        " of ", s.world_size, " with ", s.params.size(),
                                        " units; the manifest ", world, " ranks"));
    }
    shards.push_back(std::move(s));
  }
  RETURN_IF_ERROR(TorchCall(StrCat("assembling ", checkpoint_dir), [&] {
    for (size_t u = 0; u < manifest["units"].size(); ++u) {
      const nlohmann::json& unit = manifest["units"][u];
      const int64_t length = unit["length"].get<int64_t>();
      auto concat = [&](std::vector<torch::Tensor> TrainerShard::*field) {
        std::vector<torch::Tensor> slices;
        for (const TrainerShard& s : shards) slices.push_back((s.*field)[u]);
        return torch::cat(slices).narrow(0, 0, length).clone();
      };
      whole.unit_names.push_back(unit["name"].get<std::string>());
      whole.unit_lengths.push_back(length);
      whole.params.push_back(concat(&TrainerShard::params));
      whole.exp_avg.push_back(concat(&TrainerShard::exp_avg));
      whole.exp_avg_sq.push_back(concat(&TrainerShard::exp_avg_sq));
    }
  }));
  return whole;
}

absl::Status LoadShardedCheckpoint(const std::string& checkpoint_dir, LearnerStep& learner) {
  ASSIGN_OR_RETURN(TrainerShard whole, ReadWholeUnits(checkpoint_dir));
  return Annotate(learner.ImportState(whole), checkpoint_dir);
}

}  // namespace flywheel
