// Losses. Each returns a one-element Var and has its backward written beside its forward (loss.cpp).
//
// Classification: cross_entropy(logits [R, C], labels i32 [R], rows i32) = mean over the listed rows of
//   -log softmax(logits[r])[labels[r]]   (rows undefined: every row)
// Regression on predictions p [n] against targets t [n] (host f32/f64):
//   mse = mean (p - t)^2;  mape = mean |p - t| / |t|
//   log_mape = mean |exp(p) - t| / t, t > 0: the relative error of p read as a log runtime (the MRE)
// Ranking, over groups (the configs of one graph: group g owns entries group_ptr[g] .. group_ptr[g+1]-1,
// group_ptr i64). Predictions are runtime-like: lower means faster.
//   pairwise_hinge:    mean over pairs i, j of one group with t_i > t_j of max(0, margin - (p_i - p_j)) (NaN kept)
//   pairwise_logistic: the same pairs, log(1 + exp(-(p_i - p_j)))  (= -log sigmoid(p_i - p_j))
//   list_mle:          per group, with u = -p / temperature and pi the true order fastest first,
//                      sum_k [logsumexp(u_pi(k..n)) - u_pi(k)]; mean over groups
#pragma once
#include "autograd/var.h"

namespace gnn::nn {

ag::Var cross_entropy(const ag::Var& logits, const Tensor& labels, const Tensor& rows = Tensor());
ag::Var mse_loss(const ag::Var& pred, const Tensor& target);
// mean |p - s t| / |s t|: the target read in other units (s = 1e-9: nanoseconds read as seconds)
ag::Var mape_loss(const ag::Var& pred, const Tensor& target, double target_scale = 1);
ag::Var log_mape_loss(const ag::Var& log_pred, const Tensor& target);
ag::Var pairwise_hinge_loss(const ag::Var& pred, const Tensor& target, const Tensor& group_ptr, double margin = 0.1);
ag::Var pairwise_logistic_loss(const ag::Var& pred, const Tensor& target, const Tensor& group_ptr);
// ListMLE (Plackett-Luce) over each group's configs. Ours starts from the fastest: the likelihood of the
// true order fastest first under utilities -pred / T. slowest_first starts from the slowest under +pred / T,
// as allRank's listMLE with the runtime as relevance (the 6th place's tile model). The two are different
// losses: a Plackett-Luce order and its reverse do not have the same likelihood.
ag::Var list_mle_loss(const ag::Var& pred, const Tensor& target, const Tensor& group_ptr, double temperature = 1.0,
                      bool slowest_first = false);

}  // namespace gnn::nn
