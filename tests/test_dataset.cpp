#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <zlib.h>

#include "io/dataset.hpp"
#include "test_errors.hpp"
#include "test_util.hpp"

namespace canopy {
namespace {

std::string temp_file(const std::string& name, const std::string& text, bool gz = false) {
  const std::string path = ::testing::TempDir() + "/canopy_" + name;
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
  } else {
    std::ofstream(path) << text;
  }
  return path;
}

std::string error_of(const std::string& path, const std::string& cols = "") {
  return test::error_of([&] { read_csv(path, cols); });
}

TEST(ReadCsv, PlainAndGzipGiveTheSamePoints) {
  const std::string text = "a,b,c\n1,2,3\r\n4.5, 5e-1 ,-6\n\n7,8,9";  // CRLF, spaces, blank line, no final newline
  for (bool gz : {false, true}) {
    const PointSet ps = read_csv(temp_file(gz ? "a.csv.gz" : "a.csv", text, gz));
    EXPECT_EQ(ps.dims, 3);
    EXPECT_EQ(ps.size(), 3);
    EXPECT_EQ(ps.coords, (std::vector<float>{1, 2, 3, 4.5f, 0.5f, -6, 7, 8, 9}));
    EXPECT_EQ(ps.names, (std::vector<std::string>{"a", "b", "c"}));
  }
}

TEST(ReadCsv, ColumnSelection) {
  const std::string path = temp_file("cols.csv", "a,b,c,d\n1,2,3,4\n5,6,7,8\n");
  EXPECT_EQ(read_csv(path, "1-2").coords, (std::vector<float>{2, 3, 6, 7}));
  EXPECT_EQ(read_csv(path, "3,0").coords, (std::vector<float>{4, 1, 8, 5}));
  EXPECT_EQ(parse_columns("0-2, 5"), (std::vector<int>{0, 1, 2, 5}));
  EXPECT_THROW(parse_columns("3-1"), Error);
  EXPECT_THROW(parse_columns("x"), Error);
  // A short spec asking for millions of columns: refused before it allocates them.
  std::string many;
  for (int i = 0; i < 1000; ++i) many += (i ? "," : "") + std::string("0-1000000");
  EXPECT_HAS(test::error_of([&] { parse_columns(many); }), "names more than");
  const std::string e = error_of(path, "0-6");
  EXPECT_NE(e.find("column 4 is out of range"), std::string::npos) << e;
  EXPECT_NE(e.find("0..3"), std::string::npos) << e;
}

TEST(ReadCsv, ErrorsNameTheFileAndLine) {
  const std::string missing = ::testing::TempDir() + "/canopy_does_not_exist.csv";
  EXPECT_NE(error_of(missing).find("cannot open"), std::string::npos);
  EXPECT_NE(error_of(missing).find(missing), std::string::npos);

  const std::string short_row = temp_file("short.csv", "a,b\n1,2\n3,4\n5\n");
  const std::string e1 = error_of(short_row);
  EXPECT_NE(e1.find(short_row + ":4"), std::string::npos) << e1;
  EXPECT_NE(e1.find("expected 2 fields"), std::string::npos) << e1;

  const std::string text = temp_file("text.csv", "a,b\n1,2\n3,abc\n");
  const std::string e2 = error_of(text);
  EXPECT_NE(e2.find(":3: column 1 (b): 'abc' is not a number"), std::string::npos) << e2;

  const std::string nan = temp_file("nan.csv", "a,b\n1,nan\n");
  EXPECT_NE(error_of(nan).find(":2: column 1 (b): 'nan' is not finite"), std::string::npos) << error_of(nan);
  const std::string inf = temp_file("inf.csv", "a,b\n1,2\n-inf,2\n");
  EXPECT_NE(error_of(inf).find(":3: column 0 (a): '-inf' is not finite"), std::string::npos) << error_of(inf);
  const std::string empty_field = temp_file("emptyfield.csv", "a,b\n1,\n");
  EXPECT_NE(error_of(empty_field).find(":2:"), std::string::npos);

  EXPECT_NE(error_of(temp_file("empty.csv", "")).find("empty"), std::string::npos);
  EXPECT_NE(error_of(temp_file("header.csv", "a,b\n")).find("no data rows"), std::string::npos);
  const std::string badgz = temp_file("bad.csv.gz", "\x1f\x8b\x08garbage");
  EXPECT_NE(error_of(badgz).find(badgz), std::string::npos);
}

PointSet read_skipping(const std::string& path, const std::string& cols = "") {
  ReadOptions o;
  o.skip_incomplete = true;
  return read_csv(path, cols, o);
}

// Lines 3, 5 and 6 have an empty, blank or quoted-empty field in a chosen column; column d is
// not chosen (but in one check) and is empty on lines 2 and 4, which must not count.
const char* const kIncomplete =
    "a,b,c,d\n1,2,3,\n4,,6,7\n8,9,10,\n11,12, ,13\n\"\",14,15,16\n17,18,19,20\n";
const char* const kComplete = "a,b,c,d\n1,2,3,\n8,9,10,\n17,18,19,20\n";

TEST(ReadCsv, SkipIncompleteDropsAndCountsRows) {
  for (bool gz : {false, true}) {
    const std::string suffix = gz ? ".csv.gz" : ".csv";
    const PointSet ps = read_skipping(temp_file("incomplete" + suffix, kIncomplete, gz), "0-2");
    const PointSet ref = read_csv(temp_file("complete" + suffix, kComplete, gz), "0-2");
    EXPECT_EQ(ps.skipped_incomplete, 3) << (gz ? "gz" : "plain");
    EXPECT_EQ(ref.skipped_incomplete, 0);
    EXPECT_EQ(ps.size(), 3);
    EXPECT_EQ(ps.dims, ref.dims);
    EXPECT_EQ(ps.names, ref.names);
    EXPECT_EQ(ps.coords, ref.coords);
  }
}

TEST(ReadCsv, EmptyFieldIsAnErrorWithoutTheOption) {
  const std::string path = temp_file("incomplete_err.csv", kIncomplete);
  const std::string e = error_of(path, "0-2");
  EXPECT_HAS(e, path + ":3: column 1 (b) is empty");
  EXPECT_HAS(e, "--skip-incomplete");
  EXPECT_HAS(e, "ReadOptions::skip_incomplete");
  // Column d (3) is empty in rows 2 and 4: chosen, it is the first error.
  EXPECT_HAS(error_of(path, "3"), path + ":2: column 3 (d) is empty");
}

TEST(ReadCsv, EmptyFieldsInOtherColumnsNeverMatter) {
  const std::string path = temp_file("unchosen.csv", "a,b,c\n1,,3\n4,,6\n");
  for (bool skip : {false, true}) {
    ReadOptions o;
    o.skip_incomplete = skip;
    const PointSet ps = read_csv(path, "0,2", o);
    EXPECT_EQ(ps.coords, (std::vector<float>{1, 3, 4, 6}));
    EXPECT_EQ(ps.skipped_incomplete, 0);
  }
}

TEST(ReadCsv, SkipIncompleteKeepsTheOtherErrors) {
  // A short row is malformed, not incomplete; text, NaN and infinity stay errors even in a row
  // that also has an empty field.
  const std::string short_row = temp_file("inc_short.csv", "a,b,c\n1,2,3\n4,5\n");
  EXPECT_HAS(test::error_of([&] { read_skipping(short_row); }), short_row + ":3: expected 3 fields");
  const std::string text = temp_file("inc_text.csv", "a,b,c\n1,2,3\n,x,6\n");
  EXPECT_HAS(test::error_of([&] { read_skipping(text); }), ":3: column 1 (b): 'x' is not a number");
  const std::string nan = temp_file("inc_nan.csv", "a,b,c\n1,2,3\n,nan,6\n");
  EXPECT_HAS(test::error_of([&] { read_skipping(nan); }), ":3: column 1 (b): 'nan' is not finite");
  const std::string inf = temp_file("inc_inf.csv", "a,b,c\n1,2,3\ninf,,6\n");
  EXPECT_HAS(test::error_of([&] { read_skipping(inf); }), ":3: column 0 (a): 'inf' is not finite");
}

TEST(ReadCsv, EveryRowIncompleteIsAnError) {
  for (bool gz : {false, true}) {
    const std::string path = temp_file(gz ? "all_inc.csv.gz" : "all_inc.csv", "a,b\n1,\n, 2\n\n3, \n", gz);
    const std::string e = test::error_of([&] { read_skipping(path); });
    EXPECT_HAS(e, path + ": no complete data rows");
    EXPECT_HAS(e, "3 data rows");
  }
  // A file with no data rows at all keeps its own message.
  const std::string header = temp_file("inc_header.csv", "a,b\n");
  EXPECT_HAS(test::error_of([&] { read_skipping(header); }), "no data rows after the header");
}

TEST(ReadCsv, RealSubsets) {
  const PointSet cov = read_csv(test::data_path("covtype_4k.csv"), "0-6");
  EXPECT_EQ(cov.size(), 4000);
  EXPECT_EQ(cov.dims, 7);
  EXPECT_EQ(cov.names.front(), "Elevation");
  const PointSet cities = read_csv(test::data_path("cities_4k.csv"));
  EXPECT_EQ(cities.dims, 2);
  EXPECT_EQ(cities.names, (std::vector<std::string>{"lat", "lon"}));
}

TEST(Normalize, MapsEachDimensionOntoTheUnitInterval) {
  PointSet ps;
  ps.dims = 2;
  ps.coords = {2, 5, 4, 5, 3, 5};
  normalize_unit_cube(ps);
  EXPECT_EQ(ps.coords, (std::vector<float>{0, 0, 1, 0, 0.5f, 0}));
}

TEST(Generate, UniformIsSeededAndChecked) {
  const PointSet a = test::expect_seeded_set("uniform:1000:7", 1000, 7);
  for (float x : a.coords) {
    EXPECT_GE(x, 0.0f);
    EXPECT_LT(x, 1.0f);
  }
  EXPECT_THROW(generate("uniform:0:7", 1), Error);
  EXPECT_THROW(generate("uniform:10", 1), Error);
  EXPECT_THROW(generate("gauss:10:2", 1), Error);
  // Sizes no memory holds: an Error naming the spec, not std::bad_alloc.
  EXPECT_HAS(test::error_of([] { generate("uniform:4000000000000000000:2", 1); }), "uniform:4000000000000000000:2");
  EXPECT_HAS(test::error_of([] { generate("uniform:1000000000000:1000", 1); }), "do not fit in memory");
  EXPECT_HAS(test::error_of([] { generate("plummer:1000000000000000", 1); }), "plummer:1000000000000000");
}

TEST(Shuffle, IsAPermutationOfRows) {
  PointSet ps = generate("uniform:500:3", 1);
  PointSet s = ps;
  shuffle(s, 9);
  EXPECT_NE(s.coords, ps.coords);
  std::vector<std::vector<float>> a, b;
  for (index_t i = 0; i < 500; ++i) {
    a.emplace_back(ps.coords.begin() + i * 3, ps.coords.begin() + i * 3 + 3);
    b.emplace_back(s.coords.begin() + i * 3, s.coords.begin() + i * 3 + 3);
  }
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace canopy
