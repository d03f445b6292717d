#include "server/kernels/add_kernel.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace posenc {
namespace {

thread_local const char* last_impl = "none";

dnnl::memory::data_type ToDnnl(DType t) {
  switch (t) {
    case DType::kFloat16: return dnnl::memory::data_type::f16;
    case DType::kBFloat16: return dnnl::memory::data_type::bf16;
    default: return dnnl::memory::data_type::f32;
  }
}

// oneDNN 2.6 builds a primitive from an op desc; creating one "can take quite some time",
// so primitives are kept per shape signature. A dtype the CPU has no kernel for is
// remembered as null so the loop serves it without asking oneDNN again.
class BinaryAddPrimitives {
 public:
  static BinaryAddPrimitives& Get() {
    static BinaryAddPrimitives* instance = new BinaryAddPrimitives();
    return *instance;
  }

  const dnnl::engine& engine() const { return engine_; }

  std::shared_ptr<dnnl::binary> Find(DType dtype, int64_t nb, int64_t seq, int64_t dim,
                                     float input_scale, float pe_scale) {
    const Key key{static_cast<int>(dtype), nb, seq, dim, input_scale, pe_scale};
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    if (cache_.size() >= kMaxPrimitives) cache_.clear();  // bounded, whatever clients send
    std::shared_ptr<dnnl::binary> prim = Create(dtype, nb, seq, dim, input_scale, pe_scale);
    cache_.emplace(key, prim);
    return prim;
  }

 private:
  using Key = std::tuple<int, int64_t, int64_t, int64_t, float, float>;
  static constexpr size_t kMaxPrimitives = 256;

  BinaryAddPrimitives() : engine_(dnnl::engine::kind::cpu, 0) {}

  std::shared_ptr<dnnl::binary> Create(DType dtype, int64_t nb, int64_t seq, int64_t dim,
                                       float input_scale, float pe_scale) {
    using tag = dnnl::memory::format_tag;
    try {
      // src0/dst: the embeddings in their own dtype; src1: the float32 encoding rows,
      // broadcast over the batch axis.
      const dnnl::memory::desc x_md({nb, seq, dim}, ToDnnl(dtype), tag::abc);
      const dnnl::memory::desc pe_md({1, seq, dim}, dnnl::memory::data_type::f32, tag::abc);
      const dnnl::binary::desc add_desc(dnnl::algorithm::binary_add, x_md, pe_md, x_md);
      // The scales ride on the primitive as attributes: dst = s0 * src0 + s1 * src1.
      dnnl::primitive_attr attr;
      if (input_scale != 1.0f) attr.set_scales(DNNL_ARG_SRC_0, 0, {input_scale});
      if (pe_scale != 1.0f) attr.set_scales(DNNL_ARG_SRC_1, 0, {pe_scale});
      const dnnl::binary::primitive_desc add_pd(add_desc, attr, engine_);
      // A reference (non-JIT) kernel is slower than our loop: keep the loop then.
      if (std::strncmp(add_pd.impl_info_str(), "ref", 3) == 0) return nullptr;
      return std::make_shared<dnnl::binary>(add_pd);
    } catch (const dnnl::error&) {
      return nullptr;  // unimplemented for this dtype on this CPU
    }
  }

  dnnl::engine engine_;
  std::mutex mu_;
  std::map<Key, std::shared_ptr<dnnl::binary>> cache_;
};

template <typename Load, typename Store>
void AddLoop(int64_t nb, int64_t rows, int64_t dim, const float* pe, float a, float b,
             Load load, Store store) {
  for (int64_t n = 0; n < nb; ++n) {        // batch
    for (int64_t s = 0; s < rows; ++s) {    // seq
      const int64_t base = (n * rows + s) * dim;
      const float* pe_row = pe + s * dim;
      for (int64_t c = 0; c < dim; ++c) {   // feature
        store(base + c, load(base + c) * a + pe_row[c] * b);
      }
    }
  }
}

}  // namespace

void AddEncodingLoop(TensorView x, const float* pe, float input_scale, float pe_scale) {
  const int64_t nb = x.shape[0], seq = x.shape[1], dim = x.shape[2];
  switch (x.dtype) {
    case DType::kFloat32: {
      float* p = x.As<float>();
      AddLoop(nb, seq, dim, pe, input_scale, pe_scale, [p](int64_t i) { return p[i]; },
              [p](int64_t i, float v) { p[i] = v; });
      break;
    }
    case DType::kFloat16: {
      uint16_t* p = x.As<uint16_t>();
      AddLoop(nb, seq, dim, pe, input_scale, pe_scale,
              [p](int64_t i) { return HalfToFloat(p[i]); },
              [p](int64_t i, float v) { p[i] = FloatToHalf(v); });
      break;
    }
    case DType::kBFloat16: {
      uint16_t* p = x.As<uint16_t>();
      AddLoop(nb, seq, dim, pe, input_scale, pe_scale,
              [p](int64_t i) { return BFloat16ToFloat(p[i]); },
              [p](int64_t i, float v) { p[i] = FloatToBFloat16(v); });
      break;
    }
    default:
      break;
  }
}

absl::Status AddEncodingInPlace(TensorView x, const float* pe, float input_scale,
                                float pe_scale) {
  const int64_t nb = x.shape[0], seq = x.shape[1], dim = x.shape[2];
  if (nb == 0 || seq == 0 || dim == 0) return absl::OkStatus();
  auto& primitives = BinaryAddPrimitives::Get();
  std::shared_ptr<dnnl::binary> add =
      primitives.Find(x.dtype, nb, seq, dim, input_scale, pe_scale);
  if (!add) {
    last_impl = "loop";
    AddEncodingLoop(x, pe, input_scale, pe_scale);
    return absl::OkStatus();
  }
  try {
    thread_local dnnl::stream stream(primitives.engine());
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc x_md({nb, seq, dim}, ToDnnl(x.dtype), tag::abc);
    const dnnl::memory::desc pe_md({1, seq, dim}, dnnl::memory::data_type::f32, tag::abc);
    dnnl::memory x_mem(x_md, primitives.engine(), x.data);
    dnnl::memory pe_mem(pe_md, primitives.engine(), const_cast<float*>(pe));
    add->execute(stream, {{DNNL_ARG_SRC_0, x_mem}, {DNNL_ARG_SRC_1, pe_mem},
                          {DNNL_ARG_DST, x_mem}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN binary_add failed: ", e.what()));
  }
  last_impl = "onednn";
  return absl::OkStatus();
}

void ConcatEncoding(ConstTensorView x, const float* pe, int64_t pe_dim, float input_scale,
                    float pe_scale, TensorView out) {
  const int64_t nb = x.shape[0], seq = x.shape[1], d = x.shape[2];
  const int64_t out_dim = d + pe_dim;
  const size_t elem = DTypeSize(x.dtype);
  std::vector<float> row(static_cast<size_t>(out_dim));
  for (int64_t n = 0; n < nb; ++n) {      // batch
    for (int64_t s = 0; s < seq; ++s) {   // seq
      const size_t in_off = static_cast<size_t>((n * seq + s) * d);
      const size_t out_off = static_cast<size_t>((n * seq + s) * out_dim);
      ToFloat32(x.dtype, static_cast<const char*>(x.data) + in_off * elem, row.data(), d);
      for (int64_t c = 0; c < d; ++c) row[c] *= input_scale;
      const float* pe_row = pe + s * pe_dim;
      for (int64_t c = 0; c < pe_dim; ++c) row[d + c] = pe_row[c] * pe_scale;
      FromFloat32(row.data(), x.dtype, static_cast<char*>(out.data) + out_off * elem,
                  out_dim);
    }
  }
}

const char* LastAddImplementation() { return last_impl; }

}  // namespace posenc
