#include "server/graph/random_walk.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/kernels/threads.h"

namespace posenc {
namespace {

absl::Status ValidateRandomWalk(const RandomWalkSpec& spec, const GraphLimits& limits) {
  RETURN_IF_ERROR(ValidateNodesAndEdges(spec.num_nodes, spec.edges, limits));
  if (spec.walk_length < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("walk_length is ", spec.walk_length, "; it must be >= 1"));
  }
  if (spec.walk_length > limits.max_walk_length) {
    return absl::ResourceExhaustedError(absl::StrCat("walk_length is ", spec.walk_length,
                                                     "; this server accepts at most ",
                                                     limits.max_walk_length));
  }
  if (spec.num_nodes * spec.walk_length > limits.max_output_elements) {
    return absl::ResourceExhaustedError(
        absl::StrCat("num_nodes * walk_length is ", spec.num_nodes, " * ", spec.walk_length,
                     "; this server returns at most ", limits.max_output_elements, " elements"));
  }
  return absl::OkStatus();
}

// One node's ball: its nodes in BFS order (local id = position), their hop distance, the
// ball-internal neighbours in local ids, and 1 / (full degree) per node. Reused across
// nodes; `local_of` maps global ids to local ones and is reset after each ball.
struct Ball {
  std::vector<int32_t> nodes;
  std::vector<int32_t> hops;
  std::vector<int64_t> offsets;
  std::vector<int32_t> neighbors;
  std::vector<double> inv_degree;
  std::vector<int32_t> local_of;  // num_nodes, -1 outside the ball
  // count_within[h]: how many ball nodes are within h hops (a prefix of `nodes`).
  std::vector<int64_t> count_within;
};

void BuildBall(const Adjacency& adj, int32_t root, int32_t radius, Ball& ball) {
  ball.nodes.assign(1, root);
  ball.hops.assign(1, 0);
  ball.local_of[root] = 0;
  for (size_t head = 0; head < ball.nodes.size(); ++head) {
    const int32_t v = ball.nodes[head];
    if (ball.hops[head] == radius) continue;
    for (int64_t e = adj.offsets[v]; e < adj.offsets[v + 1]; ++e) {
      const int32_t w = adj.neighbors[e];
      if (ball.local_of[w] >= 0) continue;
      ball.local_of[w] = static_cast<int32_t>(ball.nodes.size());
      ball.nodes.push_back(w);
      ball.hops.push_back(ball.hops[head] + 1);
    }
  }
  const size_t size = ball.nodes.size();
  ball.offsets.assign(size + 1, 0);
  ball.neighbors.clear();
  ball.inv_degree.resize(size);
  for (size_t u = 0; u < size; ++u) {
    const int32_t v = ball.nodes[u];
    for (int64_t e = adj.offsets[v]; e < adj.offsets[v + 1]; ++e) {
      const int32_t local = ball.local_of[adj.neighbors[e]];
      if (local >= 0) ball.neighbors.push_back(local);
    }
    ball.offsets[u + 1] = static_cast<int64_t>(ball.neighbors.size());
    ball.inv_degree[u] = 1.0 / static_cast<double>(adj.Degree(v));
  }
  ball.count_within.assign(static_cast<size_t>(radius) + 1, 0);
  for (int32_t h : ball.hops) ++ball.count_within[h];
  for (int32_t h = 1; h <= radius; ++h) ball.count_within[h] += ball.count_within[h - 1];
}

// The landing probabilities of one root (out[s - 1] for s in [1, steps]): x_s = x_{s-1} P
// restricted to the ball. At step s only nodes within min(s, steps - s) hops can still carry
// mass back to the root in time, so the ball's radius is steps / 2.
void WalkFromRoot(const Ball& ball, int32_t steps, std::vector<double>& prev,
                  std::vector<double>& cur, float* out) {
  const int32_t radius = steps / 2;
  const size_t size = ball.nodes.size();
  prev.assign(size, 0.0);
  cur.assign(size, 0.0);
  prev[0] = 1.0;
  int64_t prev_count = 1;  // x_0 = e_root
  for (int32_t s = 1; s <= steps; ++s) {
    const int32_t reach = std::min(s, steps - s);
    const int64_t count = ball.count_within[std::min(reach, radius)];
    for (int64_t v = 0; v < count; ++v) {  // ball node
      double acc = 0.0;
      for (int64_t e = ball.offsets[v]; e < ball.offsets[v + 1]; ++e) {
        const int32_t u = ball.neighbors[e];
        if (u < prev_count) acc += prev[u] * ball.inv_degree[u];
      }
      cur[v] = acc;
    }
    out[s - 1] = static_cast<float>(cur[0]);
    std::swap(prev, cur);
    prev_count = count;
  }
}

// What the threads of one call share: the work counted so far over all of them, and why
// they stopped early (the first reason any thread found).
struct WalkProgress {
  std::atomic<int64_t> work{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  absl::Status status;  // guarded by mu

  void Fail(absl::Status why) {
    const std::lock_guard<std::mutex> lock(mu);
    if (status.ok()) status = std::move(why);
    stop.store(true, std::memory_order_relaxed);
  }
};

// Roots [first, last) of one thread: each its own ball and walk. Every root's work is added
// to the shared count before the walk, so the call fails with RESOURCE_EXHAUSTED exactly when
// the total over all roots passes max_work, however the roots are split.
void WalkRoots(const Adjacency& adj, const RandomWalkSpec& spec, const GraphLimits& limits,
               const CancelCheck& cancelled, int64_t first, int64_t last, WalkProgress& progress,
               float* out) {
  const int32_t steps = spec.walk_length;
  Ball ball;
  ball.local_of.assign(static_cast<size_t>(spec.num_nodes), -1);
  std::vector<double> prev, cur;
  for (int64_t root = first; root < last; ++root) {
    if (progress.stop.load(std::memory_order_relaxed)) return;
    if ((root - first) % 64 == 0 && IsCancelled(cancelled)) {
      progress.Fail(absl::CancelledError("the random-walk encoding stopped: the caller has gone"));
      return;
    }
    if (adj.Degree(static_cast<int32_t>(root)) == 0) continue;  // isolated: P's row is zero
    BuildBall(adj, static_cast<int32_t>(root), steps / 2, ball);
    const int64_t mine =
        static_cast<int64_t>(ball.neighbors.size() + ball.nodes.size()) * (steps + 1);
    if (progress.work.fetch_add(mine) + mine > limits.max_work) {
      progress.Fail(absl::ResourceExhaustedError(absl::StrCat(
          "graph_random_walk would take more than ", limits.max_work,
          " multiply-adds (walk_length times the edges within walk_length/2 hops of each "
          "node, summed over nodes; reached at node ",
          root, " of ", spec.num_nodes, "); use a shorter walk_length or a smaller graph")));
      return;
    }
    WalkFromRoot(ball, steps, prev, cur, out + root * steps);
    for (int32_t v : ball.nodes) ball.local_of[v] = -1;
  }
}

}  // namespace

absl::StatusOr<std::vector<float>> ComputeRandomWalkEncoding(const RandomWalkSpec& spec,
                                                             const GraphLimits& limits,
                                                             const CancelCheck& cancelled) {
  RETURN_IF_ERROR(ValidateRandomWalk(spec, limits));
  const int64_t n = spec.num_nodes;
  const Adjacency adj = BuildAdjacency(n, spec.edges);
  std::vector<float> out(static_cast<size_t>(n * spec.walk_length), 0.0f);
  // Roots are independent: the kernel threads split them. A walk touches about the edges
  // near its root once per step, so the lease is sized by edges times steps.
  const KernelThreadLease lease(
      WorkBytes(static_cast<int64_t>(adj.neighbors.size() + n) * spec.walk_length));
  WalkProgress progress;
  ParallelFor(lease.threads(), n, [&](int64_t first, int64_t last) {
    WalkRoots(adj, spec, limits, cancelled, first, last, progress, out.data());
  });
  if (!progress.status.ok()) return progress.status;
  return out;
}

}  // namespace posenc
