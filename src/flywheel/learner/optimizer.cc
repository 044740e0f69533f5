#include "flywheel/learner/optimizer.h"

#include <cmath>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/torch_compat.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {

OptimizerOptions OptimizerOptions::FromLearnerOptions(const LearnerOptions& o,
                                                      int64_t run_max_steps) {
  OptimizerOptions out;
  out.schedule = {o.lr, o.warmup_steps, o.total_steps > 0 ? o.total_steps : run_max_steps,
                  o.min_lr_ratio};
  out.weight_decay = o.weight_decay;
  out.beta1 = o.beta1;
  out.beta2 = o.beta2;
  out.eps = o.adam_eps;
  out.grad_clip = o.grad_clip;
  return out;
}

Optimizer::Optimizer(std::vector<torch::Tensor> parameters, OptimizerOptions options,
                     int64_t initial_version)
    : parameters_(std::move(parameters)), options_(options), version_(initial_version) {
  torch::optim::AdamWOptions adamw(options_.schedule.At(0));
  adamw.betas({options_.beta1, options_.beta2})
      .eps(options_.eps)
      .weight_decay(options_.weight_decay);
  adamw_ = std::make_unique<torch::optim::AdamW>(parameters_, adamw);
}

void Optimizer::ZeroGrad() {
  for (torch::Tensor& p : parameters_) {
    if (p.grad().defined()) {
      p.grad().detach_();
      p.grad().zero_();
    }
  }
}

absl::StatusOr<OptimizerStepInfo> Optimizer::Step() {
  OptimizerStepInfo info;
  info.lr = options_.schedule.At(step_);
  const std::string context = StrCat("optimiser step ", step_);
  double sum_sq = 0;
  RETURN_IF_ERROR(TorchCall(context, [&] {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& p : parameters_) {
      if (p.grad().defined()) sum_sq += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
    }
  }));
  if (square_sum_reducer_) {
    absl::StatusOr<double> global = square_sum_reducer_(sum_sq);
    if (!global.ok()) {
      ZeroGrad();
      return Annotate(global.status(), StrCat(context, ": global gradient norm"));
    }
    sum_sq = *global;
  }
  RETURN_IF_ERROR(TorchCall(context, [&] {
    torch::NoGradGuard no_grad;
    // Global L2 norm over all gradients, then scale as torch.nn.utils.clip_grad_norm_ does.
    info.grad_norm = std::sqrt(sum_sq);
    if (!std::isfinite(info.grad_norm)) return;
    if (options_.grad_clip > 0 && info.grad_norm > options_.grad_clip) {
      const double scale = options_.grad_clip / (info.grad_norm + 1e-6);
      for (torch::Tensor& p : parameters_) {
        if (p.grad().defined()) p.grad().mul_(scale);
      }
      info.clipped = true;
    }
    for (auto& group : adamw_->param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(info.lr);
    }
    adamw_->step();
  }));
  if (!std::isfinite(info.grad_norm)) {
    ZeroGrad();
    return absl::InvalidArgumentError(
        StrCat(context, ": gradient norm is ", info.grad_norm,
               "; the step was skipped (check the batch's log-probs and advantages)"));
  }
  info.step = ++step_;
  info.version = ++version_;
  return info;
}

Optimizer::Moments Optimizer::MomentsOf(const torch::Tensor& parameter) const {
  const auto& state = adamw_->state();
  auto it = state.find(OptimizerStateKeyOf(parameter));
  if (it == state.end()) {
    return {torch::zeros_like(parameter), torch::zeros_like(parameter), 0};
  }
  const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
  return {s.exp_avg(), s.exp_avg_sq(), s.step()};
}

int64_t Optimizer::StateBytes(const torch::Tensor& parameter) const {
  const auto& state = adamw_->state();
  auto it = state.find(OptimizerStateKeyOf(parameter));
  if (it == state.end()) return 0;
  const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
  int64_t bytes = 0;
  for (const torch::Tensor& t : {s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq()}) {
    if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }
  return bytes;
}

void Optimizer::SetMoments(const torch::Tensor& parameter, Moments moments) {
  auto s = std::make_unique<torch::optim::AdamWParamState>();
  s->step(moments.step);
  s->exp_avg(
      moments.exp_avg.detach().reshape(parameter.sizes()).clone(at::MemoryFormat::Contiguous));
  s->exp_avg_sq(
      moments.exp_avg_sq.detach().reshape(parameter.sizes()).clone(at::MemoryFormat::Contiguous));
  adamw_->state()[OptimizerStateKeyOf(parameter)] = std::move(s);
}

absl::Status Optimizer::Save(torch::serialize::OutputArchive& archive) const {
  return TorchCall("saving optimiser state", [&] {
    torch::serialize::OutputArchive adamw;
    adamw_->save(adamw);
    archive.write("adamw", adamw);
    archive.write("step", torch::tensor(step_, torch::kLong));
    archive.write("version", torch::tensor(version_, torch::kLong));
  });
}

absl::Status Optimizer::Load(torch::serialize::InputArchive& archive) {
  return TorchCall("loading optimiser state", [&] {
    torch::serialize::InputArchive adamw;
    archive.read("adamw", adamw);
    adamw_->load(adamw);
    torch::Tensor step, version;
    archive.read("step", step);
    archive.read("version", version);
    step_ = step.item<int64_t>();
    version_ = version.item<int64_t>();
  });
}

std::string Optimizer::DebugString() const {
  return fmt::format("AdamW(step={}, version={}, lr={:.3g}, clip={}, wd={})", step_, version_,
                     current_lr(), options_.grad_clip, options_.weight_decay);
}

}  // namespace flywheel
