// posenc-client: command-line client of the posenc service. See kUsage below.
// Exit codes: 0 ok, 1 the RPC failed (or health is not SERVING), 2 usage or local file error.
// This file holds the usage text and the dispatch; the commands live in encode_command,
// commands, infer_command, load_command and plot_command.

#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli_call.h"
#include "client/cli_flags.h"
#include "client/commands.h"
#include "client/encode_command.h"
#include "client/infer_command.h"
#include "client/load_command.h"
#include "client/plot_command.h"
#include "server/common/version.h"

namespace posenc::client {
namespace {

constexpr char kUsage[] = R"(usage: posenc-client [common flags] COMMAND [flags]

commands:
  encode   one Encode call; prints shape, dtype, first values and the elapsed time
  stream   --count N copies of the encode request over one EncodeStream; prints throughput
  bias     AttentionBias (--scheme alibi|t5|shaw|deberta)
  graph    GraphEncode (--encoding laplacian|random_walk|shortest_path|tree)
  table    GetTable (sinusoidal rows or rope cos/sin) into an .npy file
  list     ListSchemes
  infer    ModelInfer of the Open Inference Protocol (--model MODEL); posenc-client infer --help
  plot     a table, bias or graph encoding as a PNG heatmap (plot --help)
  health   grpc.health.v1 Check (exit 1 unless SERVING)
  load     concurrent calls for a duration; throughput, p50/p99, errors by code (load --help)

common flags (before or after the command):
  --target ADDR        host:port or unix:/path (default 127.0.0.1:50051)
  --timeout DUR        per call, e.g. 10, 10s, 500ms (default 30s)
  --tls                TLS with the system roots
  --tls-ca FILE        CA bundle (PEM) that signed the server's certificate (implies --tls)
  --tls-cert FILE --tls-key FILE   client certificate and key for mutual TLS
  --tls-server-name N  name to expect in the server certificate
  --request-id ID

encode / stream:
  --scheme sinusoidal|learned|rope|hierarchical|continuous|sinusoidal_2d|fourier
                       (default sinusoidal; rope with --hf-config)
  input:  --shape 2,16,64 [--fill random|zeros] [--seed N]  or  --input x.npy
          --dtype float32|float16|bfloat16 (default: the file's, else float32)
  positions: --offsets 0,5  --ids 3,4,5  --values 0.0,0.5 (continuous)
          --axis-ids a.npy ([num_axes, seq] or [num_axes, batch, seq], multi-axis rope)
          --mrope-segments 5,image:1x2x2,3,video:2x4x4@0.5 (text lengths, [image:|video:]TxHxW grids, @temporal_scale)
  sinusoidal/continuous: --base --layout interleaved|concatenated
          --timescale per_dim|half_minus_one --value-scale (continuous)
  sinusoidal/learned/sinusoidal_2d/fourier: --input-scale --pe-scale
          --fusion add|concat|multiply --pe-dim (sinusoidal)
  sinusoidal_2d: --grid-height H --grid-width W [--cls-token] [--base] (seq = H*W (+1))
  fourier: --frequencies 0.5,1.25,... (B [F, num_axes] row-major) | --frequencies-table NAME
          [--num-axes M]; positions from --values (M per token) or --offsets/--ids
  learned: --table NAME --overflow error|clamp|interpolate
  hierarchical: --levels "0,1,0;0,0,1" (ids per level, levels split by ';')
          --level-scales 1,0.5  --level-bases 10000,100
  rope:   --hf-config config.json [--layer-type full_attention|sliding_attention]
          --base --rotary-dim --style neox|gptj
          --rope-layout bshd|bhsd|thd  --scaling linear|dynamic|yarn|llama3 --factor F
          --original-max-pos N  --key k.npy | --key-shape 1,16,2,64  --key-output ko.npy
          (with --hf-config and no --shape/--input: 8 tokens of the model's heads)
  --output y.npy (bfloat16 outputs are written as float32)  --print N (values shown, 8)
          --shm  pass the tensors through POSIX shared memory (a server with --shm)
  stream: --count N (default 100)

bias:   --scheme alibi|t5|shaw|deberta --query-length Q --key-length K [--query-offset O]
        alibi: --heads H --mode symmetric|causal --max-bias B
        t5: --num-buckets --max-distance --bidirectional --table NAME
        shaw: --max-relative-position K [--table NAME [--query q.npy]]
        deberta: --position-buckets B --max-relative-positions M
        --scores s.npy [--dtype]  --output b.npy
graph:  --nodes N [--encoding laplacian|random_walk|shortest_path|tree] [--input x.npy]
        [--output e.npy]
        laplacian: --edges 0-1,1-2,2-0 --k K [--normalized]
        random_walk: --edges ... --walk-length S
        shortest_path: --edges ... --anchors 0,5
        tree: --parents -1,0,0,1 --max-depth D --max-children C [--depth-decay W]
              [--table NAME]
table:  --scheme sinusoidal|rope --length L --dim D [--dtype] [--rows-per-chunk R]
        [--first-position P --position-step S --clamp-position C]: row r is position
        P + r*S clamped to [-C, C] (Transformer-XL: P=klen-1, S=-1, --layout concatenated)
        sinusoidal flags as above; rope: --base --hf-config --scaling --factor
        --output t.npy
health: [--service NAME]
)";

// The flags each command knows besides the connection flags.
const std::set<std::string> kSinusoidalFlags = {"base",     "layout", "timescale", "input-scale",
                                                "pe-scale", "fusion", "pe-dim",    "value-scale"};
const std::set<std::string> kRopeFlags = {"base",        "rotary-dim", "style",
                                          "rope-layout", "hf-config",  "layer-type",
                                          "scaling",     "factor",     "original-max-pos"};
const std::set<std::string> kEncodeOnly = {
    "scheme",     "table",        "overflow",    "offsets",
    "ids",        "values",       "axis-ids",    "mrope-segments",
    "levels",     "level-scales", "level-bases", "grid-height",
    "grid-width", "cls-token",    "frequencies", "frequencies-table",
    "num-axes",   "shape",        "fill",        "seed",
    "input",      "dtype",        "output",      "key",
    "key-shape",  "key-output",   "print",       "count",
    "shm"};

std::set<std::string> Union(std::initializer_list<const std::set<std::string>*> sets,
                            std::initializer_list<const char*> extra = {}) {
  std::set<std::string> out = {"request-id"};
  for (const auto* s : sets) out.insert(s->begin(), s->end());
  for (const char* e : extra) out.insert(e);
  return out;
}

int Main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? kExitUsage : kExitOk;
  }
  if (std::string(argv[1]) == "--version") {
    std::cout << "posenc-client " << posenc::kVersion << "\n";
    return kExitOk;
  }
  auto line = SplitCommandLine(std::vector<std::string>(argv + 1, argv + argc));
  if (!line.ok()) return UsageError(line.status());
  const std::string& command = line->command;
  const std::vector<std::string>& args = line->args;
  if (command == "load") return RunLoadCommand(args);
  if (command == "infer") return RunInferCommand(args);
  if (command == "plot") return posenc::client::RunPlotCommand(args);
  std::set<std::string> known;
  if (command == "encode" || command == "stream") {
    known = Union({&kSinusoidalFlags, &kRopeFlags, &kEncodeOnly});
  } else if (command == "bias") {
    known = Union({}, {"scheme", "query-length", "key-length", "query-offset", "heads", "mode",
                       "max-bias", "num-buckets", "max-distance", "bidirectional", "table",
                       "max-relative-position", "position-buckets", "max-relative-positions",
                       "query", "scores", "dtype", "output", "print"});
  } else if (command == "graph") {
    known = Union({}, {"nodes", "edges", "k", "normalized", "encoding", "walk-length", "anchors",
                       "parents", "max-depth", "max-children", "depth-decay", "table", "input",
                       "output", "print"});
  } else if (command == "table") {
    known = Union({&kSinusoidalFlags, &kRopeFlags},
                  {"scheme", "length", "dim", "dtype", "rows-per-chunk", "output", "print",
                   "first-position", "position-step", "clamp-position"});
  } else if (command == "list") {
    known = Union({});
  } else if (command == "health") {
    known = Union({}, {"service"});
  } else {
    return UsageError(absl::InvalidArgumentError(absl::StrCat("unknown command '", command, "'")));
  }
  auto flags = ParseCommandFlags(args, known, {"bidirectional", "normalized", "shm", "cls-token"});
  if (!flags.ok()) return UsageError(flags.status());
  if (flags->Has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  if (command == "encode") return RunEncode(*flags, /*stream=*/false);
  if (command == "stream") return RunEncode(*flags, /*stream=*/true);
  if (command == "bias") return RunBias(*flags);
  if (command == "graph") return RunGraph(*flags);
  if (command == "table") return RunTable(*flags);
  if (command == "list") return RunList(*flags);
  return RunHealth(*flags);
}

}  // namespace
}  // namespace posenc::client

int main(int argc, char** argv) { return posenc::client::Main(argc, argv); }
