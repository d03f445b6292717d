#include "client/plot_command.h"

#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/heatmap_png.h"
#include "client/posenc_client.h"
#include "server/common/flags.h"

namespace posenc::client {
namespace {

constexpr char kUsage[] = R"(usage: posenc-client plot --scheme=SCHEME --output=FILE.png [flags]

Draws what the server computes as a PNG heatmap (blue < 0 < red, black = -inf).
  --target ADDR        server (default 127.0.0.1:50051)
  --scheme S           sinusoidal | rope | alibi | t5 | deberta | graph | tree |
                       sinusoidal_2d
  --output FILE.png    where to write the picture
  --length L --dim D   sinusoidal rows [L, D]; rope cos|sin of L positions, rotary dim D
                       (defaults 128, 64)
  --heads H --query-length Q --key-length K --mode causal|symmetric
                       alibi / t5 bias [H, Q, K], one panel per head (defaults 4, 32, 32)
                       deberta: bucketed query - key [Q, K] (HF's defaults 256, 512)
  --side N --k K       graph: the first K eigenvectors of an N x N grid (defaults 16, 6)
  --depth D --children C
                       tree: the one-hot stack of a complete C-ary tree of depth D, one row
                       per node in breadth-first order, D blocks of C (defaults 3, 3)
  --side N --dim D     sinusoidal_2d: each of the D features over an N x N patch grid, one
                       panel per feature (defaults 14, 16)
  --cell PX            pixels per value (default 3)
)";

using Flags = CommandFlags;

// A positive size flag, or `fallback`; a bad value ends the command (exit 2).
int64_t Int(const Flags& f, const std::string& name, int64_t fallback) {
  absl::StatusOr<int64_t> v = f.Count(name, fallback);
  if (!v.ok()) {
    std::cerr << "posenc-client plot: " << v.status().message() << "\n";
    std::exit(2);
  }
  return *v;
}

Heatmap FromTensor(const v1::Tensor& t, int64_t rows, int64_t cols, int cell) {
  Heatmap h{std::vector<float>(static_cast<size_t>(rows * cols)), rows, cols, cell};
  if (t.dtype() == v1::INT32) {
    const auto* p = reinterpret_cast<const int32_t*>(t.data().data());
    for (size_t i = 0; i < h.values.size(); ++i) h.values[i] = static_cast<float>(p[i]);
  } else {
    std::memcpy(h.values.data(), t.data().data(), h.values.size() * sizeof(float));
  }
  return h;
}

// Panels of [rows, cols] each, laid side by side: heads of a bias, vectors of a graph.
Heatmap Panels(const std::vector<float>& values, int64_t panels, int64_t rows, int64_t cols,
               int cell, bool transpose_columns) {
  std::vector<Heatmap> parts;
  for (int64_t p = 0; p < panels; ++p) {
    Heatmap h{std::vector<float>(static_cast<size_t>(rows * cols)), rows, cols, cell};
    for (int64_t i = 0; i < rows * cols; ++i) {
      h.values[i] = transpose_columns ? values[i * panels + p] : values[p * rows * cols + i];
    }
    parts.push_back(std::move(h));
  }
  return SideBySide(parts);
}

// sinusoidal rows [L, D]; rope cos | sin of L positions per row.
absl::StatusOr<Heatmap> FetchTable(PosencClient& client, const Flags& f, const std::string& scheme,
                                   int cell) {
  v1::TableRequest req;
  req.set_length(Int(f, "length", 128));
  req.set_dim(static_cast<int32_t>(Int(f, "dim", 64)));
  if (scheme == "rope") {
    req.mutable_rope();
  } else {
    req.mutable_sinusoidal();
  }
  absl::StatusOr<v1::Tensor> t = client.GetTableTensor(req);
  if (!t.ok()) return t.status();
  return FromTensor(*t, req.length(), req.dim(), cell);
}

// alibi: one panel per head; t5 without a table: one panel of bucket ids.
absl::StatusOr<Heatmap> FetchBias(PosencClient& client, const Flags& f, const std::string& scheme,
                                  int cell) {
  v1::BiasRequest req;
  const int64_t heads = Int(f, "heads", 4);
  req.set_query_length(Int(f, "query-length", 32));
  req.set_key_length(Int(f, "key-length", 32));
  if (scheme == "alibi") {
    req.mutable_alibi()->set_num_heads(static_cast<int32_t>(heads));
    req.mutable_alibi()->set_mode(f.Str("mode") == "symmetric" ? v1::SYMMETRIC : v1::CAUSAL);
  } else {
    req.mutable_t5()->set_bidirectional(true);
  }
  absl::StatusOr<v1::BiasResponse> r = client.AttentionBias(req);
  if (!r.ok()) return r.status();
  const int64_t panels = scheme == "alibi" ? heads : 1;
  Heatmap all = FromTensor(r->output(), panels * req.query_length(), req.key_length(), cell);
  return Panels(all.values, panels, req.query_length(), req.key_length(), cell, false);
}

// deberta: the bucketed query - key [Q, K].
absl::StatusOr<Heatmap> FetchDeberta(PosencClient& client, const Flags& f, const std::string&,
                                     int cell) {
  v1::BiasRequest req;
  req.set_query_length(Int(f, "query-length", 32));
  req.set_key_length(Int(f, "key-length", 32));
  req.mutable_deberta();
  absl::StatusOr<v1::BiasResponse> r = client.AttentionBias(req);
  if (!r.ok()) return r.status();
  return FromTensor(r->output(), req.query_length(), req.key_length(), cell);
}

// tree: the one-hot stack of a complete C-ary tree of depth D, nodes in breadth-first order.
absl::StatusOr<Heatmap> FetchTree(PosencClient& client, const Flags& f, const std::string&,
                                  int cell) {
  const int64_t depth = Int(f, "depth", 3), children = Int(f, "children", 3);
  v1::GraphRequest req;
  req.set_encoding(v1::TREE);
  req.set_max_depth(static_cast<int32_t>(depth));
  req.set_max_children(static_cast<int32_t>(children));
  // Breadth-first numbering: node i's parent is (i - 1) / children; depth levels in all.
  int64_t nodes = 0, level = 1;
  for (int64_t d = 0; d <= depth; ++d, level *= children) {
    nodes += level;
    if (nodes > 100000) {
      return absl::InvalidArgumentError("--depth and --children give more than 100000 nodes");
    }
  }
  req.set_num_nodes(nodes);
  for (int64_t i = 0; i < nodes; ++i) req.add_parents(i == 0 ? -1 : (i - 1) / children);
  absl::StatusOr<v1::GraphResponse> g = client.GraphEncode(req);
  if (!g.ok()) return g.status();
  return FromTensor(g->output(), nodes, depth * children, cell);
}

// graph: the first K eigenvectors of an N x N grid, one panel each.
absl::StatusOr<Heatmap> FetchGraph(PosencClient& client, const Flags& f, const std::string&,
                                   int cell) {
  const int64_t side = Int(f, "side", 16), k = Int(f, "k", 6);
  v1::GraphRequest req;
  req.set_num_nodes(side * side);
  req.set_k(static_cast<int32_t>(k));
  auto edge = [&req](int64_t a, int64_t b) {
    req.add_edges(a);
    req.add_edges(b);
  };
  for (int64_t r = 0; r < side; ++r) {
    for (int64_t c = 0; c < side; ++c) {
      if (c + 1 < side) edge(r * side + c, r * side + c + 1);
      if (r + 1 < side) edge(r * side + c, (r + 1) * side + c);
    }
  }
  absl::StatusOr<v1::GraphResponse> g = client.GraphEncode(req);
  if (!g.ok()) return g.status();
  Heatmap all = FromTensor(g->output(), side * side, k, cell);
  return Panels(all.values, k, side, side, cell, /*transpose_columns=*/true);
}

// sinusoidal_2d: each of the D features over an N x N patch grid (zeros + pe = pe).
absl::StatusOr<Heatmap> FetchSinusoidal2d(PosencClient& client, const Flags& f, const std::string&,
                                          int cell) {
  const int64_t side = Int(f, "side", 14), dim = Int(f, "dim", 16);
  v1::EncodeRequest req;
  req.mutable_sinusoidal_2d()->set_grid_height(side);
  req.mutable_sinusoidal_2d()->set_grid_width(side);
  v1::Tensor* x = req.mutable_input();
  for (int64_t d : {int64_t{1}, side * side, dim}) x->add_shape(d);
  x->set_dtype(v1::FLOAT32);
  x->mutable_data()->assign(static_cast<size_t>(side * side * dim) * sizeof(float), '\0');
  absl::StatusOr<v1::EncodeResponse> r = client.Encode(req);
  if (!r.ok()) return r.status();
  Heatmap all = FromTensor(r->output(), side * side, dim, cell);
  return Panels(all.values, dim, side, side, cell, /*transpose_columns=*/true);
}

using FetchFn = absl::StatusOr<Heatmap> (*)(PosencClient&, const Flags&, const std::string&, int);

absl::StatusOr<Heatmap> Fetch(PosencClient& client, const Flags& f, const std::string& scheme) {
  static constexpr struct {
    const char* scheme;
    FetchFn fetch;
  } kFetchers[] = {{"sinusoidal", FetchTable}, {"rope", FetchTable},
                   {"alibi", FetchBias},       {"t5", FetchBias},
                   {"deberta", FetchDeberta},  {"graph", FetchGraph},
                   {"tree", FetchTree},        {"sinusoidal_2d", FetchSinusoidal2d}};
  const int cell = static_cast<int>(Int(f, "cell", 3));
  for (const auto& fetcher : kFetchers) {
    if (scheme == fetcher.scheme) return fetcher.fetch(client, f, scheme, cell);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--scheme=", scheme,
                   " is not sinusoidal, rope, alibi, t5, deberta, graph, tree or sinusoidal_2d"));
}

}  // namespace

int RunPlotCommand(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    }
  }
  static const Flags::Options kOptions{{"target", "scheme", "output", "length", "dim", "heads",
                                        "query-length", "key-length", "mode", "side", "k", "depth",
                                        "children", "cell"},
                                       {},
                                       '-'};
  absl::StatusOr<Flags> parsed = Flags::Parse(args, kOptions);
  if (!parsed.ok() || !parsed->Has("scheme") || !parsed->Has("output")) {
    std::cerr << "posenc-client plot: "
              << (parsed.ok() ? "--scheme and --output are required"
                              : std::string(parsed.status().message()))
              << "\n"
              << kUsage;
    return 2;
  }
  const Flags& f = *parsed;
  ClientOptions options;
  options.target = f.Str("target", "127.0.0.1:50051");
  absl::StatusOr<std::unique_ptr<PosencClient>> client = PosencClient::Create(options);
  absl::StatusOr<Heatmap> map = client.ok() ? Fetch(**client, f, f.Str("scheme")) : client.status();
  absl::Status written = map.ok() ? WriteHeatmapPng(f.Str("output"), *map) : map.status();
  if (!written.ok()) {
    std::cerr << "posenc-client plot: " << written << "\n";
    return written.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::cout << "wrote " << f.Str("output") << " (" << map->cols * map->cell << " x "
            << map->rows * map->cell << " px)\n";
  return 0;
}

}  // namespace posenc::client
