// posenc-client infer: one ModelInfer call of the Open Inference Protocol (KServe v2 /
// Triton gRPC) to posenc, the way any OIP client makes it. See kInferUsage.
//
//   posenc-client infer --model rope --shape 1,8,2,16 --config '{"base": 500000}'
#pragma once

#include <string>
#include <vector>

namespace posenc::client {

extern const char kInferUsage[];

// `args` are the flags after "infer". Exit code: 0 ok, 1 the call failed, 2 usage or a local
// file error.
int RunInferCommand(const std::vector<std::string>& args);

}  // namespace posenc::client
