#include "server/graph/laplacian.h"

#include <Spectra/SymEigsSolver.h>

#include <Eigen/Dense>
#include <Eigen/OrderingMethods>
#include <Eigen/SparseCholesky>
#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <new>
#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/kernels/threads.h"

namespace posenc {
namespace {

// Entries within this relative distance of the largest magnitude count as ties for the sign
// rule, so that entries equal in exact arithmetic do not flip signs on rounding noise.
constexpr double kSignTieTolerance = 1e-6;

// Sparse products per Chebyshev-filtered Lanczos step. Measured on a 100,000-node random
// graph (k 16): degree 8 and 16 take the same time, about 5x fewer Lanczos steps than
// degree 1; higher degrees only add products.
constexpr int kChebyshevDegree = 12;

// Connected components, numbered in order of their smallest node.
std::vector<std::vector<int32_t>> Components(const Adjacency& adj, int64_t num_nodes) {
  std::vector<std::vector<int32_t>> components;
  std::vector<char> seen(static_cast<size_t>(num_nodes), 0);
  std::vector<int32_t> stack;
  for (int32_t start = 0; start < num_nodes; ++start) {
    if (seen[start]) continue;
    std::vector<int32_t> members;
    seen[start] = 1;
    stack.push_back(start);
    while (!stack.empty()) {
      const int32_t v = stack.back();
      stack.pop_back();
      members.push_back(v);
      for (int64_t e = adj.offsets[v]; e < adj.offsets[v + 1]; ++e) {
        const int32_t w = adj.neighbors[e];
        if (!seen[w]) {
          seen[w] = 1;
          stack.push_back(w);
        }
      }
    }
    std::sort(members.begin(), members.end());
    components.push_back(std::move(members));
  }
  return components;
}

// The Laplacian of one connected component (local ids 0..size-1 in ascending global order).
struct LocalLaplacian {
  int32_t size = 0;
  std::vector<int64_t> offsets;  // off-diagonal CSR
  std::vector<int32_t> cols;
  std::vector<double> values;
  std::vector<double> diag;
  double spectral_bound = 0;  // >= the largest eigenvalue (Gershgorin)
  // The kernel threads a product splits its rows across (the solve's KernelThreadLease).
  // Each row is summed by one thread in the same order: the result does not depend on it.
  int threads = 1;

  // store(i, (L x)_i) for every row i, each row by one thread, in one pass: the operators
  // fold their vector updates into the product's pass instead of passes of their own.
  template <typename Store>
  void MultiplyEach(const double* x, const Store& store) const {
    ParallelFor(threads, size, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        double sum = diag[i] * x[i];
        for (int64_t e = offsets[i]; e < offsets[i + 1]; ++e) sum += values[e] * x[cols[e]];
        store(i, sum);
      }
    });
  }

  // y = L x.
  void Multiply(const double* x, double* y) const {
    MultiplyEach(x, [y](int64_t i, double lx) { y[i] = lx; });
  }

  // What one product reads, for KernelThreadLease: the off-diagonal entries and the rows.
  size_t ProductWorkBytes() const {
    return WorkBytes(static_cast<int64_t>(cols.size()) * 3 + int64_t{size} * 3);
  }
};

LocalLaplacian BuildLocalLaplacian(const Adjacency& adj, const std::vector<int32_t>& members,
                                   bool normalized, std::vector<int32_t>& local_id) {
  LocalLaplacian lap;
  lap.size = static_cast<int32_t>(members.size());
  for (int32_t i = 0; i < lap.size; ++i) local_id[members[i]] = i;
  lap.offsets.assign(members.size() + 1, 0);
  lap.diag.resize(members.size());
  for (int32_t i = 0; i < lap.size; ++i) {
    lap.offsets[i + 1] = lap.offsets[i] + adj.Degree(members[i]);
  }
  lap.cols.resize(static_cast<size_t>(lap.offsets.back()));
  lap.values.resize(lap.cols.size());
  double bound = 0;
  for (int32_t i = 0; i < lap.size; ++i) {
    const int32_t v = members[i];
    const double dv = static_cast<double>(adj.Degree(v));
    lap.diag[i] = normalized ? (dv > 0 ? 1.0 : 0.0) : dv;
    double row_abs = 0;
    int64_t out = lap.offsets[i];
    for (int64_t e = adj.offsets[v]; e < adj.offsets[v + 1]; ++e, ++out) {
      const int32_t w = adj.neighbors[e];
      lap.cols[out] = local_id[w];
      lap.values[out] =
          normalized ? -1.0 / std::sqrt(dv * static_cast<double>(adj.Degree(w))) : -1.0;
      row_abs += std::fabs(lap.values[out]);
    }
    bound = std::max(bound, lap.diag[i] + row_abs);
  }
  lap.spectral_bound = bound;
  return lap;
}

// The exact null vector of a connected component: constant, or D^1/2 1 when normalized.
Eigen::VectorXd NullVector(const LocalLaplacian& lap, bool normalized) {
  Eigen::VectorXd u(lap.size);
  if (lap.size == 1) {
    u(0) = 1.0;
    return u;
  }
  for (int32_t i = 0; i < lap.size; ++i) {
    const double degree = static_cast<double>(lap.offsets[i + 1] - lap.offsets[i]);
    u(i) = normalized ? std::sqrt(degree) : 1.0;
  }
  return u / u.norm();
}

struct EigenPair {
  double value;
  int32_t component;
  int32_t rank;            // position within its component's spectrum
  Eigen::VectorXd vector;  // local to the component
};

absl::Status DenseSmallest(const LocalLaplacian& lap, int32_t count, int32_t component,
                           std::vector<EigenPair>& out) {
  Eigen::MatrixXd dense = Eigen::MatrixXd::Zero(lap.size, lap.size);
  for (int32_t i = 0; i < lap.size; ++i) {
    dense(i, i) = lap.diag[i];
    for (int64_t e = lap.offsets[i]; e < lap.offsets[i + 1]; ++e) {
      dense(i, lap.cols[e]) = lap.values[e];
    }
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(dense);
  if (solver.info() != Eigen::Success) {
    return absl::InternalError(
        absl::StrCat("dense eigensolver failed on a component of ", lap.size, " nodes"));
  }
  // Index 0 is the component's null vector, added exactly by the caller.
  for (int32_t r = 1; r <= count; ++r) {
    out.push_back({solver.eigenvalues()(r), component, r, solver.eigenvectors().col(r)});
  }
  return absl::OkStatus();
}

// Operators for Spectra, all restricted to the complement of the null vector u so that the
// Krylov space is not spent on the known eigenvalue 0.
// Thrown from inside Spectra's iterations when the caller has gone; caught at the edge.
struct SolveCancelled {};

// Every operator product passes through Project, so it is where a cancelled solve stops.
class ProjectedOp {
 public:
  using Scalar = double;
  ProjectedOp(const Eigen::VectorXd& null_vector, const CancelCheck& cancelled)
      : u_(null_vector), cancelled_(cancelled) {}
  Eigen::Index rows() const { return u_.size(); }
  Eigen::Index cols() const { return u_.size(); }

 protected:
  void Project(Eigen::Ref<Eigen::VectorXd> x) const {
    if (IsCancelled(cancelled_)) throw SolveCancelled{};
    x -= u_.dot(x) * u_;
  }
  const Eigen::VectorXd& u_;
  const CancelCheck& cancelled_;
};

// y = P (L + sigma I)^-1 P x: the smallest eigenvalues of L become the largest.
class ShiftInvertOp : public ProjectedOp {
 public:
  ShiftInvertOp(const Eigen::SimplicialLDLT<Eigen::SparseMatrix<double>>& factor,
                const Eigen::VectorXd& null_vector, const CancelCheck& cancelled)
      : ProjectedOp(null_vector, cancelled), factor_(factor), tmp_(null_vector.size()) {}
  void perform_op(const double* x_in, double* y_out) const {
    tmp_ = Eigen::Map<const Eigen::VectorXd>(x_in, rows());
    Project(tmp_);
    Eigen::Map<Eigen::VectorXd> y(y_out, rows());
    y = factor_.solve(tmp_);
    Project(y);
  }

 private:
  const Eigen::SimplicialLDLT<Eigen::SparseMatrix<double>>& factor_;
  mutable Eigen::VectorXd tmp_;
};

// y = P (c I - L) P x with c >= lambda_max: the smallest eigenvalues of L become the largest.
class ShiftedOp : public ProjectedOp {
 public:
  ShiftedOp(const LocalLaplacian& lap, const Eigen::VectorXd& null_vector,
            const CancelCheck& cancelled)
      : ProjectedOp(null_vector, cancelled), lap_(lap), tmp_(null_vector.size()) {}
  void perform_op(const double* x_in, double* y_out) const {
    tmp_ = Eigen::Map<const Eigen::VectorXd>(x_in, rows());
    Project(tmp_);
    const double c = lap_.spectral_bound;
    const double* t = tmp_.data();
    lap_.MultiplyEach(t, [&](int64_t i, double lx) { y_out[i] = c * t[i] - lx; });
    Eigen::Map<Eigen::VectorXd> y(y_out, rows());
    Project(y);
  }

 private:
  const LocalLaplacian& lap_;
  mutable Eigen::VectorXd tmp_;
};

// y = P T_m((c - L) / e) P x with c = (a + b) / 2, e = (b - a) / 2: a Chebyshev filter that
// stays within [-1, 1] on [a, b] and grows fast below a. With a above the wanted eigenvalues
// and b above the spectrum, they become the largest eigenvalues by a wide margin, so Lanczos
// needs far fewer (expensive, fully re-orthogonalised) steps than on cI - L; each step costs
// m sparse products instead.
class ChebyshevFilterOp : public ProjectedOp {
 public:
  ChebyshevFilterOp(const LocalLaplacian& lap, const Eigen::VectorXd& null_vector, double a,
                    double b, int degree, const CancelCheck& cancelled)
      : ProjectedOp(null_vector, cancelled), lap_(lap), center_((a + b) / 2),
        half_width_((b - a) / 2), degree_(degree), prev_(null_vector.size()),
        cur_(null_vector.size()), next_(null_vector.size()) {}
  void perform_op(const double* x_in, double* y_out) const {
    prev_ = Eigen::Map<const Eigen::VectorXd>(x_in, rows());
    Project(prev_);
    // T_1 = t(L) x, T_{j+1} = 2 t(L) T_j - T_{j-1}, t(L) = (center - L) / half_width; each
    // step one pass (MultiplyEach).
    const double center = center_, half_width = half_width_, twice = 2.0 / half_width_;
    {
      const double* p = prev_.data();
      double* c = cur_.data();
      lap_.MultiplyEach(p, [&](int64_t i, double lx) { c[i] = (center * p[i] - lx) / half_width; });
    }
    for (int j = 1; j < degree_; ++j) {
      const double* p = prev_.data();
      const double* c = cur_.data();
      double* n = next_.data();
      lap_.MultiplyEach(c,
                        [&](int64_t i, double lx) { n[i] = twice * (center * c[i] - lx) - p[i]; });
      std::swap(prev_, cur_);
      std::swap(cur_, next_);
    }
    Eigen::Map<Eigen::VectorXd> y(y_out, rows());
    y = cur_;
    Project(y);
  }

 private:
  const LocalLaplacian& lap_;
  const double center_, half_width_;
  const int degree_;
  mutable Eigen::VectorXd prev_, cur_, next_;
};

// A few Lanczos steps on P L P (start vector deterministic). Returns {a, b}: a = the
// (count+1)-th smallest Ritz value, >= lambda_{count+1} by Cauchy interlacing; b = an upper
// bound of the spectrum (the largest Ritz value plus its residual bound, capped by
// Gershgorin).
std::pair<double, double> EstimateFilterInterval(const LocalLaplacian& lap,
                                                 const Eigen::VectorXd& u, int32_t count) {
  const int32_t steps = std::min<int32_t>(lap.size - 1, 2 * count + 40);
  Eigen::MatrixXd basis(lap.size, steps);
  Eigen::VectorXd alpha(steps), beta(steps);
  Eigen::VectorXd v(lap.size), w(lap.size);
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (int32_t i = 0; i < lap.size; ++i) v(i) = uniform(rng);
  v -= u.dot(v) * u;
  v.normalize();
  int32_t done = 0;
  for (int32_t j = 0; j < steps; ++j) {
    basis.col(j) = v;
    lap.Multiply(v.data(), w.data());
    w -= u.dot(w) * u;
    alpha(j) = v.dot(w);
    // Full re-orthogonalisation, twice: the basis is small and this keeps Ritz values clean.
    for (int pass = 0; pass < 2; ++pass) {
      w -= basis.leftCols(j + 1) * (basis.leftCols(j + 1).transpose() * w);
    }
    beta(j) = w.norm();
    done = j + 1;
    if (beta(j) < 1e-12 * lap.spectral_bound) break;  // invariant subspace found
    v = w / beta(j);
  }
  Eigen::MatrixXd tri = Eigen::MatrixXd::Zero(done, done);
  for (int32_t j = 0; j < done; ++j) {
    tri(j, j) = alpha(j);
    if (j + 1 < done) tri(j, j + 1) = tri(j + 1, j) = beta(j);
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> ritz(tri);
  const Eigen::VectorXd& theta = ritz.eigenvalues();
  const double a = theta(std::min<int32_t>(count, done - 1));
  const double top_residual = std::fabs(beta(done - 1) * ritz.eigenvectors()(done - 1, done - 1));
  const double b = std::min(lap.spectral_bound, 1.01 * (theta(done - 1) + top_residual));
  return {a, b};
}

Eigen::SparseMatrix<double> ShiftedSparse(const LocalLaplacian& lap, double sigma) {
  std::vector<Eigen::Triplet<double>> entries;
  entries.reserve(lap.cols.size() + static_cast<size_t>(lap.size));
  for (int32_t i = 0; i < lap.size; ++i) {
    entries.emplace_back(i, i, lap.diag[i] + sigma);
    for (int64_t e = lap.offsets[i]; e < lap.offsets[i + 1]; ++e) {
      entries.emplace_back(i, lap.cols[e], lap.values[e]);
    }
  }
  Eigen::SparseMatrix<double> m(lap.size, lap.size);
  m.setFromTriplets(entries.begin(), entries.end());
  return m;
}

// Whether a sparse LDL^T of `m` under the AMD ordering has at most `budget` off-diagonal
// entries. The elimination-tree count (Davis' ldl_symbolic) stops as soon as it passes the
// budget, so graphs with catastrophic fill cost about budget steps and no memory.
bool FactorFitsBudget(const Eigen::SparseMatrix<double>& m, int64_t budget) {
  const int32_t n = static_cast<int32_t>(m.rows());
  Eigen::PermutationMatrix<Eigen::Dynamic, Eigen::Dynamic, int> old_of_new;
  Eigen::AMDOrdering<int> amd;
  amd(m, old_of_new);
  std::vector<int32_t> new_of_old(n);
  for (int32_t k = 0; k < n; ++k) new_of_old[old_of_new.indices()(k)] = k;
  std::vector<int32_t> parent(n, -1), flag(n, -1);
  int64_t count = 0;
  for (int32_t k = 0; k < n; ++k) {
    flag[k] = k;
    const int32_t old = old_of_new.indices()(k);
    for (Eigen::SparseMatrix<double>::InnerIterator it(m, old); it; ++it) {
      int32_t i = new_of_old[it.index()];
      if (i >= k) continue;
      for (; flag[i] != k; i = parent[i]) {
        if (parent[i] == -1) parent[i] = k;
        ++count;
        flag[i] = k;
      }
    }
    if (count > budget) return false;
  }
  return true;
}

template <typename Op>
absl::Status RunLanczos(Op& op, const LocalLaplacian& lap, int32_t count, int32_t ncv, int maxit,
                        int32_t component, std::vector<EigenPair>& out) {
  Spectra::SymEigsSolver<Op> solver(op, count, ncv);
  solver.init();
  solver.compute(Spectra::SortRule::LargestAlge, maxit, 1e-10);
  if (solver.info() != Spectra::CompInfo::Successful) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the Lanczos eigensolver did not converge within ", maxit,
        " restarts for a connected component of ", lap.size, " nodes (k ", count, ")"));
  }
  const Eigen::MatrixXd vectors = solver.eigenvectors(count);
  Eigen::VectorXd lv(lap.size);
  for (int32_t r = 0; r < count; ++r) {
    const Eigen::VectorXd v = vectors.col(r).normalized();
    lap.Multiply(v.data(), lv.data());
    // The Rayleigh quotient is accurate to the square of the vector's error.
    out.push_back({v.dot(lv), component, r + 1, v});
  }
  return absl::OkStatus();
}

absl::Status SparseSmallest(const LocalLaplacian& lap, const Eigen::VectorXd& null_vector,
                            int32_t count, int32_t component, const GraphLimits& limits,
                            const CancelCheck& cancelled, std::vector<EigenPair>& out) {
  const int32_t ncv_floor = count + 32;
  const int32_t ncv = std::min<int32_t>(lap.size - 1, std::max(2 * count + 1, ncv_floor));
  if (static_cast<double>(ncv) * lap.size * sizeof(double) >
      static_cast<double>(limits.max_solver_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("k is ", count, " for a connected component of ", lap.size,
                     " nodes; the Lanczos basis would need ", ncv, " x ", lap.size,
                     " doubles, over the solver limit of ", limits.max_solver_bytes, " bytes"));
  }
  // A shift well below the smallest non-zero eigenvalue keeps the wanted end of the spectrum
  // spread out after inversion, while L + sigma I stays positive definite.
  const double sigma = 1e-9 * lap.spectral_bound;
  Eigen::SparseMatrix<double> shifted = ShiftedSparse(lap, sigma);
  const int64_t budget =
      static_cast<int64_t>(limits.max_factor_fill * static_cast<double>(shifted.nonZeros()));
  if (FactorFitsBudget(shifted, budget)) {
    Eigen::SimplicialLDLT<Eigen::SparseMatrix<double>> factor(shifted);
    if (factor.info() == Eigen::Success) {
      ShiftInvertOp op(factor, null_vector, cancelled);
      return RunLanczos(op, lap, count, ncv, 1000, component, out);
    }
  }
  // Expander-like graph: Chebyshev-filtered Lanczos, checked; plain cI - L if the check fails.
  const auto [a, b] = EstimateFilterInterval(lap, null_vector, count);
  if (a > 0 && b > a) {
    ChebyshevFilterOp filter(lap, null_vector, a, b, kChebyshevDegree, cancelled);
    std::vector<EigenPair> filtered;
    const int32_t filter_ncv = std::min<int32_t>(lap.size - 1, 2 * count + 8);
    absl::Status status = RunLanczos(filter, lap, count, filter_ncv, 1000, component, filtered);
    // The filter ranks eigenvalues below a correctly; anything at or above a means it did not.
    const bool below_cutoff =
        status.ok() && std::all_of(filtered.begin(), filtered.end(),
                                   [a = a](const EigenPair& p) { return p.value < a; });
    if (below_cutoff) {
      for (EigenPair& p : filtered) out.push_back(std::move(p));
      return absl::OkStatus();
    }
  }
  ShiftedOp op(lap, null_vector, cancelled);
  return RunLanczos(op, lap, count, ncv, 20000, component, out);
}

absl::Status ValidateGraph(const GraphSpec& spec, const GraphLimits& limits) {
  RETURN_IF_ERROR(ValidateNodesAndEdges(spec.num_nodes, spec.edges, limits));
  if (spec.k < 1) {
    return absl::InvalidArgumentError(absl::StrCat("k is ", spec.k, "; it must be >= 1"));
  }
  if (spec.k > limits.max_k) {
    return absl::ResourceExhaustedError(
        absl::StrCat("k is ", spec.k, "; this server accepts at most ", limits.max_k));
  }
  if (spec.num_nodes * spec.k > limits.max_output_elements) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "num_nodes * k is ", spec.num_nodes, " * ", spec.k, " = ", spec.num_nodes * spec.k,
        "; this server returns at most ", limits.max_output_elements, " elements"));
  }
  return absl::OkStatus();
}

void FixSign(Eigen::VectorXd& v) {
  const double largest = v.cwiseAbs().maxCoeff();
  for (Eigen::Index i = 0; i < v.size(); ++i) {
    if (std::fabs(v(i)) >= largest * (1 - kSignTieTolerance)) {
      if (v(i) < 0) v = -v;
      return;
    }
  }
}

absl::StatusOr<GraphEncoding> Encode(const GraphSpec& spec, const GraphLimits& limits,
                                     const CancelCheck& cancelled) {
  RETURN_IF_ERROR(ValidateGraph(spec, limits));
  const Adjacency adj = BuildAdjacency(spec.num_nodes, spec.edges);
  const std::vector<std::vector<int32_t>> components = Components(adj, spec.num_nodes);
  const int64_t num_components = static_cast<int64_t>(components.size());
  // Every component contributes one exact zero; the k + 1 smallest eigenvalues overall need
  // at most k + 1 - num_components non-zero ones from any single component.
  const int64_t wanted = std::min<int64_t>(spec.k + 1, spec.num_nodes);
  const int64_t nonzero_wanted = std::max<int64_t>(0, wanted - num_components);

  std::vector<EigenPair> pairs;
  std::vector<int32_t> local_id(static_cast<size_t>(spec.num_nodes), -1);
  // With no non-zero eigenvalue wanted, only the first `wanted` components' null vectors
  // can be used.
  const int64_t components_needed =
      nonzero_wanted > 0 ? num_components : std::min(num_components, wanted);
  for (int32_t c = 0; c < components_needed; ++c) {
    if (IsCancelled(cancelled)) throw SolveCancelled{};
    const std::vector<int32_t>& members = components[c];
    LocalLaplacian lap = BuildLocalLaplacian(adj, members, spec.normalized, local_id);
    Eigen::VectorXd null_vector = NullVector(lap, spec.normalized);
    pairs.push_back({0.0, c, 0, null_vector});
    const int32_t count = static_cast<int32_t>(std::min<int64_t>(nonzero_wanted, lap.size - 1));
    if (count == 0) continue;
    // Spectra needs room for count < ncv < size; tiny components go dense whatever the knob.
    const bool dense = lap.size <= limits.dense_max_nodes || lap.size < 2 * count + 8;
    if (dense) {
      RETURN_IF_ERROR(DenseSmallest(lap, count, c, pairs));
    } else {
      // The sparse products (Chebyshev filter, cI - L) split their rows across the kernel
      // threads when one product is worth it; the factor's triangular solves stay on one.
      const KernelThreadLease lease(lap.ProductWorkBytes());
      lap.threads = lease.threads();
      RETURN_IF_ERROR(SparseSmallest(lap, null_vector, count, c, limits, cancelled, pairs));
    }
  }
  std::stable_sort(pairs.begin(), pairs.end(), [](const EigenPair& a, const EigenPair& b) {
    if (a.value != b.value) return a.value < b.value;
    if (a.component != b.component) return a.component < b.component;
    return a.rank < b.rank;
  });

  GraphEncoding enc;
  enc.num_nodes = spec.num_nodes;
  enc.k = spec.k;
  enc.vectors.assign(static_cast<size_t>(spec.num_nodes * spec.k), 0.0f);
  const int64_t used = std::min<int64_t>(spec.k, static_cast<int64_t>(pairs.size()) - 1);
  for (int64_t col = 0; col < used; ++col) {
    EigenPair& p = pairs[col + 1];  // pairs[0] is the trivial eigenvalue
    FixSign(p.vector);
    const std::vector<int32_t>& members = components[p.component];
    for (size_t i = 0; i < members.size(); ++i) {
      enc.vectors[members[i] * spec.k + col] = static_cast<float>(p.vector(i));
    }
    enc.eigenvalues.push_back(p.value);
  }
  return enc;
}

}  // namespace

absl::StatusOr<GraphEncoding> ComputeLaplacianEncoding(const GraphSpec& spec,
                                                       const GraphLimits& limits,
                                                       const CancelCheck& cancelled) {
  // Eigen, Spectra and the standard containers report failure by throwing; none of it may
  // cross into the service.
  try {
    return Encode(spec, limits, cancelled);
  } catch (const SolveCancelled&) {
    return absl::CancelledError("the Laplacian solve stopped: the caller has gone");
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of memory computing the Laplacian encoding of ", spec.num_nodes, " nodes"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("Laplacian eigensolver failed: ", e.what()));
  }
}

}  // namespace posenc
