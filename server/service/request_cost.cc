#include "server/service/request_cost.h"

#include <algorithm>
#include <initializer_list>
#include <limits>

#include "absl/strings/str_cat.h"

namespace posenc {
namespace {

// Sums and products of sizes that refuse, rather than wrap, past 2^63.
class Bytes {
 public:
  explicit Bytes(uint64_t v = 0) : v_(v) {}
  static Bytes Product(std::initializer_list<int64_t> factors) {
    Bytes b(1);
    for (int64_t f : factors) b = b * Bytes(static_cast<uint64_t>(std::max<int64_t>(f, 0)));
    return b;
  }
  Bytes operator*(Bytes o) const {
    Bytes r;
    r.overflow_ = overflow_ || o.overflow_ || __builtin_mul_overflow(v_, o.v_, &r.v_) ||
                  r.v_ > kMax;
    return r;
  }
  Bytes operator+(Bytes o) const {
    Bytes r;
    r.overflow_ = overflow_ || o.overflow_ || __builtin_add_overflow(v_, o.v_, &r.v_) ||
                  r.v_ > kMax;
    return r;
  }
  // `what` names the sizes that multiplied, for the error.
  absl::StatusOr<CallCost> Cost(Lane lane, absl::string_view what) const {
    if (overflow_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, " multiply past 2^62 bytes; no server can hold that"));
    }
    return CallCost{v_, v_ <= kCheapCallBytes ? lane : Lane::kBulk};
  }

 private:
  static constexpr uint64_t kMax = uint64_t{1} << 62;
  uint64_t v_ = 0;
  bool overflow_ = false;
};

bool IsSetRef(const v1::SharedMemoryRef& ref) { return !ref.region().empty(); }

int64_t ElementSize(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT16:
    case v1::BFLOAT16: return 2;
    case v1::INT64: return 8;
    default: return 4;
  }
}

// a + b for non-negative sizes, pinned at INT64_MAX (which Bytes::Product then refuses).
int64_t SizeSum(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(std::max<int64_t>(a, 0), std::max<int64_t>(b, 0), &sum)
             ? std::numeric_limits<int64_t>::max()
             : sum;
}

int64_t Dim(const v1::Tensor& t, int i) {  // i < 0 counts from the end; 0 when absent
  const int n = t.shape_size();
  const int at = i < 0 ? n + i : i;
  return at >= 0 && at < n ? t.shape(at) : 0;
}

// Tokens (everything but the last axis) of a tensor.
int64_t Rows(const v1::Tensor& t) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < t.shape_size(); ++i) {
    if (t.shape(i) <= 0 || __builtin_mul_overflow(rows, t.shape(i), &rows)) return 0;
  }
  return t.shape_size() > 0 ? rows : 0;
}

struct Fusing {
  bool concat = false;
  int64_t pe_dim = 0;
};

Fusing FusingOf(const v1::EncodeRequest& r, int64_t d_model) {
  Fusing f;
  if (r.has_sinusoidal()) {
    f.concat = r.sinusoidal().fusion() == v1::CONCAT;
    f.pe_dim = r.sinusoidal().has_pe_dim() ? r.sinusoidal().pe_dim() : d_model;
  } else if (r.has_learned()) {
    f.concat = r.learned().fusion() == v1::CONCAT;
    f.pe_dim = d_model;  // a learned table has its own width, at most the largest table
  }
  if (!f.concat) f.pe_dim = d_model;
  return f;
}

// Tensors by shared-memory reference cost the server no memory, but their size is work:
// a large one goes to the bulk lane. An encode or bias whose bytes and shared-memory bytes
// are small runs inline.
absl::StatusOr<CallCost> WithShmWork(absl::StatusOr<CallCost> cost, uint64_t shm_bytes) {
  if (!cost.ok()) return cost;
  if (shm_bytes > kCheapCallBytes) cost->lane = Lane::kBulk;
  cost->run_inline = cost->lane == Lane::kCheap && shm_bytes <= kInlineCallBytes &&
                     cost->bytes <= kInlineCallBytes - shm_bytes;
  return cost;
}

absl::StatusOr<CallCost> InMemoryCost(const v1::EncodeRequest& r);

}  // namespace

absl::StatusOr<CallCost> CostOf(const v1::EncodeRequest& r) {
  return WithShmWork(InMemoryCost(r), r.input().shm().byte_size() + r.key().shm().byte_size());
}

namespace {

absl::StatusOr<CallCost> InMemoryCost(const v1::EncodeRequest& r) {
  // The tensors arrived with the request; in-place schemes hand the same buffers to the
  // response, whose serialization makes one more copy.
  const Bytes in(r.input().data().size() + r.key().data().size());
  const int64_t rows = Rows(r.input()), d = Dim(r.input(), -1);
  const int64_t elem = ElementSize(r.input().dtype());
  if (r.has_rope()) {
    // cos/sin for every token's angles, at most one pair of rows per token.
    return (in + in + Bytes::Product({rows, d, 8})).Cost(Lane::kCheap, "input.shape");
  }
  const Fusing f = FusingOf(r, d);
  const int64_t levels = r.has_hierarchical() ? std::max(1, r.hierarchical().levels_size()) : 1;
  // Encoding rows for each token (the worst case, when no cached table slice serves).
  const Bytes scratch = Bytes::Product({levels, rows, f.pe_dim, 4});
  if (!f.concat) return (in + in + scratch).Cost(Lane::kCheap, "input.shape and the levels");
  const Bytes out = Bytes::Product({rows, SizeSum(d, f.pe_dim), elem});
  return (in + out + out + scratch).Cost(Lane::kCheap, "input.shape and pe_dim");
}

}  // namespace

absl::StatusOr<CallCost> CostOf(const v1::BiasRequest& r) {
  if (r.has_scores()) {
    const Bytes in(r.scores().data().size());
    return WithShmWork((in + in).Cost(Lane::kCheap, "scores"), r.scores().shm().byte_size());
  }
  const int64_t heads = r.has_alibi() ? r.alibi().num_heads() : 0;
  // A T5 bias takes its head count from the table; 1024 heads bounds any sane table.
  const int64_t t5_heads = r.has_t5() && !r.t5().table().empty() ? 1024 : 1;
  const Bytes out = Bytes::Product(
      {r.has_alibi() ? heads : t5_heads, r.query_length(), r.key_length(), 4});
  if (IsSetRef(r.output_shm())) {  // built straight into the client's slice
    return WithShmWork(Bytes().Cost(Lane::kCheap, "the bias"), r.output_shm().byte_size());
  }
  return WithShmWork((out + out).Cost(Lane::kCheap, "the bias [heads, query_length, key_length]"),
                     0);
}

absl::StatusOr<CallCost> CostOf(const v1::GraphRequest& r) {
  const int64_t n = r.num_nodes(), k = std::max(r.k(), 0);
  const int64_t d = r.has_input() ? Dim(r.input(), -1) : 0;
  const int64_t elem = r.has_input() ? ElementSize(r.input().dtype()) : 4;
  const Bytes in(r.input().data().size());
  const Bytes out = Bytes::Product({n, SizeSum(d, k), elem});
  // The Lanczos basis (about n * (2k + 34) doubles), the sparse Laplacian and its factor,
  // and the dense solver's n^2 blocks for components of up to 500 nodes.
  const Bytes solver = Bytes::Product({n, 2 * k + 34, 8}) +
                       Bytes::Product({static_cast<int64_t>(r.edges_size()), 48}) +
                       Bytes::Product({std::min<int64_t>(n, 500), 500, 24});
  const Lane lane = n <= kCheapGraphNodes ? Lane::kCheap : Lane::kBulk;
  return (in + out + out + solver).Cost(lane, "num_nodes, k and the input width");
}

absl::StatusOr<CallCost> CostOf(const v1::TableRequest& r, int64_t rows_per_chunk) {
  const int64_t elem = r.dtype() == v1::FLOAT16 || r.dtype() == v1::BFLOAT16 ? 2 : 4;
  const Bytes rows = Bytes::Product({rows_per_chunk, r.dim(), 4});  // float32 rows
  const Bytes chunk = Bytes::Product({rows_per_chunk, r.dim(), elem});
  return (rows + chunk + chunk).Cost(Lane::kCheap, "rows_per_chunk x dim");
}

}  // namespace posenc
