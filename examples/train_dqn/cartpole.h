// CartPole (Barto, Sutton and Anderson, 1983), the classic control task, as
// a batch of independent environments stepped together with tensor ops: the
// state of N carts is one [N, 4] tensor, so one step of all of them costs a
// few dozen small ATen calls whatever N is.
//
// The interface speaks tensordicts in the layout TorchRL uses (its "TED"
// layout): reset() returns {"observation"}; step(data) reads data["action"]
// and writes what followed under "next": ("next", "observation"),
// ("next", "reward"), ("next", "done"), ("next", "terminated"),
// ("next", "truncated"). Environments that finished are reset by
// step_mdp(), which returns the tensordict of the next step.
//
// Dynamics as in the original paper and in Gymnasium's CartPole-v1: the
// Euler integration of the cart and pole equations, reward 1 per step,
// terminated when the cart leaves [-2.4, 2.4] or the pole leans more than
// 12 degrees, truncated after `max_steps` steps.
#pragma once

#include <tensordict/tensor_dict.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <numbers>
#include <optional>

namespace cartpole {

namespace td = tensordict;

class CartPole {
 public:
  static constexpr int64_t kObservationSize = 4;  // x, x_dot, theta, theta_dot
  static constexpr int64_t kActions = 2;          // push left, push right

  /// `num_envs` environments; `generator` draws the initial states (a
  /// generator of their own keeps evaluation episodes independent of the
  /// training's random stream).
  CartPole(int64_t num_envs, int64_t max_steps, at::Generator generator)
      : num_envs_(num_envs), max_steps_(max_steps), generator_(std::move(generator)) {}

  int64_t num_envs() const { return num_envs_; }
  at::Generator& generator() { return generator_; }

  /// Every environment at a fresh start: {"observation": float[N, 4]}.
  td::TensorDict reset() {
    state_ = initial_states(num_envs_);
    steps_ = at::zeros({num_envs_}, at::kLong);
    return observe();
  }

  /// One step of every environment with data["action"] (long[N], 0 = left,
  /// 1 = right); writes the outcome under data["next"] and returns `data`.
  td::TensorDictBase step(td::TensorDictBase data) {
    const at::Tensor action = data.get("action");
    // The physics: the pole's angular acceleration, then the cart's.
    at::Tensor x = state_.select(1, 0), x_dot = state_.select(1, 1);
    at::Tensor theta = state_.select(1, 2), theta_dot = state_.select(1, 3);
    const at::Tensor force = action.to(at::kFloat).mul(2 * kForce).sub_(kForce);
    const at::Tensor cos_t = theta.cos(), sin_t = theta.sin();
    const at::Tensor temp = (force + kPoleMassLength * theta_dot.square() * sin_t).div_(kTotalMass);
    const at::Tensor theta_acc =
        (kGravity * sin_t - cos_t * temp)
            .div_(kLength * (4.0 / 3.0 - kPoleMass * cos_t.square() / kTotalMass));
    const at::Tensor x_acc = temp - kPoleMassLength * theta_acc * cos_t / kTotalMass;
    // Explicit Euler, positions first with the old velocities (as Gymnasium).
    state_ = at::stack({x + kTau * x_dot, x_dot + kTau * x_acc, theta + kTau * theta_dot,
                        theta_dot + kTau * theta_acc},
                       1);
    steps_ += 1;

    const at::Tensor terminated = state_.select(1, 0).abs().gt(kXLimit).logical_or_(
        state_.select(1, 2).abs().gt(kThetaLimit));
    const at::Tensor truncated = steps_.ge(max_steps_);
    data.set("next", td::TensorDict({{"observation", state_.clone()},
                                     {"reward", at::ones({num_envs_}, at::kFloat)},
                                     {"done", terminated.logical_or(truncated)},
                                     {"terminated", terminated},
                                     {"truncated", truncated}},
                                    {num_envs_}));
    return data;
  }

  /// The tensordict of the following step: the "next" observation, except
  /// for the environments that are done, which start again from a fresh
  /// state (TorchRL's step_mdp followed by a partial reset).
  td::TensorDict step_mdp(const td::TensorDictBase& data) {
    const at::Tensor done = data.get({"next", "done"});
    const int64_t finished = done.sum().item<int64_t>();
    if (finished > 0) {
      const at::Tensor rows = done.nonzero().squeeze(1);
      state_.index_put_({rows}, initial_states(finished));
      steps_.index_put_({rows}, 0);
    }
    return observe();
  }

  /// The current step: {"observation": float[N, 4]}.
  td::TensorDict observe() const {
    return td::TensorDict({{"observation", state_.clone()}}, {num_envs_});
  }

  /// The state of every environment, to checkpoint; load_state() restores it.
  td::TensorDict state() const {
    return td::TensorDict({{"state", state_.clone()}, {"steps", steps_.clone()}});
  }
  void load_state(const td::TensorDictBase& saved) {
    state_ = saved.get("state").clone();
    steps_ = saved.get("steps").clone();
  }

 private:
  // Each state variable uniform in [-0.05, 0.05].
  at::Tensor initial_states(int64_t n) {
    return at::empty({n, kObservationSize}, at::kFloat).uniform_(-0.05, 0.05, generator_);
  }

  static constexpr double kGravity = 9.8;
  static constexpr double kCartMass = 1.0;
  static constexpr double kPoleMass = 0.1;
  static constexpr double kTotalMass = kCartMass + kPoleMass;
  static constexpr double kLength = 0.5;  // half the pole's length
  static constexpr double kPoleMassLength = kPoleMass * kLength;
  static constexpr double kForce = 10.0;
  static constexpr double kTau = 0.02;  // seconds per step
  static constexpr double kXLimit = 2.4;
  static constexpr double kThetaLimit = 12.0 * 2.0 * std::numbers::pi / 360.0;

  int64_t num_envs_;
  int64_t max_steps_;
  at::Generator generator_;
  at::Tensor state_;  // float[N, 4]
  at::Tensor steps_;  // long[N], steps since the last reset
};

}  // namespace cartpole
