// What the learner and actor processes of one job must agree on to exchange weights: the model
// options resolved against the job's tokenizer (policy_text.h); and the model a job starts from.
#ifndef FLYWHEEL_RUNTIME_POLICY_SETUP_H_
#define FLYWHEEL_RUNTIME_POLICY_SETUP_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/model/model_options.h"
#include "flywheel/model/tokenizer.h"
#include "flywheel/model/transformer.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel {

// With model.path, the shape comes from the directory's config.json (ApplyHfModelConfig: a shape
// key the job config set otherwise is an error naming both values). Then model.vocab_size 0
// takes the tokenizer's; a smaller one is an error naming both (`tokenizer_name`: "the guess
// tokenizer", "DIR/tokenizer.json"); model.seed 0 takes run.seed (as `flywheel train` does).
absl::StatusOr<ModelOptions> ResolveModelOptions(const JobConfig& config,
                                                 const Tokenizer& tokenizer,
                                                 const std::string& tokenizer_name);

// The model a job trains from, for resolved `options`: without model.path a new model initialised
// from options.seed (MakeTransformer); with it, the directory's weights (LoadHfModel, float32
// whatever the stored dtype, which is logged), on model.device (float32 there too: the master
// weights; placement.h). Every place a job builds its initial model calls this, so all ranks and
// cells start from the same weights.
absl::StatusOr<Transformer> MakeInitialModel(const ModelOptions& options);

// A model of shape `options` whose parameters are `parameters` (a Transformer's, in parameters()
// order, copies no one else updates, e.g. LearnerStep::FullParameters), on their device, that no
// optimiser touches and no gradient reaches (requires_grad off): the reference model π_ref of
// learner.kl_coef, or the gathered weights a fully sharded learner publishes.
absl::StatusOr<Transformer> FrozenCopy(const ModelOptions& options,
                                       std::vector<torch::Tensor> parameters);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_POLICY_SETUP_H_
