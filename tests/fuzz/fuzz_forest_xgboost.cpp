// Fuzz target: the XGBoost JSON model importer (Forest::parse, layouts/forest.hpp) on the
// input as JSON text; an imported model is checked against the normalised convention and run.
#include <cstdint>
#include <string>

#include "fuzz_forest.hpp"

using namespace canopy;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::library_call([&] {
    const Forest f = Forest::parse(text, "fuzz.json");
    fuzz::check_forest(f);
    fuzz::predict_smoke(f);
  });
  return 0;
}
