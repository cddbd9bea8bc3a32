#include "runtime/ragged.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace canopy {
namespace detail {
namespace {

std::string mib(std::size_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

constexpr index_t kCubMaxItems = std::numeric_limits<std::int32_t>::max();

}  // namespace

void check_ragged_call(const char* who, index_t n, const index_t* offsets) {
  if (n < 0) throw Error(std::string(who) + ": n_queries = " + std::to_string(n) + " is negative");
  if (!offsets) throw Error(std::string(who) + ": the offsets buffer (n_queries + 1 entries) is null");
}

index_t exclusive_scan(const index_t* counts, index_t n, index_t* offsets) {
  index_t sum = 0;
  for (index_t q = 0; q < n; ++q) {
    offsets[q] = sum;
    sum += counts[q];
  }
  offsets[n] = sum;
  return sum;
}

const index_t* fill_order(const TraversalStats& count_pass) {
  if (count_pass.schedule.order.empty() || count_pass.schedule_kind == ScheduleKind::InputOrder) return nullptr;
  return count_pass.schedule.order.data();
}

void check_item_buffer(const char* who, const void* items, index_t total) {
  if (total > 0 && !items)
    throw Error(std::string(who) + ": the item buffer for " + std::to_string(total) + " items is null");
}

void throw_pass_mismatch(const char* who) {
  throw Error(std::string(who) +
              ": the visitor emitted another number of items in the fill pass than in the count pass; a ragged "
              "visitor's items must not depend on the order it visits nodes in (runtime/ragged.hpp)");
}

void throw_host_out_of_memory(const char* who, index_t total, std::size_t item_bytes) {
  throw OutOfMemory(std::string(who) + ": " + std::to_string(total) + " items (" +
                    mib(static_cast<std::size_t>(total) * item_bytes) + ") do not fit in host memory");
}

index_t ragged_batch_capacity(std::size_t budget, std::size_t used, std::size_t free_bytes, std::size_t item_bytes) {
  std::size_t room = 0;
  if (budget > 0)
    room = budget > used ? budget - used : 0;
  else
    room = free_bytes - free_bytes / 16;
  const std::size_t items = item_bytes ? room / item_bytes : static_cast<std::size_t>(kCubMaxItems);
  return static_cast<index_t>(std::min<std::size_t>(items, static_cast<std::size_t>(kCubMaxItems)));
}

std::vector<index_t> ragged_batches(const index_t* offsets, index_t n, index_t capacity, std::size_t item_bytes,
                                    const char* who) {
  std::vector<index_t> bounds{0};
  for (index_t a = 0; a < n;) {
    // The last query b - 1 whose items end within capacity of offsets[a].
    const index_t* end = std::upper_bound(offsets + a + 1, offsets + n + 1, offsets[a] + capacity);
    index_t b = static_cast<index_t>(end - offsets) - 1;
    b = std::min(b, a + kCubMaxItems - 1);
    if (b == a) {
      const index_t count = offsets[a + 1] - offsets[a];
      throw OutOfMemory(std::string(who) + ": query " + std::to_string(a) + " has " + std::to_string(count) +
                        " items (" + mib(static_cast<std::size_t>(count) * item_bytes) +
                        " on the device), more than the device memory left for a batch of items holds (" +
                        std::to_string(capacity) + " items, " + mib(static_cast<std::size_t>(capacity) * item_bytes) +
                        "; the memory budget or the free memory)");
    }
    bounds.push_back(b);
    a = b;
  }
  if (n == 0) bounds.push_back(0);
  return bounds;
}

std::vector<index_t> split_order(const index_t* order, index_t n, const std::vector<index_t>& bounds) {
  std::vector<index_t> next(bounds.begin(), bounds.end() - 1);  // the next free position of each batch
  std::vector<index_t> out(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) {
    const index_t q = order ? order[i] : i;
    const std::size_t b = static_cast<std::size_t>(std::upper_bound(bounds.begin(), bounds.end(), q) - bounds.begin()) - 1;
    out[static_cast<std::size_t>(next[b]++)] = q;
  }
  return out;
}

}  // namespace detail
}  // namespace canopy
