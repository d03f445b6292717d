#include "server/kernels/onednn_common.h"

#include <omp.h>

#include <exception>

namespace posenc::onednn {

const dnnl::engine* Engine() {
  static const dnnl::engine* engine = []() -> const dnnl::engine* {
    try {
      return new dnnl::engine(dnnl::engine::kind::cpu, 0);
    } catch (const std::exception&) {
      return nullptr;
    }
  }();
  return engine;
}

dnnl::memory::data_type DataType(DType t) {
  switch (t) {
    case DType::kFloat16: return dnnl::memory::data_type::f16;
    case DType::kBFloat16: return dnnl::memory::data_type::bf16;
    default: return dnnl::memory::data_type::f32;
  }
}

void UseThreads(int threads) {
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
}

}  // namespace posenc::onednn
