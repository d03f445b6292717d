#include "tests/support/npy_writer.h"

#include <fstream>

namespace posenc::testing {

std::string WriteNpyF32(const std::string& dir, const std::string& name, int64_t rows, int64_t cols,
                        const std::vector<float>& values) {
  const std::string path = dir + "/" + name;
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  header.append(128 - 10 - header.size() - 1, ' ');  // 64-byte aligned, as numpy writes it
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  f.write(reinterpret_cast<const char*>(&len), 2);
  f << header;
  f.write(reinterpret_cast<const char*>(values.data()),
          static_cast<std::streamsize>(values.size() * 4));
  return path;
}

}  // namespace posenc::testing
