// Tests for server/tables/table_file: --table specs, .npy and .safetensors tables written by
// this test and, independently, by numpy (tests/fixtures/gen_table_files.py).
#include "server/tables/table_file.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/tensor/npy.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::StatusIs;

using ::posenc::testing::IsOk;

using ::testing::HasSubstr;

constexpr int kRows = 5;
constexpr int kCols = 6;

// The values gen_table_files.py writes: float32((r*6+c)/7.0 - 3.0).
std::vector<float> ExpectedTable() {
  std::vector<float> v(kRows * kCols);
  for (int i = 0; i < kRows * kCols; ++i) v[i] = static_cast<float>(i / 7.0 - 3.0);
  return v;
}

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/table_file_test_" + name;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A safetensors image from an explicit JSON header text and data buffer.
std::string Safetensors(std::string header, const std::string& data) {
  while (header.size() % 8 != 0) header += ' ';
  std::string out;
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xff));
  return out + header + data;
}

TEST(ParseTableSpecTest, SplitsNpyAndSafetensors) {
  auto npy = ParseTableSpec("wpe=/models/gpt2/wpe.npy");
  ASSERT_THAT(npy, IsOk());
  EXPECT_EQ(npy->name, "wpe");
  EXPECT_EQ(npy->path, "/models/gpt2/wpe.npy");
  EXPECT_FALSE(npy->safetensors);

  auto st = ParseTableSpec("t5=/m/v1.0/model.safetensors:encoder.block.0.layer.0.rel_bias.weight");
  ASSERT_THAT(st, IsOk());
  EXPECT_EQ(st->name, "t5");
  EXPECT_EQ(st->path, "/m/v1.0/model.safetensors");
  EXPECT_EQ(st->tensor, "encoder.block.0.layer.0.rel_bias.weight");
  EXPECT_TRUE(st->safetensors);
}

TEST(ParseTableSpecTest, RejectsBadSpecs) {
  for (const char* spec : {"wpe.npy", "=x.npy", "a b=x.npy", "wpe=x.txt", "wpe=x.safetensors",
                           "wpe=x.safetensors:", "wpe="}) {
    auto parsed = ParseTableSpec(spec);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << spec;
    EXPECT_THAT(parsed.status().message(), HasSubstr(spec));
  }
  EXPECT_THAT(LoadTableSpec("wpe=x.bin"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--table 'wpe=x.bin': the path must end in .npy")));
}

TEST(LoadTableSpecTest, NpyFloat32AndFloat16) {
  const std::vector<float> expected = ExpectedTable();
  const std::string f32 = TempPath("f32.npy");
  ASSERT_THAT(WriteNpyFile(f32, DType::kFloat32, {kRows, kCols}, FloatBytes(expected)), IsOk());
  auto table = LoadTableSpec("learned=" + f32);
  ASSERT_THAT(table, IsOk());
  EXPECT_EQ(table->name, "learned");
  EXPECT_EQ(table->shape, (Shape{kRows, kCols}));
  EXPECT_EQ(table->source_dtype, DType::kFloat32);
  EXPECT_EQ(table->data, expected);

  std::vector<uint16_t> halves(expected.size());
  for (size_t i = 0; i < expected.size(); ++i) halves[i] = FloatToHalf(expected[i]);
  const std::string f16 = TempPath("f16.npy");
  ASSERT_THAT(
      WriteNpyFile(f16, DType::kFloat16, {kRows, kCols},
                   std::string(reinterpret_cast<const char*>(halves.data()), halves.size() * 2)),
      IsOk());
  table = LoadTableSpec("h=" + f16);
  ASSERT_THAT(table, IsOk());
  EXPECT_EQ(table->source_dtype, DType::kFloat16);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(table->data[i], HalfToFloat(halves[i]));
}

// float64 files are held as float32 (rounded once) and keep their own values beside.
TEST(LoadTableSpecTest, NpyFloat64KeepsItsValues) {
  std::vector<double> values(kRows * kCols);
  for (int i = 0; i < kRows * kCols; ++i) values[i] = i / 7.0 - 3.0 + 1e-12 * i;
  const std::string path = TempPath("f64.npy");
  ASSERT_THAT(WriteNpyFile(path, DType::kFloat64, {kRows, kCols},
                           std::string(reinterpret_cast<const char*>(values.data()),
                                       values.size() * sizeof(double))),
              IsOk());
  auto table = LoadTableSpec("b=" + path);
  ASSERT_THAT(table, IsOk());
  EXPECT_EQ(table->source_dtype, DType::kFloat64);
  EXPECT_EQ(table->shape, (Shape{kRows, kCols}));
  EXPECT_EQ(table->float64_data, values);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(table->data[i], static_cast<float>(values[i]));
  }
}

TEST(LoadTableSpecTest, NpyErrors) {
  auto missing = LoadTableSpec("x=" + TempPath("missing.npy"));
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kNotFound,
                                HasSubstr("table_file_test_missing.npy: cannot open")));

  const std::string one_d = TempPath("1d.npy");
  ASSERT_THAT(WriteNpyFile(one_d, DType::kFloat32, {3}, FloatBytes({1, 2, 3})), IsOk());
  auto rank = LoadTableSpec("x=" + one_d);
  EXPECT_EQ(rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rank.status().message(), HasSubstr("[3]"));
  EXPECT_THAT(rank.status().message(), HasSubstr("2-D"));

  const std::string ints = TempPath("i32.npy");
  const std::vector<int32_t> i32 = {1, 2};
  ASSERT_THAT(WriteNpyFile(ints, DType::kInt32, {1, 2},
                           std::string(reinterpret_cast<const char*>(i32.data()), 8)),
              IsOk());
  EXPECT_THAT(LoadTableSpec("x=" + ints),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has dtype INT32")));

  const std::string empty = TempPath("empty.npy");
  ASSERT_THAT(WriteNpyFile(empty, DType::kFloat32, {0, 4}, ""), IsOk());
  EXPECT_THAT(LoadTableSpec("x=" + empty),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("has shape [0,4]; it must not be empty")));

  const std::string nan = TempPath("nan.npy");
  ASSERT_THAT(WriteNpyFile(nan, DType::kFloat32, {1, 2}, FloatBytes({1.0f, std::nanf("")})),
              IsOk());
  auto non_finite = LoadTableSpec("x=" + nan);
  EXPECT_EQ(non_finite.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(non_finite.status().message(), HasSubstr("[0,1]"));
}

TEST(LoadTableSpecTest, SafetensorsDtypes) {
  const std::vector<float> expected = ExpectedTable();
  std::string f16, bf16;
  for (float v : expected) {
    const uint16_t h = FloatToHalf(v), b = FloatToBFloat16(v);
    f16.append(reinterpret_cast<const char*>(&h), 2);
    bf16.append(reinterpret_cast<const char*>(&b), 2);
  }
  std::vector<double> f64(expected.begin(), expected.end());
  f64[1] = 0.1;  // not a float32 value
  const std::string data =
      FloatBytes(expected) + f16 + bf16 +
      std::string(reinterpret_cast<const char*>(f64.data()), f64.size() * sizeof(double));
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("a":{"dtype":"F32","shape":[5,6],"data_offsets":[0,120]},)"
                             R"("b":{"dtype":"F16","shape":[5,6],"data_offsets":[120,180]},)"
                             R"("c":{"dtype":"BF16","shape":[5,6],"data_offsets":[180,240]},)"
                             R"("d":{"dtype":"F64","shape":[5,6],"data_offsets":[240,480]}})";
  const std::string path = TempPath("dtypes.safetensors");
  WriteFile(path, Safetensors(header, data));

  auto a = LoadTableSpec("a=" + path + ":a");
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(a->data, expected);
  EXPECT_EQ(a->source_dtype, DType::kFloat32);
  auto b = LoadTableSpec("b=" + path + ":b");
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(b->source_dtype, DType::kFloat16);
  auto c = LoadTableSpec("c=" + path + ":c");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->source_dtype, DType::kBFloat16);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(b->data[i], HalfToFloat(FloatToHalf(expected[i])));
    EXPECT_EQ(c->data[i], BFloat16ToFloat(FloatToBFloat16(expected[i])));
  }
  auto d = LoadTableSpec("d=" + path + ":d");
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(d->source_dtype, DType::kFloat64);
  EXPECT_EQ(d->float64_data, f64);
  EXPECT_EQ(d->data[1], 0.1f);
}

TEST(LoadTableSpecTest, SafetensorsUnknownTensorListsTheOthers) {
  const std::string path = TempPath("names.safetensors");
  WriteFile(path, Safetensors(R"({"pos.weight":{"dtype":"F32","shape":[1,1],"data_offsets":[0,4]},)"
                              R"("tok.weight":{"dtype":"F32","shape":[1,1],"data_offsets":[4,8]}})",
                              FloatBytes({1, 2})));
  auto missing = LoadTableSpec("x=" + path + ":wpe");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("'wpe'"));
  EXPECT_THAT(missing.status().message(), HasSubstr("pos.weight, tok.weight"));
  EXPECT_THAT(LoadTableSpec("x=" + path + ":__metadata__"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("no tensor '__metadata__'; it has: pos.weight, tok.weight")));
  EXPECT_THAT(LoadTableSpec("x=" + TempPath("nope.safetensors") + ":a"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope.safetensors: cannot open")));
}

TEST(LoadTableSpecTest, SafetensorsMalformed) {
  const std::string four_floats = FloatBytes({1, 2, 3, 4});
  struct Case {
    std::string image;
    std::string expect;
  };
  const Case cases[] = {
      {"abc", "only 3 bytes"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8), "exceeds"},
      {std::string("\x40\x00\x00\x00\x00\x00\x00\x00{}", 10), "runs past"},
      {Safetensors("[1,2]", four_floats), "not a JSON object"},
      {Safetensors("{not json", four_floats), "not a JSON object"},
      {Safetensors(R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,32]}})", four_floats),
       "outside"},
      {Safetensors(R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[8,4]}})", four_floats),
       "outside"},
      {Safetensors(R"({"t":{"dtype":"F32","shape":[3,2],"data_offsets":[0,16]}})", four_floats),
       "needs 24"},
      {Safetensors(R"({"t":{"dtype":"F32","shape":[2,-2],"data_offsets":[0,16]}})", four_floats),
       "shape"},
      {Safetensors(R"({"t":{"dtype":"F32","shape":[2,2]}})", four_floats), "data_offsets"},
      {Safetensors(R"({"t":{"dtype":"I64","shape":[2,1],"data_offsets":[0,16]}})", four_floats),
       "I64"},
      {Safetensors(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", four_floats),
       "2-D"},
      {Safetensors(R"({"t":{"dtype":"F32","shape":[1,2,2],"data_offsets":[0,16]}})", four_floats),
       "[1,2,2]"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const std::string path = TempPath("bad" + std::to_string(i) + ".safetensors");
    WriteFile(path, cases[i].image);
    auto table = LoadTableSpec("x=" + path + ":t");
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument)
        << i << ": " << table.status();
    EXPECT_THAT(table.status().message(), HasSubstr(cases[i].expect)) << i;
  }
}

// Files written by numpy, not by us: catches a reader and writer that agree on a mistake.
TEST(LoadTableSpecTest, ReadsFilesWrittenByNumpy) {
  const char* source = std::getenv("POSENC_SOURCE_DIR");
  std::string script =
      source ? std::string(source)
             : std::string(__FILE__).substr(0, std::string(__FILE__).rfind("/tests/"));
  script += "/tests/fixtures/gen_table_files.py";
  const std::string out = TempPath("numpy");
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with numpy is not available";
  }
  ASSERT_EQ(std::system(("/usr/bin/python3 '" + script + "' '" + out + "'").c_str()), 0) << script;

  const std::vector<float> expected = ExpectedTable();
  for (const char* file : {"table_f32.npy", "table_v2.npy", "table_v3.npy"}) {
    auto table = LoadTableSpec(std::string("t=") + out + "/" + file);
    ASSERT_THAT(table, IsOk()) << file << ": " << table.status();
    EXPECT_EQ(table->shape, (Shape{kRows, kCols})) << file;
    EXPECT_EQ(table->data, expected) << file;
  }
  auto f16 = LoadTableSpec("t=" + out + "/table_f16.npy");
  ASSERT_THAT(f16, IsOk());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(f16->data[i], HalfToFloat(FloatToHalf(expected[i])));

  auto fortran = LoadTableSpec("t=" + out + "/table_fortran.npy");
  EXPECT_EQ(fortran.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(fortran.status().message(), HasSubstr("table_fortran.npy"));
  EXPECT_THAT(LoadTableSpec("t=" + out + "/table_3d.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("has shape [1,5,6]; a table must be 2-D")));
  EXPECT_THAT(LoadTableSpec("t=" + out + "/table_i32.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has dtype INT32")));

  const std::string st = out + "/tables.safetensors";
  auto f32 = LoadTableSpec("t=" + st + ":pos.weight");
  ASSERT_THAT(f32, IsOk());
  EXPECT_EQ(f32->data, expected);
  auto half = LoadTableSpec("t=" + st + ":pos_f16");
  ASSERT_THAT(half, IsOk());
  auto bf16 = LoadTableSpec("t=" + st + ":pos_bf16");
  ASSERT_THAT(bf16, IsOk());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(half->data[i], HalfToFloat(FloatToHalf(expected[i]))) << i;
    EXPECT_EQ(bf16->data[i], BFloat16ToFloat(FloatToBFloat16(expected[i]))) << i;
  }
  EXPECT_THAT(LoadTableSpec("t=" + st + ":vec"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("has shape [6]; a table must be 2-D")));
  EXPECT_THAT(LoadTableSpec("t=" + st + ":ids"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                          HasSubstr("tensor 'ids' has dtype I64")));
  auto unknown = LoadTableSpec("t=" + st + ":wpe");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("pos_bf16"));
}

}  // namespace
}  // namespace posenc
