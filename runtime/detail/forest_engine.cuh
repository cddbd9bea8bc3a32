// Internal: the state of a ForestGpuEngine, shared by runtime/forest_gpu.cu (the three seed
// layouts) and runtime/forest_adaptive_gpu.cu (the adaptive layout's strategies).
#pragma once

#include <memory>
#include <vector>

#include "executor/forest_adaptive_launch.cuh"
#include "core/cuda.cuh"
#include "runtime/detail/forest_engine.hpp"
#include "scheduler/forest_model.hpp"
#include "scheduler/forest_rows.hpp"

namespace canopy {
namespace detail {

struct ForestGpuEngine::Impl {
  ForestLayout layout = ForestLayout::Csr;
  CsrForestView csr;  // device pointers
  ReorgForestView reorg;
  HierarchicalForestView hier;
  AdaptiveForestView adaptive;
  Stream stream;  // first: the buffers below are freed in order on it
  Event start, uploaded, scheduled, computed, done;
  std::vector<DeviceBuffer<unsigned char>> arrays;  // every uploaded layout array
  DeviceBuffer<float> rows, out;
  int sm_count = 1;
  std::size_t smem_optin = 48 * 1024;
  int n_features = 0;

  // Adaptive layout: what the host knows of it, and the buffers of its strategies.
  std::vector<index_t> tree_begin;  // host copy
  double mean_visits = 0;           // expected nodes per tree and row
  int max_depth = 0;
  DeviceBuffer<unsigned char> carry;  // splitting shared forest: sums between parts
  DeviceBuffer<std::uint64_t> keys, keys_sorted;
  DeviceBuffer<index_t> index, order;
  DeviceBuffer<float> rows_sorted;  // row scheduling: the rows in execution order
  DeviceBuffer<unsigned char> sort_temp;
  std::unique_ptr<ForestHardware> hardware;
  std::string hardware_path;
  const AdaptiveForest* host = nullptr;  // the predictor's host copy (it outlives the engine)
  std::unique_ptr<ForestAccessProfile> profile;  // the warp emulator's coalescing, on the first batch seen
  // Each strategy's time per row on this forest with the GPU full, and its time for a small
  // batch (default schedules), timed once on batches built from the first batch seen.
  struct Calibration {
    ForestKernel kernel;
    double row_ns = 0;    // per row, the GPU full
    double small_ns = 0;  // a small batch, whole
  };
  std::vector<Calibration> calibrated;
  void calibrate(const float* rows, index_t n_rows);

  Impl();

  template <class T>
  const T* upload(const std::vector<T>& v, const char* what) {
    if (v.empty()) return nullptr;
    DeviceBuffer<unsigned char> buf;
    buf.reserve(v.size() * sizeof(T), what, stream.get());
    CANOPY_CUDA_CHECK(cudaMemcpyAsync(buf.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream.get()));
    arrays.push_back(std::move(buf));
    return reinterpret_cast<const T*>(arrays.back().get());
  }
  ForestCommonView upload_common(const ForestCommon& c);

  gpu::AdaptiveDevice device() const {
    gpu::AdaptiveDevice d;
    d.sm_count = sm_count;
    d.smem_optin = smem_optin;
    d.stream = stream.get();
    return d;
  }

  // Adaptive layout (runtime/forest_adaptive_gpu.cu).
  ForestSchedule resolve(ForestKernel k, const ForestSchedule& s, index_t n_rows) const;
  std::vector<std::pair<index_t, index_t>> parts(std::size_t part_bytes) const;  // canonical tree ranges
  std::size_t part_budget(ForestKernel k, const ForestSchedule& s) const;  // bytes of nodes a part may take
  void run_adaptive(const gpu::AdaptiveBatch& b, ForestKernel k, const ForestSchedule& s);
  // Kernel milliseconds of `runs` runs after a warm-up, fastest first (CUDA events).
  std::vector<float> time_runs(const gpu::AdaptiveBatch& b, ForestKernel k, const ForestSchedule& s, int runs);
  // Sorts the uploaded rows by their inspector keys into rows_sorted; returns the device order.
  const index_t* schedule_rows(index_t n_rows, int depth);
  const ForestHardware& hardware_params(const std::string& cache);
  // Canopy's model (runtime/forest_model.hpp) for this batch, feasible and fastest first.
  std::vector<ForestTrial> estimates(const float* rows, index_t n_rows, const ForestRunOptions& opt);
  ForestShape shape(ForestKernel k, index_t n_rows) const;
};

}  // namespace detail
}  // namespace canopy
