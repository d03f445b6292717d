#include "bench/kernel_cases.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench/roofline.h"
#include "server/kernels/add_kernel.h"
#include "server/kernels/bias_kernel.h"
#include "server/kernels/convert_kernel.h"
#include "server/kernels/finite_kernel.h"
#include "server/kernels/kernel_impl.h"
#include "server/schemes/absolute_scheme.h"
#include "server/schemes/rope_scheme.h"
#include "server/tables/table_cache.h"

namespace posenc::bench {
namespace {

struct KernelCase {
  std::string name;
  std::string size;  // "small" | "large"
  Shape shape;
  DType dtype;
  size_t tensor_bytes;  // the in-place tensor (or output); the roofline's buffer size
  size_t moved_bytes;   // read + written by the kernel
  std::function<void()> run;
  std::function<std::string()> impl;  // which implementation served it, if it says
  // One of two implementations of the same kernel, side by side (add_vector, add_onednn):
  // shown, not judged against the targets.
  bool comparison = false;
  // Reads tensor_bytes and writes nothing (a scan): judged against a read-only roofline.
  bool read_only = false;
  // Run, untimed, before every timed call: for a kernel whose repeats would drift the
  // tensor's values into a range no real input has (see the multiply's case).
  std::function<void()> prepare = nullptr;
};

// Everything a set of kernel cases at one size shares: the buffers and tables.
struct KernelFixture {
  KernelFixture(int64_t nb, int64_t seq, int64_t dim, int64_t q_batch, int64_t q_seq,
                int64_t q_heads, int64_t head_dim, int64_t bias_heads, int64_t bias_len)
      : nb(nb), seq(seq), dim(dim), q_batch(q_batch), q_seq(q_seq), q_heads(q_heads),
        head_dim(head_dim), bias_heads(bias_heads), bias_len(bias_len),
        tensor(std::max({nb * seq * dim, q_batch * q_seq * q_heads * head_dim,
                         bias_heads * bias_len * bias_len}) *
               sizeof(float)),
        concat_input(static_cast<size_t>(nb * seq * (dim / 2)) * sizeof(float)),
        cache(size_t{256} << 20) {
    learned = std::make_shared<Table>();
    learned->rows = seq;
    learned->cols = dim;
    learned->data.assign(static_cast<size_t>(seq * dim), 0.01f);
    t5_table.assign(static_cast<size_t>(32 * bias_heads), -0.5f);
    for (int64_t k = 0; k < dim / 2; ++k) fourier_b.push_back(0.5 / static_cast<double>(k + 1));
    shaw_table.assign(static_cast<size_t>((2 * kShawK + 1) * kShawDim), 0.03f);
    shaw_query.assign(static_cast<size_t>(bias_heads * bias_len * kShawDim), 0.5f);
  }

  // Shaw with NEZHA's clipping distance and a 64-wide head.
  static constexpr int32_t kShawK = 64;
  static constexpr int64_t kShawDim = 64;

  int64_t nb, seq, dim;
  int64_t q_batch, q_seq, q_heads, head_dim;
  int64_t bias_heads, bias_len;
  Buffer tensor;
  Buffer concat_input;  // CONCAT's x, [nb, seq, dim/2] (its output is `tensor`)
  TableCache cache;
  std::shared_ptr<Table> learned;
  std::vector<float> t5_table;    // [32 buckets, heads]
  std::vector<double> fourier_b;  // [dim/2, 1] Fourier frequencies
  std::vector<float> shaw_table;  // [2 * kShawK + 1, kShawDim]
  std::vector<float> shaw_query;  // [1, bias_heads, bias_len, kShawDim]
};

// The absolute schemes' adds on [nb, seq, dim]: sinusoidal (ADD and MULTIPLY), the add
// kernel alone, 2D sin-cos, Fourier features and learned.
void AddAbsoluteCases(KernelFixture& f, const std::string& size, KernelImpl isa,
                      std::vector<KernelCase>& cases) {
  void* data = f.tensor.data();
  const int64_t emb_n = f.nb * f.seq * f.dim;
  const size_t pe_bytes = static_cast<size_t>(f.seq * f.dim) * sizeof(float);
  const Shape emb_shape{f.nb, f.seq, f.dim};
  // The implementation, and the layout its rows were read in where not as given.
  const auto last_add = [] {
    const AddRowLayout* layout = LastAddRowLayout();
    return absl::StrCat(KernelImplName(LastAddImplementation()), layout ? "/" : "",
                        layout ? layout->name() : "");
  };
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const size_t bytes = static_cast<size_t>(emb_n) * DTypeSize(dt);
    cases.push_back(
        {"sinusoidal_add", size, emb_shape, dt, bytes, 2 * bytes + pe_bytes,
         [&f, data, dt, emb_shape] {
           SinusoidalSpec spec;
           TensorView x{dt, emb_shape, data};
           Check(ApplySinusoidal(spec, CombineSpec{}, x, PositionsSpec{}, f.cache, SchemeLimits{})
                     .status(),
                 "ApplySinusoidal");
         },
         last_add});
  }
  // The add kernel alone, each implementation on the same rows: the hand-written rows of
  // this pass's ISA (cache-blocked) against oneDNN's binary_add with broadcast (at the ISA
  // oneDNN runs on in this process; see RunKernelsEveryIsa).
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    const size_t bytes = static_cast<size_t>(emb_n) * DTypeSize(dt);
    for (auto [label, impl] :
         {std::pair{"add_vector", isa}, std::pair{"add_onednn", KernelImpl::kOneDnn}}) {
      cases.push_back({label, size, emb_shape, dt, bytes, 2 * bytes + pe_bytes,
                       [&f, data, dt, emb_shape, impl = impl] {
                         TensorView x{dt, emb_shape, data};
                         Check(AddEncodingInPlace(x, f.learned->data.data(), 1.0f, 1.0f, impl),
                               "AddEncodingInPlace");
                       },
                       last_add, /*comparison=*/true});
    }
  }
  // What a call runs (the add, each row checked for values that are not finite as it is
  // written) against the add followed by a separate pass over the result (FirstNonFinite);
  // the same bytes moved, so the GB/s compare directly.
  {
    const size_t bytes = static_cast<size_t>(emb_n) * sizeof(float);
    const auto add = [&f, data, emb_shape, isa](bool checked_rows) {
      TensorView x{DType::kFloat32, emb_shape, data};
      int64_t first = -1;
      Check(AddEncodingInPlace(x, f.learned->data.data(), 1.0f, 1.0f, isa, {},
                               checked_rows ? &first : nullptr),
            "AddEncodingInPlace");
      if (!checked_rows) first = FirstNonFinite(DType::kFloat32, data, x.NumElements());
      if (first >= 0) Check(absl::InternalError("the add's result is not finite"), "add");
    };
    cases.push_back({"add_checked", size, emb_shape, DType::kFloat32, bytes, 2 * bytes + pe_bytes,
                     [add] { add(true); }, last_add,
                     /*comparison=*/true});
    cases.push_back({"add_then_scan", size, emb_shape, DType::kFloat32, bytes, 2 * bytes + pe_bytes,
                     [add] { add(false); }, last_add,
                     /*comparison=*/true});
  }
  // MULTIPLY fusion (x * pe), the 2D sin-cos of a patch grid (seq = 8 x 16 or 32 x 64
  // patches, a cached table) and Fourier features of integer positions (cos/sin computed
  // per call: 2F = dim frequencies per position, shared by the batch).
  const int64_t grid_h = f.seq == 128 ? 8 : 32, grid_w = f.seq / grid_h;
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const size_t bytes = static_cast<size_t>(emb_n) * DTypeSize(dt);
    // x * pe with |pe| <= 1 shrinks x on every repeat, into subnormals (which cost a
    // microcode assist per element on Intel, and the bfloat16 rows' subnormal fix-up) and
    // then zeros: the tensor is refilled before each timed call, as every real input is new.
    cases.push_back({"sinusoidal_multiply", size, emb_shape, dt, bytes, 2 * bytes + pe_bytes,
                     [&f, data, dt, emb_shape] {
                       CombineSpec multiply;
                       multiply.fusion = Fusion::kMultiply;
                       Check(ApplySinusoidal(SinusoidalSpec{}, multiply,
                                             TensorView{dt, emb_shape, data}, PositionsSpec{},
                                             f.cache, SchemeLimits{})
                                 .status(),
                             "ApplySinusoidal MULTIPLY");
                     },
                     last_add, /*comparison=*/false, /*read_only=*/false,
                     [data, dt, emb_n] { FillFloats(data, dt, emb_n, 0.25f); }});
    cases.push_back({"sinusoidal_2d_add", size, emb_shape, dt, bytes, 2 * bytes + pe_bytes,
                     [&f, data, dt, emb_shape, grid_h, grid_w] {
                       const Sinusoidal2DSpec spec{grid_h, grid_w, false, 10000.0, 0};
                       Check(ApplySinusoidal2D(spec, CombineSpec{}, TensorView{dt, emb_shape, data},
                                               PositionsSpec{}, f.cache, SchemeLimits{})
                                 .status(),
                             "ApplySinusoidal2D");
                     },
                     last_add});
  }
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    const size_t bytes = static_cast<size_t>(emb_n) * DTypeSize(dt);
    cases.push_back({"fourier_add", size, emb_shape, dt, bytes, 2 * bytes + pe_bytes,
                     [&f, data, dt, emb_shape] {
                       FourierSpec spec;
                       spec.frequencies = f.fourier_b;
                       Check(ApplyFourier(spec, CombineSpec{}, TensorView{dt, emb_shape, data},
                                          PositionsSpec{}, f.cache, SchemeLimits{})
                                 .status(),
                             "ApplyFourier");
                     },
                     last_add});
  }
  const size_t bytes = static_cast<size_t>(emb_n) * sizeof(float);
  cases.push_back(
      {"learned_add", size, emb_shape, DType::kFloat32, bytes, 2 * bytes + pe_bytes,
       [&f, data, emb_shape] {
         TensorView x{DType::kFloat32, emb_shape, data};
         LearnedSpec spec{"bench", f.learned, Overflow::kError};
         Check(ApplyLearned(spec, CombineSpec{}, x, PositionsSpec{}, SchemeLimits{}).status(),
               "ApplyLearned");
       },
       last_add});
}

// RoPE on queries [q_batch, q_seq, q_heads, head_dim], both pairings, every dtype.
void AddRopeCases(KernelFixture& f, const std::string& size, std::vector<KernelCase>& cases) {
  void* data = f.tensor.data();
  const Shape q_shape{f.q_batch, f.q_seq, f.q_heads, f.head_dim};
  const int64_t q_n = f.q_batch * f.q_seq * f.q_heads * f.head_dim;
  const size_t rows_bytes = static_cast<size_t>(f.q_seq * f.head_dim) * sizeof(float);
  for (auto style : {RopeSpec::Style::kNeox, RopeSpec::Style::kGptj}) {
    for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      const size_t bytes = static_cast<size_t>(q_n) * DTypeSize(dt);
      cases.push_back({style == RopeSpec::Style::kNeox ? "rope_neox" : "rope_gptj", size, q_shape,
                       dt, bytes, 2 * bytes + rows_bytes,
                       [&f, data, dt, q_shape, style] {
                         RopeSpec spec;
                         spec.style = style;
                         TensorView q{dt, q_shape, data};
                         Check(ApplyRope(spec, q, nullptr, PositionsSpec{}, f.cache), "ApplyRope");
                       },
                       nullptr});
    }
  }
  // Multimodal RoPE (Qwen2-VL's sections) on a prompt of text, one image grid filling most
  // of the sequence, and text: the grid's tokens take rows assembled from three positions.
  const int64_t text = f.q_seq / 32;
  const int64_t grid_h = f.q_seq / 64;
  const int64_t grid_w = (f.q_seq - 4 * text) / grid_h;
  std::vector<MropeSegmentSpec> segments = {{text, 0, 0, 0, 1.0},
                                            {0, 1, grid_h, grid_w, 1.0},
                                            {f.q_seq - text - grid_h * grid_w, 0, 0, 0, 1.0}};
  const int half = static_cast<int>(f.head_dim / 2);
  const std::vector<int> sections = {half / 4, half * 3 / 8, half - half / 4 - half * 3 / 8};
  // imrope: Qwen3-VL's interleaved axes (runs of one slot), as llama.cpp names it.
  for (bool interleaved : {false, true}) {
    for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
      const size_t bytes = static_cast<size_t>(q_n) * DTypeSize(dt);
      cases.push_back({interleaved ? "imrope_neox" : "mrope_neox", size, q_shape, dt, bytes,
                       2 * bytes + rows_bytes,
                       [&f, data, dt, q_shape, segments, sections, interleaved] {
                         RopeSpec spec;
                         spec.mrope_section = sections;
                         spec.mrope_interleaved = interleaved;
                         PositionsSpec positions;
                         positions.mrope_segments = segments;
                         TensorView q{dt, q_shape, data};
                         Check(ApplyRope(spec, q, nullptr, positions, f.cache), "ApplyRope");
                       },
                       nullptr});
    }
  }
}

// ALiBi and T5 biases [bias_heads, bias_len, bias_len]: built alone, and added to scores;
// DeBERTa's bucket ids and Shaw's query term.
void AddBiasCases(KernelFixture& f, const std::string& size, std::vector<KernelCase>& cases) {
  void* data = f.tensor.data();
  const BiasGeometry geom = MakeBiasGeometry(f.bias_len, f.bias_len);
  const size_t bias_bytes =
      static_cast<size_t>(f.bias_heads * f.bias_len * f.bias_len) * sizeof(float);
  const Shape bias_shape{f.bias_heads, f.bias_len, f.bias_len};
  const Shape scores_shape{1, f.bias_heads, f.bias_len, f.bias_len};
  AlibiSpec alibi;
  alibi.num_heads = static_cast<int32_t>(f.bias_heads);
  alibi.causal = true;
  T5Spec t5;  // 32 buckets, max_distance 128, bidirectional
  const auto heads = static_cast<int32_t>(f.bias_heads);
  const float* t5_table = f.t5_table.data();
  cases.push_back({"alibi_build", size, bias_shape, DType::kFloat32, bias_bytes, bias_bytes,
                   [data, alibi, geom] {
                     Check(BuildAlibiBias(alibi, geom, static_cast<float*>(data)),
                           "BuildAlibiBias");
                   },
                   nullptr});
  cases.push_back({"t5_build", size, bias_shape, DType::kFloat32, bias_bytes, bias_bytes,
                   [data, t5, geom, heads, t5_table] {
                     Check(BuildT5Bias(t5, geom, t5_table, heads, static_cast<float*>(data)),
                           "BuildT5Bias");
                   },
                   nullptr});
  cases.push_back(
      {"alibi_add", size, scores_shape, DType::kFloat32, bias_bytes, 2 * bias_bytes,
       [data, alibi, geom, scores_shape] {
         // Zeroed by the fill below, so repeated adds of -inf stay -inf, never NaN.
         Check(AddAlibiBias(alibi, geom, TensorView{DType::kFloat32, scores_shape, data}),
               "AddAlibiBias");
       },
       nullptr});
  cases.push_back({"t5_add", size, scores_shape, DType::kFloat32, bias_bytes, 2 * bias_bytes,
                   [data, t5, geom, heads, t5_table, scores_shape] {
                     Check(AddT5Bias(t5, geom, t5_table, heads,
                                     TensorView{DType::kFloat32, scores_shape, data}),
                           "AddT5Bias");
                   },
                   nullptr});
  // DeBERTa's INT32 [q, k] buckets (HF's defaults).
  const size_t ids_bytes = static_cast<size_t>(f.bias_len * f.bias_len) * 4;
  cases.push_back({"deberta_build", size, Shape{f.bias_len, f.bias_len}, DType::kInt32, ids_bytes,
                   ids_bytes,
                   [data, geom] {
                     Check(BuildDebertaPositions(DebertaSpec{}, geom, static_cast<int32_t*>(data)),
                           "BuildDebertaPositions");
                   },
                   nullptr});
  // Shaw's query term added to scores: one dot product per (query row, reached distance),
  // gathered along the keys. The bytes are the scores read and written and the query read;
  // the dot products (up to 2k + 1 = 129 of d = 64 per row) make it compute-bound, so the
  // ratio to the memory roofline is not expected near 1.
  const Shape query_shape{1, f.bias_heads, f.bias_len, KernelFixture::kShawDim};
  const size_t query_bytes = f.shaw_query.size() * sizeof(float);
  const float* shaw_table = f.shaw_table.data();
  const float* shaw_query = f.shaw_query.data();
  cases.push_back({"shaw_query_add", size, scores_shape, DType::kFloat32, bias_bytes,
                   2 * bias_bytes + query_bytes,
                   [data, geom, shaw_table, shaw_query, query_shape, scores_shape] {
                     Check(ShawQueryTerm(ShawSpec{KernelFixture::kShawK}, geom, shaw_table,
                                         KernelFixture::kShawDim,
                                         ConstTensorView{DType::kFloat32, query_shape, shaw_query},
                                         TensorView{DType::kFloat32, scores_shape, data},
                                         /*add_to_out=*/true),
                           "ShawQueryTerm");
                   },
                   nullptr});
}

// The copies that convert, each implementation side by side: CONCAT fusion
// [nb, seq, dim/2] + pe [seq, dim/2] -> [nb, seq, dim], and a float32 table [seq, dim]
// rounded to a 16-bit dtype (GetTable's chunks).
void AddConvertCases(KernelFixture& f, const std::string& size, std::vector<KernelCase>& cases) {
  void* out = f.tensor.data();
  const void* x = f.concat_input.data();
  const float* table = f.learned->data.data();
  const int64_t half = f.dim / 2;
  const Shape in_shape{f.nb, f.seq, half}, out_shape{f.nb, f.seq, f.dim};
  const auto last = [] { return std::string(KernelImplName(LastConvertImplementation())); };
  const std::pair<const char*, KernelImpl> impls[] = {{"vector", KernelImpl::kAvx2},
                                                      {"onednn", KernelImpl::kOneDnn}};
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    const size_t out_bytes = static_cast<size_t>(f.nb * f.seq * f.dim) * DTypeSize(dt);
    const size_t moved = out_bytes + out_bytes / 2 + static_cast<size_t>(f.seq * half) * 4;
    for (auto [label, impl] : impls) {
      cases.push_back({absl::StrCat("concat_", label), size, out_shape, dt, out_bytes, moved,
                       [=] {
                         Check(ConcatEncoding(ConstTensorView{dt, in_shape, x}, table, half, 1.0f,
                                              1.0f, TensorView{dt, out_shape, out}, impl),
                               "ConcatEncoding");
                       },
                       last, /*comparison=*/true});
    }
  }
  const int64_t n = f.seq * f.dim;
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    const size_t out_bytes = static_cast<size_t>(n) * DTypeSize(dt);
    for (auto [label, impl] : impls) {
      cases.push_back({absl::StrCat("convert_", label), size, Shape{f.seq, f.dim}, dt, out_bytes,
                       out_bytes + static_cast<size_t>(n) * 4,
                       [=] { Check(ConvertFromFloat32(table, dt, out, n, impl), "Convert"); }, last,
                       /*comparison=*/true});
    }
  }
  // The check every Encode result gets (finite_kernel.h): one read of a float32 [seq, dim]
  // table of finite values, so it scans to the end.
  const size_t table_bytes = static_cast<size_t>(n) * sizeof(float);
  cases.push_back(
      {"finite_check", size, Shape{f.seq, f.dim}, DType::kFloat32, table_bytes, table_bytes,
       [=] {
         if (FirstNonFinite(DType::kFloat32, table, n) != -1) {
           Check(absl::InternalError("a finite table was found not finite"), "FirstNonFinite");
         }
       },
       nullptr, /*comparison=*/false, /*read_only=*/true});
  // The roofline's own read+write pass run as a kernel on the tensor: an A/A row whose
  // ratio is 1 but for the machine's noise between a kernel round and its roofline.
  const size_t self_bytes = static_cast<size_t>(f.nb * f.seq * f.dim) * sizeof(float);
  cases.push_back({"roofline_self", size, Shape{f.nb, f.seq, f.dim}, DType::kFloat32, self_bytes,
                   2 * self_bytes, [out, self_bytes] { Roofline::ReadWritePass(out, self_bytes); },
                   nullptr, /*comparison=*/true});
}

std::vector<KernelCase> MakeCases(KernelFixture& f, const std::string& size, KernelImpl isa) {
  std::vector<KernelCase> cases;
  AddAbsoluteCases(f, size, isa, cases);
  AddConvertCases(f, size, cases);
  AddRopeCases(f, size, cases);
  AddBiasCases(f, size, cases);
  return cases;
}

// Whether --filter (a substring of "name dtype size") keeps `c`.
bool Selected(const Options& o, const KernelCase& c) {
  return o.filter.empty() ||
         absl::StrCat(c.name, " ", DTypeLabel(c.dtype), " ", c.size).find(o.filter) !=
             std::string::npos;
}

// One series of round ratios against one roofline kind: each round's kernel GB/s over the
// roofline measured right beside it in that round.
struct RatioSeries {
  std::vector<double> ratios;
  double best_roofline = 0;
};

// The lower middle one of an even count.
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

// `prefix`ratio (the median of the rounds), ratio_best, ratio_spread (largest minus
// smallest), round_ratios and roofline_gbps (its best) for one series.
void PutSeries(const RatioSeries& s, const std::string& prefix, json& row) {
  const auto [lo, hi] = std::minmax_element(s.ratios.begin(), s.ratios.end());
  row[prefix + "roofline_gbps"] = s.best_roofline;
  row[prefix + "ratio"] = Median(s.ratios);
  row[prefix + "ratio_best"] = *hi;
  row[prefix + "ratio_spread"] = *hi - *lo;
  row[prefix + "round_ratios"] = s.ratios;
}

// One case's row: the kernel and its roofline alternate, `rounds` times (at least twice),
// the roofline taken before the kernel in odd rounds and after it in even ones, so a drift
// of the machine's bandwidth over a row does not favour either side. Every ratio is a
// round's own (kernel GB/s over the roofline of that round): the VM's bandwidth at 64 MiB
// swings 2x over seconds, and the best kernel over the best roofline paired a fast minute
// with a slow one (0.50 and 1.33 for bf16 and fp16 RoPE in one run). `ratio` is the median
// of the rounds, with the best round and the spread beside it; `ms` and `gbps` are the
// kernel's best round, `gbps_median` its median. The builds only write: beside the
// read-modify-write roofline they get a write-only one (write_*); the scans only read and
// get a read-only one (read_*). A case's `prepare` runs before each roofline pass too.
json MeasureCase(const KernelCase& c, Roofline& roofline, double budget, int rounds,
                 KernelImpl isa) {
  const bool write_only = c.moved_bytes == c.tensor_bytes && !c.read_only;
  const double moved_gb = static_cast<double>(c.moved_bytes) / 1e9;
  std::vector<double> seconds;
  RatioSeries rmw, side;
  const RooflineKind side_kind = c.read_only ? RooflineKind::kReadOnly : RooflineKind::kWriteOnly;
  const bool has_side = write_only || c.read_only;
  for (int round = 0; round < std::max(2, rounds); ++round) {
    double r = 0, w = 0;
    const auto roofs = [&] {
      r = roofline.Gbps(c.tensor_bytes, budget, RooflineKind::kReadWrite, c.prepare);
      if (has_side) w = roofline.Gbps(c.tensor_bytes, budget, side_kind, c.prepare);
    };
    if (round % 2 == 1) roofs();
    const double s = BestSeconds(c.run, budget, 3, 1000000, c.prepare);
    if (round % 2 == 0) roofs();
    seconds.push_back(s);
    rmw.best_roofline = std::max(rmw.best_roofline, r);
    rmw.ratios.push_back(moved_gb / s / r);
    if (has_side) {
      side.best_roofline = std::max(side.best_roofline, w);
      side.ratios.push_back(moved_gb / s / w);
    }
  }
  const double best_s = *std::min_element(seconds.begin(), seconds.end());
  json r{{"name", c.name},
         {"isa", KernelImplName(isa)},
         {"size", c.size},
         {"shape", ShapeString(c.shape)},
         {"dtype", DTypeLabel(c.dtype)},
         {"ms", best_s * 1e3},
         {"bytes", c.moved_bytes},
         {"gbps", moved_gb / best_s},
         {"gbps_median", moved_gb / Median(seconds)}};
  PutSeries(rmw, "", r);
  if (c.impl) r["impl"] = c.impl();
  if (c.comparison) r["comparison"] = true;
  if (has_side) PutSeries(side, c.read_only ? "read_" : "write_", r);
  return r;
}

// Every kernel case on `isa` (already forced by the caller), each against a roofline taken
// beside it.
json RunKernels(const Options& o, KernelImpl isa) {
  Roofline roofline;
  json results = json::array();
  struct Size {
    const char* label;
    int64_t nb, seq, dim, q_batch, q_seq, q_heads, head_dim, bias_heads, bias_len;
  };
  std::vector<Size> sizes = {{"small", 1, 128, 768, 1, 128, 12, 64, 12, 128}};
  if (!o.quick) sizes.push_back({"large", 8, 2048, 4096, 4, 2048, 32, 128, 16, 2048});
  for (const Size& s : sizes) {
    KernelFixture fixture(s.nb, s.seq, s.dim, s.q_batch, s.q_seq, s.q_heads, s.head_dim,
                          s.bias_heads, s.bias_len);
    const double budget = o.quick ? 0.03 : (std::string(s.label) == "large" ? 0.3 : 0.1);
    for (KernelCase& c : MakeCases(fixture, s.label, isa)) {
      if (!Selected(o, c)) continue;
      FillFloats(fixture.tensor.data(), c.dtype, c.tensor_bytes / DTypeSize(c.dtype),
                 c.name == "alibi_add" ? 0.0f : 0.25f);
      if (absl::StartsWith(c.name, "concat_")) {
        FillFloats(fixture.concat_input.data(), c.dtype,
                   fixture.nb * fixture.seq * (fixture.dim / 2), 0.25f);
      }
      // A oneDNN without a kernel here runs another implementation: no row then.
      if (absl::EndsWith(c.name, "_onednn")) {
        c.run();
        if (c.impl() != "onednn") continue;
      }
      json r = MeasureCase(c, roofline, budget, o.rounds, isa);
      if (!o.json) {
        std::fprintf(stderr,
                     "  kernel %-6s %-15s %-5s %-22s %-4s %8.3f ms %7.1f GB/s (roofline %.1f)\n",
                     KernelImplName(isa), c.name.c_str(), c.size.c_str(),
                     ShapeString(c.shape).c_str(), DTypeLabel(c.dtype), r["ms"].get<double>(),
                     r["gbps"].get<double>(), r["roofline_gbps"].get<double>());
      }
      results.push_back(std::move(r));
    }
  }
  return results;
}

// A pass in a child posenc-bench with oneDNN limited to `isa` (DNNL_MAX_CPU_ISA), so its
// binary_add runs as on a CPU whose widest ISA that is: oneDNN fixes its ISA once per
// process. Returns the child's kernel rows.
json RunChildPass(const Options& o, KernelImpl isa) {
  std::string command =
      absl::StrCat("DNNL_MAX_CPU_ISA=", isa == KernelImpl::kAvx2 ? "AVX2" : "AVX512_CORE", " ",
                   o.self_binary, " --kernels-only --json --isa=", KernelImplName(isa),
                   " --threads=", o.threads, " --rounds=", o.rounds);
  if (o.quick) absl::StrAppend(&command, " --quick");
  if (!o.filter.empty()) {
    std::string quoted;  // single-quoted for the shell
    for (char ch : o.filter) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    absl::StrAppend(&command, " --filter='", quoted, "'");
  }
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) Check(absl::InternalError("popen failed"), command);
  std::string out;
  char chunk[4096];
  for (size_t n; (n = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0;) out.append(chunk, n);
  const int rc = pclose(pipe);
  if (rc != 0) Check(absl::InternalError(absl::StrCat("exit status ", rc)), command);
  const json doc = json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.contains("kernels")) {
    Check(absl::InternalError("unparseable output"), command);
  }
  return doc["kernels"];
}

}  // namespace

json RunKernelsEveryIsa(const Options& o) {
  std::vector<KernelImpl> isas = CpuVectorIsas();
  if (!o.isa.empty()) {
    const std::optional<KernelImpl> only = ParseKernelImpl(o.isa);
    if (!only || !CpuSupports(*only) || *only == KernelImpl::kAuto ||
        *only == KernelImpl::kOneDnn) {
      Check(absl::InvalidArgumentError(absl::StrCat("--isa=", o.isa, " is not on this CPU")),
            "--isa");
    }
    isas = {*only};
  }
  json rows = json::array();
  for (KernelImpl isa : isas) {
    json pass;
    if (o.isa.empty() && isa != CpuBestIsa()) {
      pass = RunChildPass(o, isa);
    } else {
      const ScopedKernelOverride forced(isa);
      pass = RunKernels(o, isa);
    }
    for (json& row : pass) rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace posenc::bench
