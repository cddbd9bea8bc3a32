// The shared-data and (splitting) shared-forest strategies' instances
// (executor/forest_adaptive_kernels.cuh).
#include "executor/forest_adaptive_launch.cuh"

namespace canopy {
namespace gpu {

void launch_adaptive_shared_data(const AdaptiveForestView& v, const AdaptiveBatch& b, const ForestSchedule& s,
                                 const AdaptiveDevice& d) {
  dispatch_forest_sums(v.common, [&](auto sums) {
    using Sums = decltype(sums);
    AdaptiveSharedDataPlan plan;
    plan.rows_per_block = s.rows_per_block;
    plan.items = s.tree_group;
    plan.outputs = Sums::kScalarLeaves ? v.common.n_groups : v.common.leaf_width;
    plan.leaf_words = shared_data_leaf_words(v, d.smem_optin);
    plan.interleaved = s.interleaved;
    plan.top_rows = s.top_rows;
    const std::size_t smem = shared_data_bytes(v, s, plan.outputs, sizeof(typename Sums::Carry), plan.leaf_words);
    if (smem > d.smem_optin)
      throw Error("shared-data strategy: " + std::to_string(s.rows_per_block) + " rows and the leaves of " +
                  std::to_string(v.common.n_trees) + " trees x " + std::to_string(s.tree_group) + " rows need " +
                  std::to_string(smem) + " bytes of shared memory, more than the " + std::to_string(d.smem_optin) +
                  " a block may use");
    dispatch_walks(s.tree_interleave, [&](auto walks) {
      dispatch_categorical(v, [&](auto cat) {
        auto kernel = adaptive_shared_data_kernel<Sums, decltype(walks)::value, decltype(cat)::value>;
        check_block_registers(kernel, s.block_threads, "shared-data strategy");
        allow_dynamic_smem(kernel, smem, "cudaFuncSetAttribute(adaptive_shared_data_kernel)");
        kernel<<<adaptive_grid(b.n_rows, s.rows_per_block), s.block_threads, smem, d.stream>>>(v, b, plan);
      });
    });
    CANOPY_CUDA_CHECK_LAUNCH("adaptive_shared_data_kernel");
  });
}

void launch_adaptive_shared_forest(const AdaptiveForestView& v, const AdaptiveBatch& b, const ForestSchedule& s,
                                   const AdaptivePart& part, std::size_t part_bytes, const AdaptiveDevice& d) {
  const std::size_t smem = part_bytes + forest_tile_bytes(v, s);
  if (smem > d.smem_optin)
    throw Error("shared-forest strategy: a part of " + std::to_string(part_bytes) + " bytes and a tile of " +
                std::to_string(s.block_threads * s.rows_per_thread) + " rows exceed the " + std::to_string(d.smem_optin) +
                " bytes of shared memory a block may use");
  dispatch_forest_sums(v.common, [&](auto sums) {
    using Sums = decltype(sums);
    dispatch_rows_trees<Sums>(s.rows_per_thread, s.tree_interleave, "shared-forest strategy", [&](auto r, auto k) {
      constexpr int R = decltype(r)::value, K = decltype(k)::value;
      dispatch_categorical(v, [&](auto cat) {
        auto kernel = adaptive_shared_forest_kernel<Sums, R, K, decltype(cat)::value>;
        allow_dynamic_smem(kernel, smem, "cudaFuncSetAttribute(adaptive_shared_forest_kernel)");
        // Persistent blocks: each loads its part once and then takes row tiles in turn.
        int per_sm = 0;
        CANOPY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, s.block_threads, smem));
        if (per_sm < 1)
          throw Error("shared-forest strategy: a block of " + std::to_string(s.block_threads) + " threads with " +
                      std::to_string(smem) + " bytes of shared memory cannot run on this GPU");
        const index_t tiles = (b.n_rows + static_cast<index_t>(s.block_threads) * R - 1) / (static_cast<index_t>(s.block_threads) * R);
        const index_t blocks = std::min<index_t>(tiles, static_cast<index_t>(per_sm) * d.sm_count);
        kernel<<<static_cast<unsigned>(blocks), s.block_threads, smem, d.stream>>>(v, b, part);
      });
      CANOPY_CUDA_CHECK_LAUNCH("adaptive_shared_forest_kernel");
    });
  });
}

}  // namespace gpu
}  // namespace canopy
