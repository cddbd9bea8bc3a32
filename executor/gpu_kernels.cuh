// GPU executors, templated on the topology and the visitor. Each thread runs one scheduled
// query; results land at the query's original index. Include from .cu files only; the
// library instantiates these for its own visitors, and a program with its own visitor
// includes this file in its own .cu.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

#include "executor/executor.hpp"
#include "executor/traversal.hpp"
#include "core/cuda.cuh"

namespace canopy {
namespace gpu {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kLockstepWarpsPerBlock = 4;
constexpr int kIndependentBlock = 128;

// Lockstep warps visit one child first for all lanes. For a guided visitor the lanes that
// accepted the node (cond) vote with their own first_child(); the majority wins, a tie goes
// to the lower index, exactly as the CPU warp emulator decides. Unguided: child 0.
template <class Topology, class Visitor>
__device__ __forceinline__ int warp_first_child(const Topology& tree, const Visitor& v,
                                                const typename Visitor::State& s, node_id node, bool cond) {
  if constexpr (is_guided_v<Visitor>) {
    const int nc = tree.child_count(node);
    const int mine = cond ? v.first_child(s, node) : -1;
    int best = 0, best_votes = __popc(__ballot_sync(kFullMask, mine == 0));
    for (int c = 1; c < nc; ++c) {
      const int votes = __popc(__ballot_sync(kFullMask, mine == c));
      if (votes > best_votes) {
        best = c;
        best_votes = votes;
      }
    }
    return best;
  } else {
    return 0;
  }
}

// (a) Independent: one thread per query with its own rope stack.
template <class Topology, class Visitor>
__global__ void __launch_bounds__(kIndependentBlock)
independent_kernel(Topology tree, Visitor v, const index_t* order, index_t n) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i < n) traverse_one(tree, v, scheduled_query(order, i));
}

// (b) Mask lockstep (Goldfarb et al.): the warp walks one shared rope stack whose entries
// carry the mask of lanes still active in that subtree; a lane computes only where its bit
// is set, and the warp skips a subtree only when every lane truncates. kCountNodes writes
// the nodes each warp visited (the instrumented build the emulator is checked against).
template <bool kCountNodes, class Topology, class Visitor>
__global__ void __launch_bounds__(kLockstepWarpsPerBlock * 32)
mask_lockstep_kernel(Topology tree, Visitor v, const index_t* order, index_t n, index_t* warp_nodes) {
  __shared__ node_id stack_node[kLockstepWarpsPerBlock][Topology::kMaxStack];
  __shared__ std::uint32_t stack_mask[kLockstepWarpsPerBlock][Topology::kMaxStack];
  const int lane = threadIdx.x & 31;
  const int wib = threadIdx.x >> 5;
  const index_t warp = blockIdx.x * static_cast<index_t>(kLockstepWarpsPerBlock) + wib;
  if (warp * 32 >= n) return;  // whole warps only
  const index_t slot = warp * 32 + lane;  // this lane's schedule position
  const bool valid = slot < n;
  const index_t q = valid ? scheduled_query(order, slot) : 0;
  typename Visitor::State s;
  if (valid) s = v.init(q);
  node_id* snode = stack_node[wib];
  std::uint32_t* smask = stack_mask[wib];
  // The node the warp is at, and its mask, live in registers; only pending siblings (with the
  // mask they were pushed with) go through the shared rope stack.
  node_id node = 0;
  std::uint32_t mask = __ballot_sync(kFullMask, valid);
  int sp = 0;
  index_t visited = 0;
  for (;;) {
    if (kCountNodes) ++visited;
    const bool cond = ((mask >> lane) & 1u) && v.descend(s, node);
    const std::uint32_t next = __ballot_sync(kFullMask, cond);
    if (next != 0) {
      if (!tree.is_leaf(node)) {
        const int nc = tree.child_count(node);
        const int first = warp_first_child(tree, v, s, node, cond);
        if (lane > 0 && lane < nc) {
          snode[sp + nc - 1 - lane] = tree.child(node, visit_rank_child(first, lane));
          smask[sp + nc - 1 - lane] = next;
        }
        sp += nc - 1;
        node = tree.child(node, first);
        mask = next;
        continue;
      }
      if (cond) v.leaf(s, node);
    }
    if (sp == 0) break;
    __syncwarp();  // the pushes are visible before the pop
    --sp;
    node = snode[sp];
    mask = smask[sp];
    __syncwarp();  // every lane has read the slot before it is pushed over
  }
  if (valid) v.finish(s, q);
  if (kCountNodes && lane == 0) warp_nodes[warp] = visited;
}

// (c) FSM lockstep (the paper's Figure 11): each lane holds, in registers, whether it is
// traversing or truncated and the stack depth (critical) at which it truncated; the shared
// rope stack holds node ids only. A truncated lane resumes once the warp pops below its
// critical depth, i.e. leaves the subtree it declined.
template <bool kCountNodes, class Topology, class Visitor>
__global__ void __launch_bounds__(kLockstepWarpsPerBlock * 32)
fsm_lockstep_kernel(Topology tree, Visitor v, const index_t* order, index_t n, index_t* warp_nodes) {
  __shared__ node_id stack_node[kLockstepWarpsPerBlock][Topology::kMaxStack];
  const int lane = threadIdx.x & 31;
  const int wib = threadIdx.x >> 5;
  const index_t warp = blockIdx.x * static_cast<index_t>(kLockstepWarpsPerBlock) + wib;
  if (warp * 32 >= n) return;
  const index_t slot = warp * 32 + lane;  // this lane's schedule position
  const bool valid = slot < n;
  const index_t q = valid ? scheduled_query(order, slot) : 0;
  typename Visitor::State s;
  if (valid) s = v.init(q);
  node_id* stack = stack_node[wib];
  bool traversing = valid;
  int critical = INT_MAX;
  // The node the warp is at lives in a register; `pos` is the stack position it would have
  // had if child 0 had been pushed and popped like its siblings (what critical refers to).
  node_id node = 0;
  int sp = 0, pos = 0;
  index_t visited = 0;
  for (;;) {
    if (kCountNodes) ++visited;
    if (pos < critical) {  // transition back to traversing
      traversing = valid;
      critical = INT_MAX;
    }
    const bool cond = traversing && v.descend(s, node);
    if (__any_sync(kFullMask, cond)) {
      if (traversing && !cond) {  // transition to truncated
        traversing = false;
        critical = pos;
      }
      if (!tree.is_leaf(node)) {
        const int nc = tree.child_count(node);
        const int first = warp_first_child(tree, v, s, node, cond);
        if (lane > 0 && lane < nc) stack[sp + nc - 1 - lane] = tree.child(node, visit_rank_child(first, lane));
        sp += nc - 1;
        pos = sp;
        node = tree.child(node, first);
        continue;
      }
      if (cond) v.leaf(s, node);
    }
    if (sp == 0) break;
    __syncwarp();  // the pushes are visible before the pop
    --sp;
    node = stack[sp];
    pos = sp;
    __syncwarp();  // every lane has read the slot before it is pushed over
  }
  if (valid) v.finish(s, q);
  if (kCountNodes && lane == 0) warp_nodes[warp] = visited;
}

// The dynamic shared memory a block of `threads` gets for the visitor's per-thread scratch
// (shared_bytes_per_thread): 0 when it asks for none or more than kMaxVisitorShared, or more
// than the device allows a block (the visitor then keeps its scratch in global memory).
constexpr std::size_t kMaxVisitorShared = 100 * 1024;
template <class Kernel>
std::size_t visitor_shared_bytes(Kernel kernel, std::size_t per_thread, int threads, std::size_t static_bytes) {
  const std::size_t bytes = per_thread * static_cast<std::size_t>(threads);
  if (bytes == 0 || bytes > kMaxVisitorShared) return 0;
  if (bytes + static_bytes > 48 * 1024) {
    int device = 0, optin = 0;
    CANOPY_CUDA_CHECK(cudaGetDevice(&device));
    CANOPY_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (bytes + static_bytes > static_cast<std::size_t>(optin)) return 0;
    CANOPY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
  return bytes;
}

// Launches one executor over n scheduled queries on `stream`. warp_nodes (lockstep only) may
// be null; when given, the instrumented kernel writes each warp's node count there.
template <class Topology, class Visitor>
void launch_executor(ExecutorKind k, const Topology& tree, const Visitor& v, const index_t* order,
                     index_t n, index_t* warp_nodes, cudaStream_t stream) {
  if (n <= 0) return;
  const index_t warps = (n + 31) / 32;
  const unsigned lock_blocks = static_cast<unsigned>((warps + kLockstepWarpsPerBlock - 1) / kLockstepWarpsPerBlock);
  // A lockstep kernel in its instrumented build (counting each warp's nodes) or its plain one.
  using Kernel = void (*)(Topology, Visitor, const index_t*, index_t, index_t*);
  const std::size_t per_thread = shared_bytes_per_thread(v);
  const auto lockstep = [&](Kernel counting, Kernel plain, const char* name) {
    const Kernel kernel = warp_nodes ? counting : plain;
    const std::size_t stacks = kLockstepWarpsPerBlock * Topology::kMaxStack * 2 * sizeof(std::uint32_t);
    const std::size_t shared = visitor_shared_bytes(kernel, per_thread, kLockstepWarpsPerBlock * 32, stacks);
    kernel<<<lock_blocks, kLockstepWarpsPerBlock * 32, shared, stream>>>(tree, v, order, n, warp_nodes);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) throw_cuda_error(err, name, __FILE__, __LINE__);
  };
  switch (k) {
    case ExecutorKind::Independent: {
      const std::size_t shared =
          visitor_shared_bytes(independent_kernel<Topology, Visitor>, per_thread, kIndependentBlock, 0);
      independent_kernel<<<static_cast<unsigned>((n + kIndependentBlock - 1) / kIndependentBlock),
                           kIndependentBlock, shared, stream>>>(tree, v, order, n);
      CANOPY_CUDA_CHECK_LAUNCH("independent_kernel");
      break;
    }
    case ExecutorKind::MaskLockstep:
      lockstep(mask_lockstep_kernel<true, Topology, Visitor>, mask_lockstep_kernel<false, Topology, Visitor>,
               "launch of mask_lockstep_kernel");
      break;
    case ExecutorKind::FsmLockstep:
      lockstep(fsm_lockstep_kernel<true, Topology, Visitor>, fsm_lockstep_kernel<false, Topology, Visitor>,
               "launch of fsm_lockstep_kernel");
      break;
    case ExecutorKind::Auto:
      throw Error("launch_executor: executor auto is resolved before a launch (the engine's run_call does)");
  }
}

}  // namespace gpu
}  // namespace canopy
