#include "k3/scaling/scaling_law.h"

#include <algorithm>
#include <cmath>

#include "k3/base/error.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
// glibc's vector math library (libmvec): exp and log of four doubles (AVX2), within 4 ulp.
extern "C" __m256d _ZGVdN4v_exp(__m256d x);
extern "C" __m256d _ZGVdN4v_log(__m256d x);
#endif

namespace k3::scaling {

LawForm parse_law_form(const std::string& name) {
  if (name == "nd") return LawForm::kParamsTokens;
  if (name == "c") return LawForm::kCompute;
  K3_CHECK(false, "unknown law form '", name,
           "': nd (E + A/N^alpha + B/D^beta) or c (E + A/C^alpha)");
  return LawForm::kParamsTokens;
}

const char* law_form_name(LawForm form) { return form == LawForm::kCompute ? "c" : "nd"; }

const char* param_name(int p) {
  static constexpr const char* kNames[] = {"a", "b", "e", "alpha", "beta"};
  return kNames[p];
}

bool form_uses(LawForm form, int p) {
  return form == LawForm::kParamsTokens || (p != kLogB && p != kBeta);
}

ScalingLaw ScalingLaw::from_theta(LawForm form, const Theta& t) {
  ScalingLaw law;
  law.form = form;
  law.E = std::exp(t[kLogE]);
  law.A = std::exp(t[kLogA]);
  law.alpha = t[kAlpha];
  if (form == LawForm::kParamsTokens) law.B = std::exp(t[kLogB]), law.beta = t[kBeta];
  return law;
}

double ScalingLaw::loss(double params, double tokens) const {
  if (form == LawForm::kCompute) return loss_at_compute(6 * params * tokens);
  return E + A / std::pow(params, alpha) + B / std::pow(tokens, beta);
}

double ScalingLaw::loss_at_compute(double compute) const {
  return E + A / std::pow(compute, alpha);
}

FitPoints make_fit_points(LawForm form, std::span<const double> params,
                          std::span<const double> tokens, std::span<const double> loss) {
  FitPoints p;
  p.form = form;
  for (size_t i = 0; i < loss.size(); ++i) {
    if (form == LawForm::kCompute) {
      p.x1.push_back(std::log(6 * params[i] * tokens[i]));
    } else {
      p.x1.push_back(std::log(params[i]));
      p.x2.push_back(std::log(tokens[i]));
    }
    p.log_loss.push_back(std::log(loss[i]));
  }
  return p;
}

FitPoints subset(const FitPoints& points, std::span<const size_t> indices) {
  FitPoints s;
  s.form = points.form;
  for (size_t i : indices) {
    s.x1.push_back(points.x1[i]);
    if (!points.x2.empty()) s.x2.push_back(points.x2[i]);
    s.log_loss.push_back(points.log_loss[i]);
  }
  return s;
}

double huber(double r, double delta) {
  const double m = std::abs(r);
  return m <= delta ? 0.5 * r * r : delta * (m - 0.5 * delta);
}

namespace {

// log(exp(t1) + exp(t2) + exp(t3)) and its softmax weights. The largest term is exp(0) = 1:
// two exponentials, not three (the objective's cost is its exponentials and logarithm).
struct Lse {
  double value, w1, w2, w3;
};
inline Lse lse_from_max(double m, double e1, double e2, double e3) {
  const double s = e1 + e2 + e3, inv = 1 / s;
  return {m + std::log(s), e1 * inv, e2 * inv, e3 * inv};
}
inline Lse lse3(double t1, double t2, double t3) {
  if (t1 >= t2 && t1 >= t3) return lse_from_max(t1, 1, std::exp(t2 - t1), std::exp(t3 - t1));
  if (t2 >= t3) return lse_from_max(t2, std::exp(t1 - t2), 1, std::exp(t3 - t2));
  return lse_from_max(t3, std::exp(t1 - t3), std::exp(t2 - t3), 1);
}
inline Lse lse2(double t1, double t3) {
  return t1 >= t3 ? lse_from_max(t1, 1, 0, std::exp(t3 - t1))
                  : lse_from_max(t3, std::exp(t1 - t3), 0, 1);
}

}  // namespace

namespace {

// The objective's sums over points: the value and the gradient's five entries.
struct Sums {
  double total = 0, ga = 0, gb = 0, ge = 0, galpha = 0, gbeta = 0;
};

// Points [begin, end), one at a time.
void add_points(const FitPoints& pts, double delta, const Theta& t, size_t begin, size_t end,
                Sums& s) {
  const bool nd = pts.form == LawForm::kParamsTokens;
  for (size_t i = begin; i < end; ++i) {
    const double t1 = t[kLogA] - t[kAlpha] * pts.x1[i];
    const Lse l = nd ? lse3(t1, t[kLogB] - t[kBeta] * pts.x2[i], t[kLogE]) : lse2(t1, t[kLogE]);
    const double r = l.value - pts.log_loss[i];
    s.total += huber(r, delta);
    const double dr = std::clamp(r, -delta, delta);  // Huber's derivative
    s.ga += dr * l.w1;
    s.galpha -= dr * l.w1 * pts.x1[i];
    s.ge += dr * l.w3;
    if (nd) s.gb += dr * l.w2, s.gbeta -= dr * l.w2 * pts.x2[i];
  }
}

#if defined(__AVX2__) && defined(__FMA__)
double horizontal_sum(__m256d v) {
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, v);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// Four points at a time with glibc's vector exp and log (libmvec): the exponentials and the
// logarithm are nearly all of the objective's cost. Returns how many points it covered.
size_t add_points_avx2(const FitPoints& pts, double delta, const Theta& t, Sums& s) {
  const bool nd = pts.form == LawForm::kParamsTokens;
  const size_t n = pts.size() / 4 * 4;
  const __m256d a = _mm256_set1_pd(t[kLogA]), alpha = _mm256_set1_pd(t[kAlpha]);
  const __m256d b = _mm256_set1_pd(t[kLogB]), beta = _mm256_set1_pd(t[kBeta]);
  const __m256d t3 = _mm256_set1_pd(t[kLogE]), no_term = _mm256_set1_pd(-INFINITY);
  const __m256d d = _mm256_set1_pd(delta), minus_d = _mm256_set1_pd(-delta);
  const __m256d half = _mm256_set1_pd(0.5), half_d = _mm256_set1_pd(0.5 * delta);
  const __m256d one = _mm256_set1_pd(1.0), sign = _mm256_set1_pd(-0.0);
  __m256d total = _mm256_setzero_pd(), ga = total, gb = total, ge = total, galpha = total,
          gbeta = total;
  for (size_t i = 0; i < n; i += 4) {
    const __m256d x1 = _mm256_loadu_pd(&pts.x1[i]);
    const __m256d x2 = nd ? _mm256_loadu_pd(&pts.x2[i]) : _mm256_setzero_pd();
    const __m256d t1 = _mm256_fnmadd_pd(alpha, x1, a);
    const __m256d t2 = nd ? _mm256_fnmadd_pd(beta, x2, b) : no_term;
    const __m256d m = _mm256_max_pd(_mm256_max_pd(t1, t2), t3);
    const __m256d e1 = _ZGVdN4v_exp(_mm256_sub_pd(t1, m));
    const __m256d e2 = _ZGVdN4v_exp(_mm256_sub_pd(t2, m));
    const __m256d e3 = _ZGVdN4v_exp(_mm256_sub_pd(t3, m));
    const __m256d sum = _mm256_add_pd(_mm256_add_pd(e1, e2), e3);
    const __m256d inv = _mm256_div_pd(one, sum);
    const __m256d r =
        _mm256_sub_pd(_mm256_add_pd(m, _ZGVdN4v_log(sum)), _mm256_loadu_pd(&pts.log_loss[i]));
    const __m256d abs_r = _mm256_andnot_pd(sign, r);
    const __m256d quadratic = _mm256_mul_pd(_mm256_mul_pd(half, r), r);
    const __m256d linear = _mm256_mul_pd(d, _mm256_sub_pd(abs_r, half_d));
    total = _mm256_add_pd(total,
                          _mm256_blendv_pd(linear, quadratic, _mm256_cmp_pd(abs_r, d, _CMP_LE_OQ)));
    const __m256d dr = _mm256_mul_pd(_mm256_min_pd(_mm256_max_pd(r, minus_d), d), inv);
    const __m256d w1 = _mm256_mul_pd(dr, e1), w2 = _mm256_mul_pd(dr, e2);
    ga = _mm256_add_pd(ga, w1);
    galpha = _mm256_fnmadd_pd(w1, x1, galpha);
    ge = _mm256_fmadd_pd(dr, e3, ge);
    gb = _mm256_add_pd(gb, w2);
    gbeta = _mm256_fnmadd_pd(w2, x2, gbeta);
  }
  s.total += horizontal_sum(total), s.ga += horizontal_sum(ga), s.ge += horizontal_sum(ge);
  s.galpha += horizontal_sum(galpha);
  if (nd) s.gb += horizontal_sum(gb), s.gbeta += horizontal_sum(gbeta);
  return n;
}
#endif

}  // namespace

double fit_objective(const FitPoints& pts, double delta, const Theta& t, std::span<double> grad) {
  Sums s;
  size_t done = 0;
#if defined(__AVX2__) && defined(__FMA__)
  done = add_points_avx2(pts, delta, t, s);
#endif
  add_points(pts, delta, t, done, pts.size(), s);
  if (!grad.empty()) {
    grad[kLogA] = s.ga, grad[kLogB] = s.gb, grad[kLogE] = s.ge, grad[kAlpha] = s.galpha;
    grad[kBeta] = s.gbeta;
  }
  return s.total;
}

std::vector<double> log_residuals(const FitPoints& pts, const Theta& t) {
  std::vector<double> r(pts.size());
  for (size_t i = 0; i < pts.size(); ++i) {
    const double t1 = t[kLogA] - t[kAlpha] * pts.x1[i];
    const Lse l = pts.form == LawForm::kParamsTokens
                      ? lse3(t1, t[kLogB] - t[kBeta] * pts.x2[i], t[kLogE])
                      : lse2(t1, t[kLogE]);
    r[i] = l.value - pts.log_loss[i];
  }
  return r;
}

}  // namespace k3::scaling
