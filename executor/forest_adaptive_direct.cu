// The direct strategy's instances (executor/forest_adaptive_kernels.cuh).
#include "executor/forest_adaptive_launch.cuh"

namespace canopy {
namespace gpu {

void launch_adaptive_direct(const AdaptiveForestView& v, const AdaptiveBatch& b, const ForestSchedule& s,
                            const AdaptiveDevice& d) {
  const std::size_t smem = direct_tile_bytes(v, s);
  if (smem > d.smem_optin)
    throw Error("direct strategy: a tile of " + std::to_string(s.block_threads * s.rows_per_thread) + " rows x " +
                std::to_string(v.common.n_features) + " features needs " + std::to_string(smem) +
                " bytes of shared memory, more than the " + std::to_string(d.smem_optin) + " a block may use (cache_rows 0)");
  dispatch_forest_sums(v.common, [&](auto sums) {
    using Sums = decltype(sums);
    dispatch_rows_trees<Sums>(s.rows_per_thread, s.tree_interleave, "direct strategy", [&](auto r, auto k) {
      constexpr int R = decltype(r)::value, K = decltype(k)::value;
      const unsigned grid = adaptive_grid(b.n_rows, static_cast<index_t>(s.block_threads) * R);
      dispatch_categorical(v, [&](auto cat) {
        constexpr bool kCat = decltype(cat)::value;
        if (s.cache_rows == 1) {
          auto kernel = adaptive_direct_kernel<Sums, R, K, true, kCat>;
          check_block_registers(kernel, s.block_threads, "direct strategy");
          allow_dynamic_smem(kernel, smem, "cudaFuncSetAttribute(adaptive_direct_kernel)");
          kernel<<<grid, s.block_threads, smem, d.stream>>>(v, b, s.tree_sync);
        } else {
          auto kernel = adaptive_direct_kernel<Sums, R, K, false, kCat>;
          check_block_registers(kernel, s.block_threads, "direct strategy");
          kernel<<<grid, s.block_threads, 0, d.stream>>>(v, b, s.tree_sync);
        }
      });
      CANOPY_CUDA_CHECK_LAUNCH("adaptive_direct_kernel");
    });
  });
}

}  // namespace gpu
}  // namespace canopy
