// `posenc-client plot`: asks a running server for a table or bias and draws it as a PNG
// heatmap (client/heatmap_png.h): sinusoidal rows, RoPE cos|sin, ALiBi and T5 biases (one
// panel per head), a grid graph's Laplacian eigenvectors (one panel per vector).
#pragma once

#include <string>
#include <vector>

namespace posenc::client {

// `args` are the flags after "plot". Exit status: 0 done, 1 the call failed, 2 bad flags.
int RunPlotCommand(const std::vector<std::string>& args);

}  // namespace posenc::client
