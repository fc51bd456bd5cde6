#include "k3/model/deferred_weight_grads.h"

#include "k3/kernels/gemm.h"

namespace k3::model {

void DeferredWeightGrads::defer(const float* dy, const float* x, int64_t rows, int64_t out,
                                int64_t in, float* dw, kernels::Precision precision) {
  Product p{operands_.size(), operands_.size() + static_cast<size_t>(rows * out), rows, out, in, dw,
            precision};
  operands_.insert(operands_.end(), dy, dy + rows * out);
  operands_.insert(operands_.end(), x, x + rows * in);
  products_.push_back(p);
}

void DeferredWeightGrads::run() {
  for (const Product& p : products_)
    kernels::gemm(true, false, p.out, p.in, p.rows, 1.f, operands_.data() + p.dy,
                  operands_.data() + p.x, 1.f, p.dw, p.precision);
  products_.clear();
  operands_.clear();
}

void weight_grad(DeferredWeightGrads* deferred, const float* dy, const float* x, int64_t rows,
                 int64_t out, int64_t in, float* dw, kernels::Precision precision) {
  if (deferred)
    deferred->defer(dy, x, rows, out, in, dw, precision);
  else
    kernels::gemm(true, false, out, in, rows, 1.f, dy, x, 1.f, dw, precision);
}

}  // namespace k3::model
