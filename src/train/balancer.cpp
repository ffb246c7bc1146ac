#include "train/balancer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace zaya::train {

BalanceController::BalanceController(int64_t num_layers, int64_t num_experts, const BalancerConfig& cfg)
    : layers_(num_layers), experts_(num_experts), cfg_(cfg) {
  ZAYA_CHECK(num_layers >= 0 && num_experts >= 1,
             "balancing controller: need layers >= 0 and experts >= 1, got ", num_layers, " and ",
             num_experts);
  exp_avg_ = Tensor::empty(DType::F32, {num_layers, num_experts + 1});
  exp_avg_sq_ = Tensor::empty(DType::F32, {num_layers, num_experts + 1});
  step_size_ = Tensor::empty(DType::F32, {num_layers, num_experts + 1});
  prev_sign_ = Tensor::empty(DType::F32, {num_layers, num_experts + 1});
  step_tensor_ = Tensor::empty(DType::I64, {1});
}

void BalanceController::update(const int64_t* counts, const std::vector<float*>& biases) {
  ZAYA_CHECK(int64_t(biases.size()) == layers_, "balancing controller: got biases of ", biases.size(),
             " layers, built for ", layers_);
  const int64_t E = experts_, C = E + 1;
  const int64_t t = steps_ + 1;
  const double bias_correction1 = 1.0 - std::pow(double(cfg_.beta1), double(t));
  const double bias_correction2 = 1.0 - std::pow(double(cfg_.beta2), double(t));
  std::vector<double> err(size_t(C), 0.0);
  for (int64_t l = 0; l < layers_; l++) {
    const int64_t* c = counts + l * C;
    int64_t routed = 0, all = 0;
    for (int64_t e = 0; e < C; e++) {
      ZAYA_CHECK(c[e] >= 0, "balancing controller: layer ", l, " class ", e, " has a negative count ", c[e]);
      if (e < E) routed += c[e];
      all += c[e];
    }
    if (routed == 0) continue;  // nothing reached an expert: no information about the balance
    for (int64_t e = 0; e < E; e++) err[e] = double(c[e]) / double(routed) - 1.0 / double(E);
    const bool move_skip = cfg_.skip_target.has_value();
    if (move_skip) err[E] = double(c[E]) / double(all) - double(*cfg_.skip_target);
    float* bias = biases[l];
    float* m = exp_avg_.f32() + l * C;
    float* v = exp_avg_sq_.f32() + l * C;
    float* delta = step_size_.f32() + l * C;
    float* prev = prev_sign_.f32() + l * C;
    for (int64_t e = 0; e < (move_skip ? C : E); e++) {
      const float sign = float((err[e] > 0) - (err[e] < 0));
      if (cfg_.rule == BalanceRule::Sign) {
        bias[e] -= cfg_.sign_rate * sign;
        continue;
      }
      if (cfg_.rule == BalanceRule::Rprop) {
        if (sign == 0.f) continue;  // balanced entry: no move, no information about the step size
        if (delta[e] == 0.f)
          delta[e] = cfg_.rprop_init;
        else if (sign == prev[e])
          delta[e] = std::min(delta[e] * cfg_.rprop_up, cfg_.rprop_max);
        else
          delta[e] = std::max(delta[e] * cfg_.rprop_down, cfg_.rprop_min);
        prev[e] = sign;
        bias[e] -= delta[e] * sign;
        continue;
      }
      m[e] = cfg_.beta1 * m[e] + (1.0f - cfg_.beta1) * float(err[e]);
      v[e] = cfg_.beta2 * v[e] + (1.0f - cfg_.beta2) * float(err[e] * err[e]);
      const double m_hat = m[e] / bias_correction1, v_hat = v[e] / bias_correction2;
      bias[e] -= float(cfg_.lr * m_hat / (std::sqrt(v_hat) + cfg_.eps));
    }
  }
  steps_ = t;
  static_cast<int64_t*>(step_tensor_.data)[0] = steps_;
}

std::vector<std::pair<std::string, Tensor>> BalanceController::state_tensors() {
  static_cast<int64_t*>(step_tensor_.data)[0] = steps_;
  return {{"balancer.step", step_tensor_},
          {"balancer.exp_avg", exp_avg_},
          {"balancer.exp_avg_sq", exp_avg_sq_},
          {"balancer.step_size", step_size_},
          {"balancer.prev_sign", prev_sign_}};
}

void BalanceController::load_state(const std::vector<std::pair<std::string, Tensor>>& saved,
                                   const std::string& what) {
  for (auto& [name, live] : state_tensors()) {
    const Tensor* found = nullptr;
    for (const auto& [n, t] : saved)
      if (n == name) found = &t;
    ZAYA_CHECK(found, what, ": balancing controller state '", name, "' is missing");
    ZAYA_CHECK(found->dtype == live.dtype && found->shape == live.shape, what,
               ": balancing controller state '", name, "' is ", dtype_name(found->dtype), " ",
               shape_str(found->shape), ", expected ", dtype_name(live.dtype), " ", shape_str(live.shape));
    std::memcpy(live.data, found->data, live.nbytes());
  }
  steps_ = static_cast<const int64_t*>(step_tensor_.data)[0];
  ZAYA_CHECK(steps_ >= 0, what, ": balancer.step is negative (", steps_, ")");
}

std::vector<double> router_load_entropy(const int64_t* counts, int64_t num_layers, int64_t num_experts) {
  std::vector<double> out(size_t(num_layers), 0.0);
  const int64_t C = num_experts + 1;
  for (int64_t l = 0; l < num_layers; l++) {
    double routed = 0;
    for (int64_t e = 0; e < num_experts; e++) routed += double(counts[l * C + e]);
    if (routed <= 0) continue;
    double h = 0;
    for (int64_t e = 0; e < num_experts; e++) {
      const double p = double(counts[l * C + e]) / routed;
      if (p > 0) h -= p * std::log(p);
    }
    out[l] = h;
  }
  return out;
}

}  // namespace zaya::train
