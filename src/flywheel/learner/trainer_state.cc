#include "flywheel/learner/trainer_state.h"

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <mutex>
#include <sstream>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

constexpr int64_t kFormatVersion = 1;

torch::Tensor BytesTensor(const std::string& s) {
  return torch::from_blob(const_cast<char*>(s.data()), {static_cast<int64_t>(s.size())},
                          torch::kUInt8)
      .clone();
}

std::string TensorBytes(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return std::string(reinterpret_cast<const char*>(c.data_ptr<uint8_t>()), c.numel());
}

}  // namespace

absl::Status WriteTrainerState(const std::string& dir, const Optimizer& optimizer,
                               const std::mt19937_64* data_rng) {
  const std::string path = (std::filesystem::path(dir) / kTrainerStateFile).string();
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive optimizer_archive;
  RETURN_IF_ERROR(optimizer.Save(optimizer_archive));
  return TorchCall(StrCat("writing ", path), [&] {
    archive.write("format_version", torch::tensor(kFormatVersion, torch::kLong));
    archive.write("optimizer", optimizer_archive);
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    torch::Tensor rng_state;
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      rng_state = generator.get_state();
    }
    archive.write("torch_cpu_rng", rng_state);
    if (data_rng != nullptr) {
      std::ostringstream os;
      os << *data_rng;
      archive.write("data_rng", BytesTensor(os.str()));
    }
    archive.save_to(path);
  });
}

absl::Status ReadTrainerState(const std::string& dir, Optimizer& optimizer,
                              std::mt19937_64* data_rng) {
  const std::string path = (std::filesystem::path(dir) / kTrainerStateFile).string();
  if (!std::filesystem::exists(path)) {
    return absl::NotFoundError(StrCat("checkpoint ", dir, " has no ", kTrainerStateFile));
  }
  torch::serialize::InputArchive archive;
  torch::serialize::InputArchive optimizer_archive;
  torch::Tensor version, rng_state, data_rng_state;
  bool has_data_rng = false;
  RETURN_IF_ERROR(TorchCall(StrCat("reading ", path), [&] {
    archive.load_from(path);
    archive.read("format_version", version);
    archive.read("optimizer", optimizer_archive);
    archive.read("torch_cpu_rng", rng_state);
    has_data_rng = archive.try_read("data_rng", data_rng_state);
  }));
  if (version.item<int64_t>() != kFormatVersion) {
    return absl::FailedPreconditionError(StrCat(
        path, ": trainer state format ", version.item<int64_t>(), ", expected ", kFormatVersion));
  }
  if (data_rng != nullptr && !has_data_rng) {
    return absl::FailedPreconditionError(StrCat(path, " holds no data RNG state"));
  }
  RETURN_IF_ERROR(Annotate(optimizer.Load(optimizer_archive), path));
  RETURN_IF_ERROR(TorchCall(StrCat("restoring the torch RNG from ", path), [&] {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng_state);
  }));
  if (data_rng != nullptr) {
    std::istringstream is(TensorBytes(data_rng_state));
    is >> *data_rng;
    if (!is) return absl::DataLossError(StrCat(path, ": data RNG state does not parse"));
  }
  return absl::OkStatus();
}

}  // namespace flywheel
