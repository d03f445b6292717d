#include "server/kernels/convert_kernel.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/kernels/kernel_impl.h"
#include "server/kernels/onednn_common.h"
#include "server/kernels/primitive_cache.h"
#include "server/kernels/simd_convert.h"
#include "server/kernels/threads.h"

namespace posenc {
namespace {

thread_local KernelImpl last_impl = KernelImpl::kAuto;

// Floats staged per step: the widened source, scaled, before it is narrowed.
constexpr int64_t kStage = 512;

// n values of `src_type` (FLOAT32, or the 16-bit dst_type) times `scale`, rounded once to
// dst_type. The vector and the loop version differ only in how they widen and narrow.
__attribute__((target("avx2,f16c"))) void ScaledCopyVector(DType src_type, const void* src,
                                                           float scale, DType dst_type, void* dst,
                                                           int64_t n) {
  alignas(32) float stage[kStage];
  for (int64_t i = 0; i < n; i += kStage) {
    const int64_t m = std::min(kStage, n - i);
    const float* f = static_cast<const float*>(src) + i;
    if (src_type != DType::kFloat32) {
      simd::Widen(src_type, static_cast<const uint16_t*>(src) + i, stage, m);
      f = stage;
    }
    float* out = dst_type == DType::kFloat32 ? static_cast<float*>(dst) + i : stage;
    for (int64_t j = 0; j < m; ++j) out[j] = f[j] * scale;
    if (dst_type != DType::kFloat32) {
      simd::Narrow(dst_type, stage, static_cast<uint16_t*>(dst) + i, m);
    }
  }
}

void ScaledCopyLoop(DType src_type, const void* src, float scale, DType dst_type, void* dst,
                    int64_t n) {
  float stage[kStage];
  const size_t in = DTypeSize(src_type), out = DTypeSize(dst_type);
  for (int64_t i = 0; i < n; i += kStage) {
    const int64_t m = std::min(kStage, n - i);
    ToFloat32(src_type, static_cast<const char*>(src) + i * in, stage, m);
    for (int64_t j = 0; j < m; ++j) stage[j] *= scale;
    FromFloat32(stage, dst_type, static_cast<char*>(dst) + i * out, m);
  }
}

// What `requested` runs (convert_kernel.h): kAvx2 (the vector code), kOneDnn or kScalar.
KernelImpl Resolve(KernelImpl requested) {
  const KernelImpl impl = requested == KernelImpl::kAuto ? KernelOverride() : requested;
  if (impl == KernelImpl::kOneDnn) return KernelImpl::kOneDnn;
  if (impl == KernelImpl::kAuto) {
    return simd::HasAvx2F16c() ? KernelImpl::kAvx2 : KernelImpl::kOneDnn;
  }
  return impl != KernelImpl::kScalar && simd::HasAvx2F16c() ? KernelImpl::kAvx2
                                                            : KernelImpl::kScalar;
}

// The code that runs where oneDNN has no reorder.
KernelImpl WithoutOneDnn() { return simd::HasAvx2F16c() ? KernelImpl::kAvx2 : KernelImpl::kScalar; }

// A 2-D copy with a row stride on each side: rows x cols of src_type into dst_type.
struct Rect {
  DType src_type, dst_type;
  int64_t rows, cols, src_stride, dst_stride;
  auto Key() const {
    return std::make_tuple(static_cast<int>(src_type), static_cast<int>(dst_type), rows, cols,
                           src_stride, dst_stride);
  }
};

dnnl::memory::desc Desc(DType type, const Rect& r, int64_t stride) {
  return dnnl::memory::desc({r.rows, r.cols}, onednn::DataType(type), {stride, 1});
}

// oneDNN reorders (dst = scale * src, converted), one per Rect, the scale a runtime
// argument; null where oneDNN has no JIT kernel for it.
using Reorder = std::shared_ptr<const dnnl::reorder>;

Reorder FindReorder(const Rect& r) {
  static PrimitiveCache<decltype(r.Key()), Reorder> cache(256);
  return cache.Find(r.Key(), [&]() -> Reorder {
    try {
      dnnl::primitive_attr attr;
      attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
      const dnnl::engine& engine = *onednn::Engine();
      const dnnl::reorder::primitive_desc pd(engine, Desc(r.src_type, r, r.src_stride), engine,
                                             Desc(r.dst_type, r, r.dst_stride), attr);
      // Only a JIT reorder: oneDNN's generic "simple:any" one is far slower than the vector
      // code (docs/performance.md, "Kernel choices"), which then runs instead.
      if (std::strncmp(pd.impl_info_str(), "jit", 3) != 0) return nullptr;
      return std::make_shared<const dnnl::reorder>(pd);
    } catch (const std::exception&) {
      return nullptr;
    }
  });
}

// Runs r's reorder; false (nothing written) where oneDNN has none.
absl::StatusOr<bool> ReorderWithOneDnn(const Rect& r, const void* src, void* dst, float scale,
                                       int threads) {
  if (r.rows == 0 || r.cols == 0) return true;
  if (onednn::Engine() == nullptr) return false;
  const Reorder reorder = FindReorder(r);
  if (!reorder) return false;
  try {
    onednn::UseThreads(threads);
    const dnnl::engine& engine = *onednn::Engine();
    thread_local dnnl::stream stream(engine);
    dnnl::memory from(Desc(r.src_type, r, r.src_stride), engine, const_cast<void*>(src));
    dnnl::memory to(Desc(r.dst_type, r, r.dst_stride), engine, dst);
    dnnl::memory scale_mem({{1}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::x}, engine,
                           &scale);
    reorder->execute(stream, {{DNNL_ARG_FROM, from},
                              {DNNL_ARG_TO, to},
                              {DNNL_ARG_ATTR_OUTPUT_SCALES, scale_mem}});
    stream.wait();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("oneDNN reorder failed: ", e.what()));
  }
  return true;
}

// Columns per row when a flat conversion is handed to oneDNN as a 2-D reorder.
constexpr int64_t kFlatCols = 4096;

absl::StatusOr<bool> ConvertWithOneDnn(const float* src, DType dst_type, void* dst, int64_t n,
                                       int threads) {
  const int64_t rows = n / kFlatCols, tail = n % kFlatCols;
  const Rect body{DType::kFloat32, dst_type, rows, kFlatCols, kFlatCols, kFlatCols};
  const Rect rest{DType::kFloat32, dst_type, 1, tail, tail, tail};
  auto* out = static_cast<char*>(dst);
  bool done = true;
  if (rows > 0) {
    auto ran = ReorderWithOneDnn(body, src, out, 1.0f, threads);
    if (!ran.ok() || !*ran) return ran;
  }
  if (tail > 0) {
    auto ran = ReorderWithOneDnn(rest, src + rows * kFlatCols,
                                 out + rows * kFlatCols * DTypeSize(dst_type), 1.0f, threads);
    if (!ran.ok()) return ran;
    done = *ran;
  }
  return done;
}

// The concatenation as 1 + nb reorders into out: x's columns for every row at once, then
// the encoding's for each batch row.
absl::StatusOr<bool> ConcatWithOneDnn(ConstTensorView x, const float* pe, int64_t pe_dim,
                                      float input_scale, float pe_scale, TensorView out,
                                      int threads) {
  const int64_t nb = x.shape[0], seq = x.shape[1], d = x.shape[2], out_dim = d + pe_dim;
  const size_t elem = DTypeSize(x.dtype);
  auto* dst = static_cast<char*>(out.data);
  const Rect xs{x.dtype, x.dtype, nb * seq, d, d, out_dim};
  auto ran = ReorderWithOneDnn(xs, x.data, dst, input_scale, threads);
  if (!ran.ok() || !*ran) return ran;
  const Rect pes{DType::kFloat32, x.dtype, seq, pe_dim, pe_dim, out_dim};
  for (int64_t n = 0; n < nb; ++n) {  // batch
    ran = ReorderWithOneDnn(pes, pe, dst + (n * seq * out_dim + d) * elem, pe_scale, threads);
    if (!ran.ok() || !*ran) return ran;
  }
  return true;
}

}  // namespace

absl::Status ConvertFromFloat32(const float* src, DType dst_type, void* dst, int64_t n,
                                KernelImpl implementation) {
  if (n <= 0) return absl::OkStatus();
  KernelImpl impl = Resolve(implementation);
  if (dst_type == DType::kFloat32 && impl != KernelImpl::kOneDnn) {
    FromFloat32(src, dst_type, dst, static_cast<size_t>(n));  // a copy: nothing to round
    last_impl = KernelImpl::kScalar;
    return absl::OkStatus();
  }
  const KernelThreadLease lease(WorkBytes(n));
  if (impl == KernelImpl::kOneDnn) {
    ASSIGN_OR_RETURN(const bool done, ConvertWithOneDnn(src, dst_type, dst, n, lease.threads()));
    if (done) {
      last_impl = KernelImpl::kOneDnn;
      return absl::OkStatus();
    }
    impl = WithoutOneDnn();
  }
  const bool vector = impl == KernelImpl::kAvx2;
  last_impl = impl;
  constexpr int64_t kBlock = 1 << 16;
  const size_t elem = DTypeSize(dst_type);
  ParallelFor(lease.threads(), (n + kBlock - 1) / kBlock, [&](int64_t first, int64_t last) {
    const int64_t begin = first * kBlock, end = std::min(n, last * kBlock);
    void* out = static_cast<char*>(dst) + begin * elem;
    if (vector) {
      ScaledCopyVector(DType::kFloat32, src + begin, 1.0f, dst_type, out, end - begin);
    } else {
      FromFloat32(src + begin, dst_type, out, end - begin);
    }
  });
  return absl::OkStatus();
}

absl::Status ConcatEncoding(ConstTensorView x, const float* pe, int64_t pe_dim, float input_scale,
                            float pe_scale, TensorView out, KernelImpl implementation) {
  const int64_t nb = x.shape[0], seq = x.shape[1], d = x.shape[2], out_dim = d + pe_dim;
  const KernelThreadLease lease(WorkBytes(nb * seq * out_dim));
  KernelImpl impl = Resolve(implementation);
  if (impl == KernelImpl::kOneDnn) {
    ASSIGN_OR_RETURN(const bool done,
                     ConcatWithOneDnn(x, pe, pe_dim, input_scale, pe_scale, out, lease.threads()));
    if (done) {
      last_impl = KernelImpl::kOneDnn;
      return absl::OkStatus();
    }
    impl = WithoutOneDnn();
  }
  last_impl = impl;
  const auto copy = impl == KernelImpl::kAvx2 ? ScaledCopyVector : ScaledCopyLoop;
  const size_t elem = DTypeSize(x.dtype);
  ParallelFor(lease.threads(), nb * seq, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {  // batch * seq
      const char* in = static_cast<const char*>(x.data) + r * d * elem;
      char* row = static_cast<char*>(out.data) + r * out_dim * elem;
      copy(x.dtype, in, input_scale, x.dtype, row, d);
      copy(DType::kFloat32, pe + (r % seq) * pe_dim, pe_scale, x.dtype, row + d * elem, pe_dim);
    }
  });
  return absl::OkStatus();
}

KernelImpl LastConvertImplementation() { return last_impl; }

}  // namespace posenc
