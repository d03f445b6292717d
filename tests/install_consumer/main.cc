// consumer TARGET: health, then one sinusoidal Encode of [1, 4, 8] zeros through the installed
// posenc::client; prints the output's row 1 and checks it against sin/cos of position 1.
#include <cmath>
#include <cstdio>
#include <vector>

#include "client/posenc_client.h"
#include "client/tensor_proto.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  posenc::client::ClientOptions options;
  options.target = argv[1];
  auto client = posenc::client::PosencClient::Create(options);
  if (!client.ok()) return std::printf("%s\n", client.status().ToString().c_str()), 1;
  auto health = (*client)->Health();
  if (!health.ok() || *health != grpc::health::v1::HealthCheckResponse::SERVING) {
    return std::printf("health: not SERVING\n"), 1;
  }
  posenc::v1::EncodeRequest request;
  auto input = posenc::client::MakeTensor(std::vector<float>(32, 0.0f), {1, 4, 8});
  if (!input.ok()) return 1;
  *request.mutable_input() = *input;
  request.mutable_sinusoidal();
  auto response = (*client)->Encode(request);
  if (!response.ok()) return std::printf("%s\n", response.status().ToString().c_str()), 1;
  auto y = posenc::client::TensorToFloats(response->output(), "output");
  if (!y.ok()) return 1;
  double worst = 0;
  for (int j = 0; j < 8; ++j) {
    const double angle = std::pow(10000.0, -2.0 * (j / 2) / 8);
    worst = std::fmax(worst, std::fabs((*y)[8 + j] - (j % 2 ? std::cos(angle) : std::sin(angle))));
  }
  std::printf("consumer: Encode through the installed posenc::client, max error %.2e\n", worst);
  return worst < 1e-6 ? 0 : 1;
}
