// Fuzz target: the command-line spec parsers of io/dataset.hpp, parse_columns ("0-6,9") and
// generate ("uniform:N:D", "plummer:N"). Input: [selector][spec text]; selector bit 0 picks.
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "io/dataset.hpp"

using namespace canopy;

namespace {

// Coordinates the target lets generate() produce. The library has no upper bound on N or D,
// so a valid "uniform:999999999:3" would allocate gigabytes: such specs are not run.
constexpr long long kMaxCoords = 1 << 12;

// The spec's numbers as generate() reads them (':' and ',' separate fields; strtoll, no
// trailing text); false where generate() must reject the spec anyway.
bool numbers_of(const std::string& spec, std::vector<std::string>& parts, std::vector<long long>& nums) {
  std::string s = spec;
  std::replace(s.begin(), s.end(), ':', ',');
  parts.clear();
  std::size_t start = 0;
  for (;;) {
    const std::size_t c = s.find(',', start);
    parts.push_back(s.substr(start, c == std::string::npos ? std::string::npos : c - start));
    if (c == std::string::npos) break;
    start = c + 1;
  }
  nums.clear();
  for (std::size_t i = 1; i < parts.size(); ++i) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(parts[i].c_str(), &end, 10);
    if (parts[i].empty() || *end != '\0' || errno || v <= 0) return false;
    nums.push_back(v);
  }
  return true;
}

void fuzz_generate(const std::string& spec, std::uint64_t seed) {
  std::vector<std::string> parts;
  std::vector<long long> nums;
  const bool valid = numbers_of(spec, parts, nums);
  const bool uniform = valid && parts.size() == 3 && parts[0] == "uniform";
  const bool plummer = valid && parts.size() == 2 && parts[0] == "plummer";
  long long n = 0, d = 0;
  if (uniform) n = nums[0], d = nums[1];
  if (plummer) n = nums[0], d = 3;
  // Specs the library must refuse without allocating (D beyond int, N x D beyond what a
  // vector can hold) still run: they are the regression cases of the size checks.
  const bool product_overflows = (uniform || plummer) && n > LLONG_MAX / d;
  const bool must_refuse = (uniform && d > INT_MAX) || product_overflows ||
                           ((uniform || plummer) && static_cast<unsigned long long>(n) * static_cast<unsigned long long>(d) >
                                                        std::vector<float>().max_size());
  if ((uniform || plummer) && !must_refuse && n * d > kMaxCoords) return;
  const bool ok = fuzz::library_call([&] {
    const PointSet ps = generate(spec, seed);
    CANOPY_FUZZ_CHECK(uniform || plummer, "accepted: " + spec);
    CANOPY_FUZZ_CHECK(!must_refuse, "a spec beyond the sizes a vector holds was accepted: " + spec);
    CANOPY_FUZZ_CHECK(ps.size() == n && ps.dims == d, "wrong shape for " + spec);
    CANOPY_FUZZ_CHECK(ps.names.size() == static_cast<std::size_t>(d), "one name per dimension");
    for (float x : ps.coords) {
      if (uniform) CANOPY_FUZZ_CHECK(x >= 0.0f && x < 1.0f, "a uniform coordinate outside [0, 1)");
      if (plummer) CANOPY_FUZZ_CHECK(std::fabs(x) <= 20.0f, "a Plummer coordinate beyond the cutoff");
    }
  });
  if (!ok) CANOPY_FUZZ_CHECK(!(uniform || plummer) || must_refuse, "a valid spec was refused: " + spec);
}

void fuzz_columns(const std::string& spec) {
  // Every part may be a range of a million columns and the library does not cap their total:
  // long specs would allocate gigabytes, so the target stops at 64 bytes (~7 full ranges).
  if (spec.size() > 64) return;
  fuzz::library_call([&] {
    const std::vector<int> cols = parse_columns(spec);
    for (int c : cols) CANOPY_FUZZ_CHECK(c >= 0 && c <= 1000000, "column number out of range in " + spec);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Bytes in(data, size);
  const std::uint8_t selector = in.u8();
  const std::string spec = in.take(in.left());
  if (selector & 1) fuzz_generate(spec, selector >> 1);
  else fuzz_columns(spec);
  return 0;
}
