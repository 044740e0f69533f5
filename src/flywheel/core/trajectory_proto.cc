#include "flywheel/core/trajectory_proto.h"

#include "flywheel/core/strings.h"

namespace flywheel {

void ToProto(const Trajectory& t, v1::Trajectory* p) {
  p->Clear();
  p->set_id(t.id);
  p->set_execution_id(t.execution_id);
  p->set_group_id(t.group_id);
  p->set_task_id(t.task_id);
  p->set_env_name(t.env_name);
  p->set_role(static_cast<v1::Role>(t.role));
  p->set_parent_id(t.parent_id);
  p->set_fork_position(t.fork_position);
  p->mutable_tokens()->Assign(t.tokens.begin(), t.tokens.end());
  p->mutable_trainable()->Reserve(t.trainable.size());
  for (uint8_t b : t.trainable) p->add_trainable(b != 0);
  p->mutable_logprobs()->Assign(t.logprobs.begin(), t.logprobs.end());
  p->mutable_versions()->Assign(t.versions.begin(), t.versions.end());
  p->mutable_turn_ends()->Assign(t.turn_ends.begin(), t.turn_ends.end());
  p->mutable_turn_rewards()->Assign(t.turn_rewards.begin(), t.turn_rewards.end());
  p->set_final_reward(t.final_reward);
  if (t.partial_score) p->set_partial_score(*t.partial_score);
  p->set_termination(static_cast<v1::Termination>(t.termination));
  for (Role r : t.call_roles) p->add_call_roles(static_cast<v1::Role>(r));
  p->set_actor_id(t.actor_id);
  p->set_created_unix_ns(t.created_unix_ns);
  p->set_finished_unix_ns(t.finished_unix_ns);
}

v1::Trajectory ToProto(const Trajectory& trajectory) {
  v1::Trajectory proto;
  ToProto(trajectory, &proto);
  return proto;
}

absl::StatusOr<Trajectory> FromProto(const v1::Trajectory& p) {
  Trajectory t;
  t.id = p.id();
  if (!v1::Role_IsValid(p.role()) || p.role() > v1::ROLE_SUB_AGENT_SUMMARY) {
    return absl::InvalidArgumentError(
        StrCat("trajectory '", p.id(), "': field role: unknown value ", p.role()));
  }
  if (!v1::Termination_IsValid(p.termination())) {
    return absl::InvalidArgumentError(StrCat(
        "trajectory '", p.id(), "': field termination: unknown value ", p.termination()));
  }
  t.execution_id = p.execution_id();
  t.group_id = p.group_id();
  t.task_id = p.task_id();
  t.env_name = p.env_name();
  t.role = static_cast<Role>(p.role());
  t.parent_id = p.parent_id();
  // proto3 cannot tell an unset field from 0: a root path (no parent) has no fork position.
  t.fork_position = p.parent_id().empty() ? -1 : p.fork_position();
  t.tokens.assign(p.tokens().begin(), p.tokens().end());
  t.trainable.assign(p.trainable().begin(), p.trainable().end());
  t.logprobs.assign(p.logprobs().begin(), p.logprobs().end());
  t.versions.assign(p.versions().begin(), p.versions().end());
  t.turn_ends.assign(p.turn_ends().begin(), p.turn_ends().end());
  t.turn_rewards.assign(p.turn_rewards().begin(), p.turn_rewards().end());
  t.final_reward = p.final_reward();
  if (p.has_partial_score()) t.partial_score = p.partial_score();
  t.termination = static_cast<Termination>(p.termination());
  for (int i = 0; i < p.call_roles_size(); ++i) {
    const int r = p.call_roles(i);
    if (r < v1::ROLE_MAIN || r > v1::ROLE_SUB_AGENT_SUMMARY) {
      return absl::InvalidArgumentError(StrCat("trajectory '", p.id(), "': field call_roles[", i,
                                               "]: unknown value ", r));
    }
    t.call_roles.push_back(static_cast<Role>(r));
  }
  t.actor_id = p.actor_id();
  t.created_unix_ns = p.created_unix_ns();
  t.finished_unix_ns = p.finished_unix_ns();
  return t;
}

}  // namespace flywheel
