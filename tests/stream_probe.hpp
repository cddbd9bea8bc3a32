// Test-only CUDA helpers behind a CUDA-free interface: detecting work on the legacy default
// stream, and caller-owned streams.
#pragma once

#include <cstddef>
#include <functional>

namespace canopy {
namespace test {

// Runs `call` on another host thread while a kernel on a *blocking* stream spins until it is
// released. Work on the legacy default stream (or a device-wide synchronisation) would wait
// for that kernel, so a call that uses neither finishes while it spins. Returns whether `call`
// finished within timeout_s; the kernel is released either way. Rethrows call's exception.
bool finishes_beside_a_blocking_stream(const std::function<void()>& call, double timeout_s);

// A non-blocking stream of the caller's (an opaque cudaStream_t), and its synchronisation.
void* make_stream();
// Enqueues on stream `s` a kernel that spins for delay_ms, then a copy of `bytes` from src to
// dst (any of host, pinned or device memory): a write that lands well after this returns.
void copy_after_delay(void* dst, const void* src, std::size_t bytes, double delay_ms, void* s);
void sync_stream(void* s);
void destroy_stream(void* s);

}  // namespace test
}  // namespace canopy

namespace canopy {
namespace test {
// Work that does use the legacy default stream (a memset on stream 0): the probe's own check.
void legacy_stream_work();
// Device memory for caller-buffer tests.
void* device_alloc(std::size_t bytes);
void device_free(void* p);
}  // namespace test
}  // namespace canopy
