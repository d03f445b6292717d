// posenc-json-bench: the HTTP infer body parser (ParseInferRequest) alone over one JSON body
// of an FP32 input of "data" elements: parse throughput and the process's peak RSS
// (VmHWM) past what the body itself takes.
//
//   posenc-json-bench [MiB of JSON, default 64] [repeats, default 3] [element text, default 0.5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/http/infer_json.h"

namespace {

// The process's VmHWM or VmRSS in MiB (from /proc/self/status).
double StatusMib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) == 0) return std::atof(line.c_str() + std::strlen(field)) / 1024;
  }
  return 0;
}

std::string Body(size_t mib, const std::string& element) {
  const size_t target = mib << 20;
  const size_t n = target / (element.size() + 1);
  std::string body = absl::StrCat(R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,)", n,
                                  R"(],"data":[)");
  body.reserve(target + 256);
  for (size_t i = 0; i < n; ++i) {
    if (i) body.push_back(',');
    body.append(element);
  }
  body.append("]}]}");
  return body;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::string element = argc > 3 ? argv[3] : "0.5";
  const std::string body = Body(mib, element);
  const double base = StatusMib("VmRSS:");
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    posenc::InferRequestBody parsed;
    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = posenc::ParseInferRequest(body, std::nullopt, "m", "", parsed);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!status.ok()) {
      std::fprintf(stderr, "parse failed: %s\n", std::string(status.message()).c_str());
      return 1;
    }
    best = std::min(best, s);
  }
  const double peak = StatusMib("VmHWM:");
  std::printf(
      "json %.1f MiB, element '%s': %.0f MB/s (best of %d), peak RSS %.0f MiB, "
      "%.0f MiB past the body (%.2f x its size)\n",
      body.size() / 1048576.0, element.c_str(), body.size() / best / 1e6, repeats, peak,
      peak - base, (peak - base) / (body.size() / 1048576.0));
  return 0;
}
