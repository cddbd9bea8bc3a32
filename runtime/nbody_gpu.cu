#include "runtime/bh_visitor.hpp"
#include "runtime/nbody_gpu.hpp"
#include "runtime/traversal_gpu.cuh"

namespace canopy {
namespace detail {
namespace {

struct MortonKey {
  const float* xyz;
  float cube[4];
  __device__ std::uint64_t operator()(index_t i) const {
    return morton_key(xyz[i * 3], xyz[i * 3 + 1], xyz[i * 3 + 2], cube);
  }
};

}  // namespace

struct BhGpu::Impl {
  GpuTraversal g;
  OctreeView view;
  float root_cube[4];
  DeviceBuffer<float> xyz, mass, forces;
  float theta2 = 0, eps2 = 0;

  BarnesHutVisitor visitor() const {
    BarnesHutVisitor v;
    v.tree = view;
    v.bodies_xyz = xyz.get();
    v.masses = mass.get();
    v.forces = forces.get();
    v.theta2 = theta2;
    v.eps2 = eps2;
    return v;
  }
};

BhGpu::BhGpu(const Octree& tree, const float* xyz, const float* mass) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  DeviceMirror& mir = m.g.mirror();
  const cudaStream_t s = m.g.stream();
  m.view = tree.view();
  m.view.nodes = mir.copy(tree.nodes(), "the octree nodes", s);
  m.view.child_ids = mir.copy(tree.child_ids(), "the octree child lists", s);
  m.view.com = mir.copy(tree.com(), "the octree centres of mass", s);
  m.view.cubes = mir.copy(tree.cubes(), "the octree cells", s);
  m.view.bodies = mir.copy(tree.bodies(), "the octree bodies", s);
  m.view.body_ids = mir.copy(tree.body_ids(), "the octree body ids", s);
  std::copy(tree.cubes().begin(), tree.cubes().begin() + 4, m.root_cube);
  const std::size_t n = static_cast<std::size_t>(tree.size());
  m.xyz.reserve(n * 3, "the body positions", s);
  m.mass.reserve(n, "the body masses", s);
  m.forces.reserve(n * 3, "the forces", s);
  copy_to_device(m.xyz.get(), xyz, n * 3, s);
  copy_to_device(m.mass.get(), mass, n, s);
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(s));
  m.g.set_query_count(tree.size());
}

BhGpu::~BhGpu() = default;

void BhGpu::set_parameters(float theta2, float eps2) {
  impl_->theta2 = theta2;
  impl_->eps2 = eps2;
}

SchedulingMatrixView BhGpu::inspect(const TopTree& top, double* ms) {
  return impl_->g.inspect_bits_to_host(impl_->view, top, impl_->visitor(), ms);
}
double BhGpu::inspect_on_device(const TopTree& top) { return impl_->g.inspect_bits(impl_->view, top, impl_->visitor()); }
double BhGpu::device_sandpile() { return impl_->g.device_sandpile(); }
SchedulingMatrixView BhGpu::download_matrix() { return impl_->g.download_bits(); }
index_t* BhGpu::order_staging() { return impl_->g.order_staging(); }
void BhGpu::upload_order() { impl_->g.upload_order(); }

double BhGpu::morton_sort() {
  Impl& m = *impl_;
  MortonKey key{m.xyz.get(), {m.root_cube[0], m.root_cube[1], m.root_cube[2], m.root_cube[3]}};
  return m.g.sort_by_key(key, ~std::uint64_t{0} >> 1);
}

std::vector<index_t> BhGpu::download_order() { return impl_->g.download_order(); }
std::vector<std::uint64_t> BhGpu::download_sorted_keys() { return impl_->g.download_sorted_keys(); }

double BhGpu::execute(ExecutorKind kind, bool use_order, std::vector<index_t>* gpu_warp_nodes) {
  return impl_->g.execute(kind, impl_->view, impl_->visitor(), use_order, gpu_warp_nodes);
}

PipelineStats BhGpu::pipelined(const TopTree& top, const TraversalOptions& opt, const std::vector<index_t>& chunks) {
  return impl_->g.pipelined(impl_->view, top, impl_->visitor(), opt, chunks);
}

void BhGpu::download(float* forces) {
  impl_->g.download(forces, impl_->forces.get(), static_cast<std::size_t>(impl_->g.queries()) * 3);
}

}  // namespace detail
}  // namespace canopy
