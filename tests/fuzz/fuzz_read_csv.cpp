// Fuzz target: read_csv (io/dataset.hpp) and read_forest_csv (io/forest_data.hpp) on a file of
// the input. Input: [mode][L][L bytes: columns or label][content]; mode bit 0: gzip the content,
// bit 1: read_forest_csv, bit 2: ReadOptions::skip_incomplete.
#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "io/dataset.hpp"
#include "io/forest_data.hpp"

using namespace canopy;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Bytes in(data, size);
  const std::uint8_t mode = in.u8();
  const std::string arg = in.take(in.u8() % 32);
  const std::string& path = fuzz::temp_path("csv");
  fuzz::write_file(path, in.rest(), in.left(), (mode & 1) != 0);
  if ((mode & 2) == 0) {
    fuzz::library_call([&] {
      ReadOptions opt;
      opt.skip_incomplete = (mode & 4) != 0;
      const PointSet ps = read_csv(path, arg, opt);
      CANOPY_FUZZ_CHECK(ps.skipped_incomplete >= 0 && (opt.skip_incomplete || ps.skipped_incomplete == 0),
                        "rows skipped without skip_incomplete");
      // What the header comment promises of a successful read.
      CANOPY_FUZZ_CHECK(ps.dims > 0 && ps.size() > 0, "empty point set returned");
      CANOPY_FUZZ_CHECK(ps.coords.size() == static_cast<std::size_t>(ps.size()) * ps.dims, "ragged coordinates");
      CANOPY_FUZZ_CHECK(ps.names.size() == static_cast<std::size_t>(ps.dims), "one name per column");
      for (float x : ps.coords) CANOPY_FUZZ_CHECK(std::isfinite(x), "a non-finite coordinate was accepted");
    });
  } else {
    fuzz::library_call([&] {
      const ForestData d = read_forest_csv(path, arg);
      CANOPY_FUZZ_CHECK(d.n_features >= 1 && d.n_rows >= 1, "empty data returned");
      CANOPY_FUZZ_CHECK(d.values.size() == static_cast<std::size_t>(d.n_rows) * d.n_features, "ragged rows");
      CANOPY_FUZZ_CHECK(d.feature_names.size() == static_cast<std::size_t>(d.n_features), "one name per feature");
      CANOPY_FUZZ_CHECK(d.labels.size() == (arg.empty() ? 0u : static_cast<std::size_t>(d.n_rows)),
                        "one label per row");
      for (double y : d.labels) CANOPY_FUZZ_CHECK(std::isfinite(y), "a non-finite label was accepted");
    });
  }
  return 0;
}
