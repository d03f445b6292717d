// Writes the seed corpus: small valid requests for every scheme and option, so the fuzzer
// starts from inputs that reach the kernels. Usage: posenc-fuzz-seeds <corpus dir>; writes
// <dir>/<target>/<name> for encode, encode_stream, bias, table and graph.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "posenc/v1/posenc.pb.h"

namespace fs = std::filesystem;
namespace v1 = posenc::v1;

namespace {

fs::path root;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(root / target);
  std::ofstream(root / target / name, std::ios::binary) << bytes;
}

template <typename Message>
void Write(const std::string& target, const std::string& name, const Message& m) {
  Write(target, name, m.SerializeAsString());
}

// A tensor of `shape` in `dtype` with small distinct values (float32 patterns, or the top
// half of each float32 for the 16-bit dtypes, which is bfloat16; fine as float16 bits too).
v1::Tensor MakeTensor(std::initializer_list<int64_t> shape, v1::DType dtype = v1::FLOAT32) {
  v1::Tensor t;
  int64_t count = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    count *= d;
  }
  t.set_dtype(dtype);
  std::string& data = *t.mutable_data();
  for (int64_t i = 0; i < count; ++i) {
    const float f = 0.25f * static_cast<float>(i % 13) - 1.0f;
    uint32_t bits;
    __builtin_memcpy(&bits, &f, 4);
    if (dtype == v1::FLOAT32) {
      data.append(reinterpret_cast<const char*>(&bits), 4);
    } else {
      const uint16_t half = static_cast<uint16_t>(dtype == v1::FLOAT16 ? 0x3c00 : bits >> 16);
      data.append(reinterpret_cast<const char*>(&half), 2);
    }
  }
  return t;
}

v1::EncodeRequest Embeddings(std::initializer_list<int64_t> shape, v1::DType dtype = v1::FLOAT32) {
  v1::EncodeRequest r;
  r.set_request_id("seed");
  *r.mutable_input() = MakeTensor(shape, dtype);
  return r;
}

std::vector<std::pair<std::string, v1::EncodeRequest>> SinusoidalSeeds() {
  std::vector<std::pair<std::string, v1::EncodeRequest>> out;
  for (auto layout : {v1::INTERLEAVED, v1::CONCATENATED}) {
    for (auto timescale : {v1::PER_DIM, v1::HALF_MINUS_ONE}) {
      for (int width : {16, 15}) {
        v1::EncodeRequest r = Embeddings({2, 8, width});
        r.mutable_sinusoidal()->set_layout(layout);
        r.mutable_sinusoidal()->set_timescale(timescale);
        out.emplace_back("sinusoidal_l" + std::to_string(layout) + "_t" +
                             std::to_string(timescale) + "_w" + std::to_string(width),
                         r);
      }
    }
  }
  v1::EncodeRequest concat = Embeddings({8, 16}, v1::BFLOAT16);
  concat.mutable_sinusoidal()->set_fusion(v1::CONCAT);
  concat.mutable_sinusoidal()->set_pe_dim(8);
  concat.mutable_sinusoidal()->set_input_scale(4.0f);
  concat.mutable_sinusoidal()->set_pe_scale(0.5f);
  concat.mutable_sinusoidal()->set_base(500.0);
  out.emplace_back("sinusoidal_concat_bf16", concat);
  v1::EncodeRequest offsets = Embeddings({2, 4, 8}, v1::FLOAT16);
  offsets.mutable_sinusoidal();
  offsets.mutable_positions()->add_offsets(100);
  offsets.mutable_positions()->add_offsets(1000000);
  out.emplace_back("sinusoidal_offsets_f16", offsets);
  v1::EncodeRequest ids = Embeddings({1, 4, 8});
  ids.mutable_sinusoidal()->set_layout(v1::CONCATENATED);
  for (int64_t p : {7, 3, 3, 90000}) ids.mutable_positions()->add_ids(p);
  out.emplace_back("sinusoidal_ids", ids);
  return out;
}

std::vector<std::pair<std::string, v1::EncodeRequest>> LearnedSeeds() {
  std::vector<std::pair<std::string, v1::EncodeRequest>> out;
  for (auto overflow : {v1::ERROR, v1::CLAMP, v1::INTERPOLATE}) {
    v1::EncodeRequest r = Embeddings({2, 8, 16});
    r.mutable_learned()->set_table("pos");
    r.mutable_learned()->set_overflow(overflow);
    // Past the table's 64 rows for CLAMP and INTERPOLATE.
    if (overflow != v1::ERROR) r.mutable_positions()->add_offsets(60);
    out.emplace_back("learned_overflow" + std::to_string(overflow), r);
  }
  v1::EncodeRequest concat = Embeddings({4, 8}, v1::FLOAT16);
  concat.mutable_learned()->set_table("pos");
  concat.mutable_learned()->set_fusion(v1::CONCAT);
  concat.mutable_learned()->set_input_scale(2.0f);
  concat.mutable_learned()->set_pe_scale(0.5f);
  out.emplace_back("learned_concat_f16", concat);
  return out;
}

v1::EncodeRequest RopeRequest(v1::RopeLayout layout, v1::DType dtype = v1::FLOAT32) {
  v1::EncodeRequest r;
  r.set_request_id("seed");
  r.mutable_rope()->set_layout(layout);
  switch (layout) {
    case v1::BHSD:
      *r.mutable_input() = MakeTensor({1, 4, 8, 16}, dtype);
      *r.mutable_key() = MakeTensor({1, 2, 8, 16}, dtype);
      break;
    case v1::THD:
      *r.mutable_input() = MakeTensor({6, 2, 16}, dtype);
      *r.mutable_key() = MakeTensor({6, 1, 16}, dtype);
      for (int64_t p : {0, 1, 2, 0, 1, 5}) r.mutable_positions()->add_ids(p);
      break;
    default:
      *r.mutable_input() = MakeTensor({2, 8, 2, 16}, dtype);
      *r.mutable_key() = MakeTensor({2, 8, 1, 16}, dtype);
      break;
  }
  return r;
}

v1::RopeScaling Scaling(v1::RopeScalingType type) {
  v1::RopeScaling s;
  s.set_type(type);
  switch (type) {
    case v1::LINEAR: s.set_factor(2.0); break;
    case v1::DYNAMIC:
      s.set_factor(2.0);
      s.set_max_position_embeddings(4);
      break;
    case v1::YARN:
      s.set_factor(4.0);
      s.set_original_max_position_embeddings(4);
      s.set_beta_fast(32);
      s.set_beta_slow(1);
      s.set_mscale(1.0);
      s.set_mscale_all_dim(0.5);
      break;
    case v1::LLAMA3:
      s.set_factor(8.0);
      s.set_original_max_position_embeddings(4);
      s.set_low_freq_factor(1.0);
      s.set_high_freq_factor(4.0);
      break;
    case v1::LONGROPE:
      s.set_original_max_position_embeddings(4);
      s.set_max_position_embeddings(16);
      for (int i = 0; i < 8; ++i) {
        s.add_short_factor(1.0 + i);
        s.add_long_factor(2.0 + i);
      }
      break;
    default: break;
  }
  return s;
}

std::vector<std::pair<std::string, v1::EncodeRequest>> RopeSeeds() {
  std::vector<std::pair<std::string, v1::EncodeRequest>> out;
  for (auto layout : {v1::BSHD, v1::BHSD, v1::THD}) {
    for (auto style : {v1::NEOX, v1::GPTJ}) {
      v1::EncodeRequest r = RopeRequest(layout);
      r.mutable_rope()->set_style(style);
      out.emplace_back("rope_layout" + std::to_string(layout) + "_style" + std::to_string(style),
                       r);
    }
  }
  for (auto type : {v1::LINEAR, v1::DYNAMIC, v1::YARN, v1::LLAMA3, v1::LONGROPE}) {
    v1::EncodeRequest r = RopeRequest(v1::BSHD);
    *r.mutable_rope()->mutable_scaling() = Scaling(type);
    r.mutable_positions()->add_offsets(3);
    out.emplace_back("rope_scaling" + std::to_string(type), r);
  }
  v1::EncodeRequest partial = RopeRequest(v1::BSHD, v1::BFLOAT16);
  partial.mutable_rope()->set_rotary_dim(8);
  partial.mutable_rope()->set_base(500000.0);
  partial.clear_key();
  out.emplace_back("rope_partial_bf16_nokey", partial);
  v1::EncodeRequest half = RopeRequest(v1::BHSD, v1::FLOAT16);
  half.mutable_positions()->add_offsets(1000000);
  out.emplace_back("rope_f16_offset", half);
  // Multimodal RoPE: per-axis ids, prompt segments (interleaved, temporal scale), and
  // axial, xPos and proportional variants.
  v1::EncodeRequest mrope = RopeRequest(v1::BSHD);
  for (int sct : {2, 3, 3}) mrope.mutable_rope()->add_mrope_section(sct);
  for (int i = 0; i < 3 * 2 * 8; ++i) mrope.mutable_positions()->add_axis_ids((i * 7) % 11);
  out.emplace_back("rope_mrope_axis_ids", mrope);
  v1::EncodeRequest segments = RopeRequest(v1::BHSD, v1::BFLOAT16);
  for (int sct : {2, 3, 3}) segments.mutable_rope()->add_mrope_section(sct);
  segments.mutable_rope()->set_mrope_interleaved(true);
  segments.mutable_positions()->add_mrope_segments()->set_text_length(2);
  v1::MropeSegment* grid = segments.mutable_positions()->add_mrope_segments();
  grid->set_grid_t(2);
  grid->set_grid_h(1);
  grid->set_grid_w(2);
  grid->set_temporal_scale(1.5);
  segments.mutable_positions()->add_mrope_segments()->set_text_length(2);
  segments.mutable_positions()->add_offsets(5);
  out.emplace_back("rope_mrope_segments", segments);
  v1::EncodeRequest axial = RopeRequest(v1::THD);
  axial.mutable_rope()->set_axial_axes(2);
  axial.mutable_positions()->clear_ids();
  for (int i = 0; i < 12; ++i) axial.mutable_positions()->add_axis_ids(i % 3);
  out.emplace_back("rope_axial_thd", axial);
  v1::EncodeRequest xpos = RopeRequest(v1::BSHD, v1::FLOAT16);
  xpos.mutable_rope()->set_xpos_scale_base(512);
  xpos.mutable_rope()->set_xpos_center(3);
  out.emplace_back("rope_xpos", xpos);
  v1::EncodeRequest proportional = RopeRequest(v1::BSHD);
  proportional.mutable_rope()->mutable_scaling()->set_type(v1::PROPORTIONAL);
  proportional.mutable_rope()->mutable_scaling()->set_rope_proportion(0.25);
  out.emplace_back("rope_proportional", proportional);
  return out;
}

std::vector<std::pair<std::string, v1::EncodeRequest>> OtherEncodeSeeds() {
  std::vector<std::pair<std::string, v1::EncodeRequest>> out;
  v1::EncodeRequest h = Embeddings({2, 4, 16});
  v1::Level* sentence = h.mutable_hierarchical()->add_levels();
  for (int64_t p : {0, 1, 2, 3}) sentence->add_ids(p);
  v1::Level* paragraph = h.mutable_hierarchical()->add_levels();
  for (int64_t p : {0, 0, 1, 1, 2, 2, 3, 3}) paragraph->add_ids(p);
  paragraph->set_base(100.0);
  paragraph->set_scale(0.5f);
  out.emplace_back("hierarchical", h);
  for (auto layout : {v1::INTERLEAVED, v1::CONCATENATED}) {
    v1::EncodeRequest c = Embeddings({2, 4, 16}, layout ? v1::FLOAT16 : v1::FLOAT32);
    c.mutable_continuous()->set_layout(layout);
    c.mutable_continuous()->set_timescale(layout ? v1::HALF_MINUS_ONE : v1::PER_DIM);
    c.mutable_continuous()->set_value_scale(10.0);
    for (double v : {0.0, 0.5, 1.25, 3.0}) c.mutable_positions()->add_values(v);
    out.emplace_back("continuous_l" + std::to_string(layout), c);
  }
  // MULTIPLY for sinusoidal and learned.
  v1::EncodeRequest sm = Embeddings({2, 4, 16}, v1::BFLOAT16);
  sm.mutable_sinusoidal()->set_fusion(v1::MULTIPLY);
  sm.mutable_sinusoidal()->set_pe_scale(2.0f);
  out.emplace_back("sinusoidal_multiply_bf16", sm);
  v1::EncodeRequest lm = Embeddings({2, 8, 16}, v1::FLOAT16);
  lm.mutable_learned()->set_table("pos");
  lm.mutable_learned()->set_fusion(v1::MULTIPLY);
  out.emplace_back("learned_multiply_f16", lm);
  // Sinusoidal2D: a square grid, and a non-square one with a class token, every fusion.
  for (auto fusion : {v1::ADD, v1::CONCAT, v1::MULTIPLY}) {
    const bool cls = fusion != v1::ADD;
    v1::EncodeRequest g =
        Embeddings({2, cls ? 7 : 4, 16}, fusion == v1::CONCAT ? v1::FLOAT16 : v1::FLOAT32);
    g.mutable_sinusoidal_2d()->set_grid_height(2);
    g.mutable_sinusoidal_2d()->set_grid_width(cls ? 3 : 2);
    g.mutable_sinusoidal_2d()->set_cls_token(cls);
    g.mutable_sinusoidal_2d()->set_fusion(fusion);
    if (cls) g.mutable_sinusoidal_2d()->set_base(100.0);
    out.emplace_back("sinusoidal_2d_f" + std::to_string(fusion), g);
  }
  // Fourier: one axis from integer positions, two axes from values, the named table.
  v1::EncodeRequest f1 = Embeddings({2, 4, 8});
  for (double b : {0.1, 0.5, 1.0, 2.0}) f1.mutable_fourier()->add_frequencies(b);
  f1.mutable_positions()->add_offsets(3);
  out.emplace_back("fourier_integer", f1);
  v1::EncodeRequest f2 = Embeddings({2, 3, 4}, v1::BFLOAT16);
  for (double b : {0.5, -1.0, 2.0, 0.25, 3.0, 1.5}) f2.mutable_fourier()->add_frequencies(b);
  f2.mutable_fourier()->set_num_axes(2);
  f2.mutable_fourier()->set_fusion(v1::CONCAT);
  for (int i = 0; i < 12; ++i) f2.mutable_positions()->add_values(0.125 * i - 0.5);
  out.emplace_back("fourier_two_axes_concat_bf16", f2);
  v1::EncodeRequest f3 = Embeddings({4, 12}, v1::FLOAT16);
  f3.mutable_fourier()->set_frequencies_table("fourier_b");  // [6, 2]
  f3.mutable_fourier()->set_num_axes(2);
  f3.mutable_fourier()->set_fusion(v1::MULTIPLY);
  for (int i = 0; i < 8; ++i) f3.mutable_positions()->add_values(0.5 * i);
  out.emplace_back("fourier_table_multiply_f16", f3);
  return out;
}

std::vector<std::pair<std::string, v1::EncodeRequest>> EncodeSeeds() {
  std::vector<std::pair<std::string, v1::EncodeRequest>> all;
  for (auto part : {SinusoidalSeeds(), LearnedSeeds(), RopeSeeds(), OtherEncodeSeeds()}) {
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

void WriteEncodeStreamSeeds(const std::vector<std::pair<std::string, v1::EncodeRequest>>& all) {
  // Must match encode_stream_fuzzer.cc.
  const std::string separator("\xff\xfe\xfd\xfc", 4);
  // Streams of three consecutive seeds (mixed schemes through one handler).
  for (size_t i = 0; i + 2 < all.size(); i += 3) {
    std::string bytes;
    for (size_t j = i; j < i + 3; ++j) {
      if (j > i) bytes += separator;
      bytes += all[j].second.SerializeAsString();
    }
    Write("encode_stream", "stream_" + all[i].first, bytes);
  }
}

void WriteBiasSeeds() {
  for (auto mode : {v1::SYMMETRIC, v1::CAUSAL}) {
    for (int heads : {4, 3}) {
      v1::BiasRequest r;
      r.set_request_id("seed");
      r.set_query_length(4);
      r.set_key_length(8);
      r.mutable_alibi()->set_num_heads(heads);
      r.mutable_alibi()->set_mode(mode);
      const std::string name = "alibi_m" + std::to_string(mode) + "_h" + std::to_string(heads);
      Write("bias", name, r);
      r.set_query_offset(2);
      r.mutable_alibi()->set_max_bias(4.0);
      *r.mutable_scores() = MakeTensor({2, heads, 4, 8}, heads == 4 ? v1::FLOAT32 : v1::BFLOAT16);
      Write("bias", name + "_scores", r);
    }
  }
  for (bool bidirectional : {true, false}) {
    v1::BiasRequest r;
    r.set_request_id("seed");
    // Distances up to 31: exact and logarithmic buckets, and some past max_distance.
    r.set_query_length(4);
    r.set_key_length(32);
    r.mutable_t5()->set_bidirectional(bidirectional);
    r.mutable_t5()->set_num_buckets(32);
    r.mutable_t5()->set_max_distance(20);
    const std::string name = "t5_bi" + std::to_string(bidirectional);
    Write("bias", name + "_buckets", r);
    r.mutable_t5()->set_table("t5");  // [32, 4]
    Write("bias", name + "_table", r);
    *r.mutable_scores() = MakeTensor({1, 4, 4, 32}, bidirectional ? v1::FLOAT16 : v1::FLOAT32);
    Write("bias", name + "_scores", r);
  }
  // Shaw (k = 4): indices, embeddings from the [9, 8] table "shaw", the query term alone and
  // added to scores.
  v1::BiasRequest shaw;
  shaw.set_request_id("seed");
  shaw.set_query_length(5);
  shaw.set_key_length(12);
  shaw.mutable_shaw()->set_max_relative_position(4);
  Write("bias", "shaw_index", shaw);
  shaw.mutable_shaw()->set_table("shaw");
  Write("bias", "shaw_embeddings", shaw);
  *shaw.mutable_query() = MakeTensor({2, 3, 5, 8}, v1::BFLOAT16);
  Write("bias", "shaw_query_bf16", shaw);
  *shaw.mutable_scores() = MakeTensor({2, 3, 5, 12}, v1::FLOAT16);
  Write("bias", "shaw_query_scores_f16", shaw);
  // DeBERTa: HF's defaults over distances past both bucket edges, small buckets, none.
  v1::BiasRequest deberta;
  deberta.set_request_id("seed");
  deberta.set_query_length(3);
  deberta.set_key_length(700);
  deberta.mutable_deberta();
  Write("bias", "deberta_default", deberta);
  deberta.mutable_deberta()->set_position_buckets(8);
  deberta.mutable_deberta()->set_max_relative_positions(16);
  Write("bias", "deberta_8_16", deberta);
  deberta.mutable_deberta()->set_position_buckets(-1);
  Write("bias", "deberta_none", deberta);
}

void WriteTableSeeds() {
  for (auto layout : {v1::INTERLEAVED, v1::CONCATENATED}) {
    for (auto timescale : {v1::PER_DIM, v1::HALF_MINUS_ONE}) {
      v1::TableRequest r;
      r.mutable_sinusoidal()->set_layout(layout);
      r.mutable_sinusoidal()->set_timescale(timescale);
      r.set_length(50);
      r.set_dim(layout ? 16 : 15);
      r.set_rows_per_chunk(8);
      r.set_dtype(timescale ? v1::FLOAT16 : v1::FLOAT32);
      Write("table", "sinusoidal_l" + std::to_string(layout) + "_t" + std::to_string(timescale), r);
    }
  }
  for (auto type : {v1::NONE, v1::LINEAR, v1::DYNAMIC, v1::YARN, v1::LLAMA3, v1::LONGROPE}) {
    v1::TableRequest r;
    *r.mutable_rope()->mutable_scaling() = Scaling(type);
    r.set_length(type == v1::NONE ? 4096 : 40);
    r.set_dim(16);
    r.set_dtype(type == v1::YARN ? v1::BFLOAT16 : v1::DTYPE_UNSPECIFIED);
    if (type != v1::NONE) r.set_rows_per_chunk(16);
    Write("table", "rope_scaling" + std::to_string(type), r);
  }
  // Relative order: Transformer-XL's descending, clamped table; XLNet's through negative
  // positions; a rope table with a step.
  v1::TableRequest xl;
  xl.mutable_sinusoidal()->set_layout(v1::CONCATENATED);
  xl.set_length(40);
  xl.set_dim(16);
  xl.set_first_position(39);
  xl.set_position_step(-1);
  xl.set_clamp_position(20);
  xl.set_rows_per_chunk(16);
  Write("table", "sinusoidal_transformer_xl", xl);
  xl.set_first_position(20);
  xl.clear_clamp_position();
  Write("table", "sinusoidal_negative", xl);
  v1::TableRequest rope;
  rope.mutable_rope();
  rope.set_length(10);
  rope.set_dim(8);
  rope.set_first_position(5);
  rope.set_position_step(3);
  Write("table", "rope_step", rope);
}

v1::GraphRequest Graph(int64_t n, std::initializer_list<std::pair<int, int>> pairs, int k) {
  v1::GraphRequest r;
  r.set_request_id("seed");
  r.set_num_nodes(n);
  r.set_k(k);
  for (auto [u, v] : pairs) {
    r.add_edges(u);
    r.add_edges(v);
  }
  return r;
}

void WriteGraphSeeds() {
  v1::GraphRequest path = Graph(6, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}, 3);
  Write("graph", "path", path);
  path.set_normalized(true);
  *path.mutable_input() = MakeTensor({6, 4});
  Write("graph", "path_normalized_input", path);
  // Two components, a self-loop and a repeated pair; k beyond the node count.
  v1::GraphRequest parts = Graph(7, {{0, 1}, {1, 2}, {2, 0}, {3, 4}, {4, 4}, {4, 3}}, 8);
  *parts.mutable_input() = MakeTensor({7, 2}, v1::FLOAT16);
  Write("graph", "components_f16", parts);
  // A 10x10 grid: larger than the fuzz state's dense solver limit, so the sparse path runs.
  v1::GraphRequest grid = Graph(100, {}, 4);
  for (int i = 0; i < 10; ++i) {
    for (int j = 0; j < 10; ++j) {
      if (j + 1 < 10) grid.add_edges(i * 10 + j), grid.add_edges(i * 10 + j + 1);
      if (i + 1 < 10) grid.add_edges(i * 10 + j), grid.add_edges(i * 10 + j + 10);
    }
  }
  Write("graph", "grid10", grid);
  // A ring of 80 with chords: expander-like, the filtered Lanczos path.
  v1::GraphRequest ring = Graph(80, {}, 5);
  ring.set_normalized(true);
  for (int i = 0; i < 80; ++i) {
    ring.add_edges(i), ring.add_edges((i + 1) % 80);
    ring.add_edges(i), ring.add_edges((i * 7 + 3) % 80);
  }
  *ring.mutable_input() = MakeTensor({80, 3}, v1::BFLOAT16);
  Write("graph", "ring_chords_bf16", ring);
  // Random walks and hop distances on the two components above (a self-loop, an isolated
  // node), alone and after features.
  v1::GraphRequest walk = Graph(8, {{0, 1}, {1, 2}, {2, 0}, {3, 4}, {4, 4}, {4, 5}}, 0);
  walk.set_encoding(v1::RANDOM_WALK);
  walk.set_walk_length(6);
  Write("graph", "random_walk", walk);
  *walk.mutable_input() = MakeTensor({8, 2}, v1::FLOAT16);
  Write("graph", "random_walk_input_f16", walk);
  v1::GraphRequest paths = Graph(8, {{0, 1}, {1, 2}, {2, 0}, {3, 4}, {4, 5}}, 0);
  paths.set_encoding(v1::SHORTEST_PATH);
  for (int64_t a : {0, 5, 7}) paths.add_anchors(a);
  Write("graph", "shortest_path", paths);
  *paths.mutable_input() = MakeTensor({8, 1}, v1::BFLOAT16);
  Write("graph", "shortest_path_input_bf16", paths);
  // A forest deeper than max_depth: the one-hot stack, then the [3, 4] table "kids".
  v1::GraphRequest tree;
  tree.set_request_id("seed");
  tree.set_num_nodes(9);
  tree.set_encoding(v1::TREE);
  for (int64_t p : {-1, 0, 0, 1, 3, 4, -1, 6, 6}) tree.add_parents(p);
  tree.set_max_depth(3);
  tree.set_max_children(3);
  tree.set_depth_decay(0.5);
  Write("graph", "tree_one_hot", tree);
  tree.set_table("kids");
  Write("graph", "tree_table", tree);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  root = argv[1];
  const auto encode = EncodeSeeds();
  for (const auto& [name, request] : encode) Write("encode", name, request);
  WriteEncodeStreamSeeds(encode);
  WriteBiasSeeds();
  WriteTableSeeds();
  WriteGraphSeeds();
  return 0;
}
