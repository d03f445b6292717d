// Tests for server/tensor/npy: round trips, byte-exact agreement with numpy's writer, the
// 2.0/3.0 headers, and every malformed-file path (which must fail without allocating).
#include "server/tensor/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::StatusIs;

using ::posenc::testing::IsOk;

using ::testing::HasSubstr;

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// An .npy image with an arbitrary header dict, for the malformed cases.
std::string Image(const std::string& dict, const std::string& data, int major = 1) {
  std::string header = dict;
  const size_t preamble = major == 1 ? 10 : 12;
  while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  const size_t width = preamble - 8;
  for (size_t i = 0; i < width; ++i)
    out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return out + header + data;
}

TEST(NpyTest, MatchesNumpyBytes) {
  // The headers np.save (numpy 1.24) writes for these arrays, byte for byte.
  const std::vector<float> f32 = {0, 1, 2, 3, 4, 5};
  auto image = SerializeNpy(DType::kFloat32, {2, 3}, Bytes(f32));
  ASSERT_THAT(image, IsOk());
  const std::string numpy_header = std::string("\x93NUMPY\x01\x00v\x00", 10) +
                                   "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" +
                                   std::string(58, ' ') + "\n";
  EXPECT_EQ(*image, numpy_header + Bytes(f32));

  const std::vector<int64_t> i64 = {0, 1, 2, 3, 4};
  image = SerializeNpy(DType::kInt64, {5}, Bytes(i64));
  ASSERT_THAT(image, IsOk());
  EXPECT_EQ(image->substr(0, 128), std::string("\x93NUMPY\x01\x00v\x00", 10) +
                                       "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }" +
                                       std::string(60, ' ') + "\n");

  const std::vector<uint16_t> scalar = {FloatToHalf(1.5f)};
  image = SerializeNpy(DType::kFloat16, {}, Bytes(scalar));
  ASSERT_THAT(image, IsOk());
  EXPECT_THAT(*image, HasSubstr("'shape': (), }"));
  EXPECT_EQ(image->size(), 130u);
}

TEST(NpyTest, RoundTripsEveryDtype) {
  const std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 1e-8f};
  const std::vector<uint16_t> f16 = {FloatToHalf(0.5f), FloatToHalf(-1.0f), FloatToHalf(65504.0f)};
  const std::vector<int32_t> i32 = {-7, 0, 7, 2147483647};
  const std::vector<int64_t> i64 = {-1, int64_t{1} << 40};
  struct Case {
    DType dtype;
    Shape shape;
    std::string data;
  };
  const Case cases[] = {{DType::kFloat32, {2, 2}, Bytes(f32)},
                        {DType::kFloat16, {3}, Bytes(f16)},
                        {DType::kInt32, {1, 2, 2}, Bytes(i32)},
                        {DType::kInt64, {2, 1}, Bytes(i64)},
                        {DType::kFloat32, {0, 4}, ""}};
  for (const Case& c : cases) {
    auto image = SerializeNpy(c.dtype, c.shape, c.data);
    ASSERT_THAT(image, IsOk());
    auto parsed = ParseNpy(*image, "mem");
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(parsed->dtype, c.dtype);
    EXPECT_EQ(parsed->shape, c.shape);
    EXPECT_EQ(parsed->data, c.data);
    auto header = ParseNpyHeader(*image, "mem");
    ASSERT_THAT(header, IsOk());
    EXPECT_EQ(header->data_offset % 64, 0u);
    EXPECT_EQ(header->data_bytes, c.data.size());
  }
}

TEST(NpyTest, ReadsVersion2And3AndLooseHeaders) {
  const std::vector<float> f32 = {1, 2, 3, 4, 5, 6};
  for (int major : {2, 3}) {
    auto parsed = ParseNpy(Image("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }",
                                 Bytes(f32), major),
                           "v");
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(parsed->shape, (Shape{3, 2}));
    EXPECT_EQ(parsed->data, Bytes(f32));
  }
  // Other key order, double quotes, no trailing comma, Python 2 long suffix.
  auto parsed = ParseNpy(Image("{\"shape\": (6L,), \"fortran_order\": False, \"descr\": \"<f4\"}",
                               Bytes(f32)),
                         "loose");
  ASSERT_THAT(parsed, IsOk());
  EXPECT_EQ(parsed->shape, (Shape{6}));
}

TEST(NpyTest, RejectsFortranOrderNamingTheFile) {
  const std::vector<float> f32 = {1, 2, 3, 4};
  auto parsed =
      ParseNpy(Image("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", Bytes(f32)),
               "weights.npy");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("weights.npy"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("fortran_order"));
}

TEST(NpyTest, RejectsMalformedInput) {
  const std::vector<float> four = {1, 2, 3, 4};
  struct Case {
    std::string image;
    std::string expect;
  };
  const Case cases[] = {
      {"", "magic"},
      {"\x93NUMPX\x01\x00\x10\x00", "magic"},
      {Image("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", Bytes(four)), "'>f4'"},
      {Image("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", Bytes(four)), "'<c8'"},
      {Image("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", Bytes(four)), "needs 20"},
      {Image("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", Bytes(four)), "needs 12"},
      {Image("{'descr': '<f4', 'shape': (4,), }", Bytes(four)), "lacks"},
      {Image("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", Bytes(four)),
       "'x'"},
      {Image("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", Bytes(four)), "shape"},
      {Image("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (4,), }", Bytes(four)),
       "fortran_order"},
      {Image("{'descr': '<f4', 'fortran_order': False, 'shape': (4,) ", Bytes(four)), ""},
      // 2^40 x 2^40 elements: rejected from the header alone.
      {Image("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }",
             ""),
       "2^40"},
      {Image("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }", ""),
       "too large"},
      {std::string("\x93NUMPY\x01\x00\xff\xff", 10) + "{}", "truncated"},
      {std::string("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12), "exceeds"},
      {std::string("\x93NUMPY\x04\x00\x10\x00", 10), "version 4.0"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseNpy(c.image, "bad.npy");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.expect;
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.expect));
    EXPECT_THAT(parsed.status().message(), HasSubstr("bad.npy"));
  }
}

TEST(NpyTest, SerializeRejectsBfloat16AndSizeMismatch) {
  EXPECT_THAT(SerializeNpy(DType::kBFloat16, {1}, "ab"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no bfloat16 dtype")));
  EXPECT_THAT(SerializeNpy(DType::kFloat32, {2}, "abcd"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shape [2] of FLOAT32 needs 8 bytes, got 4")));
}

TEST(NpyTest, FilesRoundTripAndErrors) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/npy_test_roundtrip.npy";
  const std::vector<float> f32 = {0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f};
  ASSERT_THAT(WriteNpyFile(path, DType::kFloat32, {3, 2}, Bytes(f32)), IsOk());
  auto read = ReadNpyFile(path);
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(read->shape, (Shape{3, 2}));
  EXPECT_EQ(read->data, Bytes(f32));
  EXPECT_EQ(read->view().NumElements(), 6);

  auto missing = ReadNpyFile(dir + "/npy_test_does_not_exist.npy");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("npy_test_does_not_exist.npy"));

  EXPECT_THAT(WriteNpyFile(dir + "/no/such/dir/x.npy", DType::kFloat32, {1},
                           Bytes(std::vector<float>{1})),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("x.npy: cannot create")));

  // A header that claims far more data than the file holds fails before allocating it.
  const std::string lying = dir + "/npy_test_lying.npy";
  std::ofstream(lying, std::ios::binary)
      << Image("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 100), }", "abcd");
  auto bad = ReadNpyFile(lying);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("the file has 4"));

  // Truncated inside the header.
  const std::string truncated = dir + "/npy_test_truncated.npy";
  std::ofstream(truncated, std::ios::binary)
      << std::string("\x93NUMPY\x01\x00\x40\x00{'descr'", 18);
  EXPECT_THAT(ReadNpyFile(truncated), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("header of 64 bytes is truncated")));

  const std::string empty = dir + "/npy_test_empty.npy";
  std::ofstream(empty, std::ios::binary).flush();
  EXPECT_THAT(ReadNpyFile(empty),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NUMPY magic")));
}

}  // namespace
}  // namespace posenc
