// The HTTP binding's JSON answers: InferResponseJsonBytes bounds the text WriteInferResponse
// writes (the HTTP front admits that many bytes before writing), at each datatype's longest
// element text, and counts no output that goes as binary data or stays in shared memory.
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/http/infer_json.h"
#include "server/tensor/dtype.h"

namespace posenc {
namespace {

template <typename T>
std::string Raw(const std::vector<T>& values) {
  std::string raw(values.size() * sizeof(T), '\0');
  std::memcpy(raw.data(), values.data(), raw.size());
  return raw;
}

void AddOutput(inference::ModelInferResponse& r, const std::string& datatype, std::string raw,
               int64_t count) {
  auto* o = r.add_outputs();
  o->set_name("out\x01\"" + datatype);  // escaped in the text: \u0001 and \"
  o->set_datatype(datatype);
  o->add_shape(count);
  r.add_raw_output_contents(std::move(raw));
}

TEST(InferResponseJsonBytes, BoundsTheTextAtEachDatatypesLongestElements) {
  constexpr int kCount = 1000;
  inference::ModelInferResponse r;
  r.set_model_name("sinusoidal");
  r.set_id(std::string(100, '\x02'));
  AddOutput(r, "FP32", Raw(std::vector<float>(kCount, -std::numeric_limits<float>::min())), kCount);
  AddOutput(r, "FP64", Raw(std::vector<double>(kCount, -std::numeric_limits<double>::min())),
            kCount);
  AddOutput(r, "INT64", Raw(std::vector<int64_t>(kCount, std::numeric_limits<int64_t>::min())),
            kCount);
  AddOutput(r, "INT8", Raw(std::vector<int8_t>(kCount, -128)), kCount);
  AddOutput(r, "UINT32", Raw(std::vector<uint32_t>(kCount, 4294967295u)), kCount);
  AddOutput(r, "BOOL", Raw(std::vector<uint8_t>(kCount, 0)), kCount);
  AddOutput(r, "FP16", Raw(std::vector<uint16_t>(kCount, FloatToHalf(-6.1035156e-05f))), kCount);
  AddOutput(r, "BF16", Raw(std::vector<uint16_t>(kCount, FloatToBFloat16(-1.1754944e-38f))),
            kCount);
  const OutputEncoding json;
  const InferResponseBody text = WriteInferResponse(r, json);
  const size_t bound = InferResponseJsonBytes(r, json);
  EXPECT_GE(bound, text.json.size());
  EXPECT_LE(bound, text.json.size() * 2) << "a bound far past the text refuses calls that fit";

  // Binary outputs are not in the text, and not in the bound.
  OutputEncoding binary;
  binary.binary_default = true;
  EXPECT_LT(InferResponseJsonBytes(r, binary), 8192u) << "names and parameters only";
  EXPECT_GE(InferResponseJsonBytes(r, binary), WriteInferResponse(r, binary).json.size());
}

}  // namespace
}  // namespace posenc
