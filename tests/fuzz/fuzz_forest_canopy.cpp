// Fuzz target: the Canopy forest JSON importer through Forest::load (a file, plain or gzip),
// layouts/forest.hpp. Input: [mode][JSON text]; mode bit 0: gzip the file.
#include <cstdint>
#include <string>

#include "fuzz_forest.hpp"

using namespace canopy;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Bytes in(data, size);
  const std::uint8_t mode = in.u8();
  const std::string& path = fuzz::temp_path("forest");
  fuzz::write_file(path, in.rest(), in.left(), (mode & 1) != 0);
  fuzz::library_call([&] {
    const Forest f = Forest::load(path);
    fuzz::check_forest(f);
    fuzz::predict_smoke(f);
  });
  return 0;
}
