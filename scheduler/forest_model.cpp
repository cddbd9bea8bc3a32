#include "scheduler/forest_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/cache_files.hpp"

namespace canopy {

using nlohmann::json;

namespace {

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

void require_input(double v, double min, const char* name) {
  if (!std::isfinite(v) || v < min)
    throw Error(std::string("forest cost model: ") + name + " = " + num(v) + " must be finite and >= " + num(min));
}

void require_bandwidth(double v, const char* name) {
  if (!std::isfinite(v) || v <= 0)
    throw Error(std::string("forest cost model: hardware ") + name + " = " + num(v) +
                " must be a positive bandwidth (was the GPU measured?)");
}

[[noreturn]] void not_a_model_strategy(ForestKernel k) {
  throw Error(std::string("forest cost model: ") + to_string(k) + " is not one of kForestModelStrategies");
}

ForestCostEstimate make(ForestKernel s, bool feasible, double smem, double gmem, double bred, double gred) {
  // ns_per_row is eq. 1: T = T_SMEM + T_GMEM + T_B_REDU + T_G_REDU
  return ForestCostEstimate{s, feasible, smem + gmem + bred + gred, smem, gmem, bred, gred};
}

}  // namespace

std::vector<ForestCostEstimate> estimate_forest_costs(const ForestCostInputs& in, const ForestHardware& hw) {
  const std::pair<double, const char*> at_least_one[] = {
      {in.n_batch, "n_batch"}, {in.threads_per_block, "threads_per_block"}, {in.parts, "parts"}};
  for (const auto& [v, name] : at_least_one) require_input(v, 1, name);
  const std::pair<double, const char*> at_least_zero[] = {
      {in.sample_bytes, "sample_bytes"},   {in.n_trees, "n_trees"},
      {in.avg_depth, "avg_depth"},         {in.node_bytes, "node_bytes"},
      {in.attr_bytes, "attr_bytes"},       {in.nodes_per_tree, "nodes_per_tree"},
      {in.forest_bytes, "forest_bytes"},   {in.smem_bytes, "smem_bytes"},
      {in.blocks, "blocks"},               {hw.block_reduce_ns_per_thread, "block_reduce_ns_per_thread"},
      {hw.global_reduce_ns_per_block, "global_reduce_ns_per_block"}};
  for (const auto& [v, name] : at_least_zero) require_input(v, 0, name);
  const std::pair<double, const char*> bandwidths[] = {{hw.smem_read_gbs, "smem_read_gbs"},
                                                      {hw.smem_write_gbs, "smem_write_gbs"},
                                                      {hw.gmem_coalesced_gbs, "gmem_coalesced_gbs"},
                                                      {hw.gmem_uncoalesced_gbs, "gmem_uncoalesced_gbs"}};
  for (const auto& [v, name] : bandwidths) require_bandwidth(v, name);

  // Table 1's names; GB/s is bytes per ns, so every quotient below is ns per row.
  const double N_batch = in.n_batch;
  const double S_sample = in.sample_bytes;
  const double D_tree = in.avg_depth;
  const double N_trees = in.n_trees;
  const double S_node = in.node_bytes;
  const double S_att = in.attr_bytes;
  const double N_nodes = in.nodes_per_tree;
  const double BW_RSMEM = hw.smem_read_gbs;
  const double BW_WSMEM = hw.smem_write_gbs;
  const double BW_COA = hw.gmem_coalesced_gbs;
  const double BW_NCOA = hw.gmem_uncoalesced_gbs;
  const double threads = in.threads_per_block;
  const double blocks = in.blocks;
  const double B_rate = hw.block_reduce_ns_per_thread;
  const double G_rate = hw.global_reduce_ns_per_block;

  // Per row: the node reads and the attribute reads of one traversal of every tree.
  const double node_reads = D_tree * N_trees * S_node;
  const double attr_reads = D_tree * N_trees * S_att;
  // The whole forest, once (eq. 7 counts it as N_nodes * N_trees * S_node, not S_forest).
  const double forest_load = N_nodes * N_trees * S_node;

  // Eq. 2: T_B_REDU = B_rate * Num_of_threads / N_batch.
  // The paper's text says shared data does "one blockwise reduction per sample", which per row
  // would be B_rate * Num_of_threads without the division by N_batch; the equation as printed
  // divides, and we keep the equation as printed.
  const double t_b_redu = B_rate * threads / N_batch;
  // Eq. 3: T_G_REDU = G_rate * Num_of_thrd_blocks / N_batch: one global reduction per batch,
  // amortised over its rows. Num_of_thrd_blocks is read as the partial sums added per row,
  // i.e. the blocks of one row's reduction (splitting: the parts), which is how G_rate is
  // measured.
  const double t_g_redu = G_rate * blocks / N_batch;

  std::vector<ForestCostEstimate> est;
  for (ForestKernel k : kForestModelStrategies) {
    switch (k) {
      // Shared data (eq. 4): each sample is loaded from global memory (coalesced) and written to
      // shared memory; the trees read its attributes there and are themselves read from global
      // memory at half the coalesced bandwidth (assumption 1: the adaptive format makes the
      // forest accesses about half coalesced).
      //   T_SMEM = S_sample / BW_WSMEM + D_tree * N_trees * S_att / BW_RSMEM
      //   T_GMEM = S_sample / BW^COA_GMEM + D_tree * N_trees * S_node / (BW^COA_GMEM / 2)
      //   T_B_REDU = eq. 2, T_G_REDU = 0
      // (the paper prints the last term as ".../(BW^COA_GMEM)/2" in its text; the equation and
      // assumption 1, half the bandwidth, mean a denominator of BW^COA_GMEM / 2.)
      case ForestKernel::SharedData:
        est.push_back(make(k, S_sample <= in.smem_bytes,
                           S_sample / BW_WSMEM + attr_reads / BW_RSMEM,
                           S_sample / BW_COA + node_reads / (BW_COA / 2), t_b_redu, 0));
        break;
      // Direct (eq. 5): no shared memory and no reduction; the forest from global memory at half
      // the coalesced bandwidth, the attributes by random (uncoalesced) reads.
      //   T_SMEM = 0
      //   T_GMEM = D_tree * N_trees * S_node / (BW^COA_GMEM / 2) + D_tree * N_trees * S_att / BW^NCOA_GMEM
      //   T_B_REDU = T_G_REDU = 0
      case ForestKernel::Direct:
        est.push_back(make(k, true, 0, node_reads / (BW_COA / 2) + attr_reads / BW_NCOA, 0, 0));
        break;
      // Shared forest (eq. 6): the forest lives in shared memory (its load is amortised and
      // ignored), the attributes are random global reads; no reduction.
      //   T_SMEM = D_tree * N_trees * S_node / BW_RSMEM
      //   T_GMEM = D_tree * N_trees * S_att / BW^NCOA_GMEM
      //   T_B_REDU = T_G_REDU = 0
      case ForestKernel::SharedForest:
        est.push_back(make(k, in.forest_bytes <= in.smem_bytes, node_reads / BW_RSMEM,
                           attr_reads / BW_NCOA, 0, 0));
        break;
      // Splitting shared forest (eq. 7): as shared forest, but the forest is loaded from global
      // memory (coalesced) and written to shared memory once per batch, and each row's partial
      // sums are added by a global reduction once per batch (eq. 3). The paper charges one load of
      // the whole forest per batch whatever the number of parts or of blocks per part.
      //   T_SMEM = N_nodes * N_trees * S_node / (BW_WSMEM * N_batch) + D_tree * N_trees * S_node / BW_RSMEM
      //   T_GMEM = N_nodes * N_trees * S_node / (BW^COA_GMEM * N_batch) + D_tree * N_trees * S_att / BW^NCOA_GMEM
      //   T_B_REDU = 0, T_G_REDU = eq. 3
      case ForestKernel::SplitSharedForest:
        est.push_back(make(k, in.forest_bytes / in.parts <= in.smem_bytes,
                           forest_load / (BW_WSMEM * N_batch) + node_reads / BW_RSMEM,
                           forest_load / (BW_COA * N_batch) + attr_reads / BW_NCOA, 0, t_g_redu));
        break;
      case ForestKernel::Hybrid:
      case ForestKernel::Auto: not_a_model_strategy(k);
    }
  }
  return est;
}

std::vector<ForestBatchEstimate> estimate_forest_batch(const ForestCostInputs& in, const std::vector<ForestShape>& shapes,
                                                       const ForestHardware& hw) {
  // The paper's terms first (they also check the inputs); Canopy's replace some of them.
  const std::vector<ForestCostEstimate> paper = estimate_forest_costs(in, hw);
  require_bandwidth(hw.gmem_cached_random_gbs, "gmem_cached_random_gbs");
  require_input(hw.gmem_latency_ns, 0, "gmem_latency_ns");
  require_input(hw.smem_latency_ns, 0, "smem_latency_ns");
  require_input(hw.launch_ns, 0, "launch_ns");
  const double N_batch = in.n_batch, S_sample = in.sample_bytes, D_tree = in.avg_depth, N_trees = in.n_trees;
  const double node_reads = D_tree * N_trees * in.node_bytes;
  const double attr_reads = D_tree * N_trees * in.attr_bytes;
  const double forest_load = in.nodes_per_tree * N_trees * in.node_bytes;
  const double BW_COA = hw.gmem_coalesced_gbs, BW_R = hw.smem_read_gbs, BW_W = hw.smem_write_gbs;
  const double BW_CACHED = hw.gmem_cached_random_gbs;
  std::vector<ForestBatchEstimate> out;
  for (const ForestShape& sh : shapes) {
    require_input(sh.coalescing, 1e-6, "coalescing");
    require_input(sh.smem_conflict, 0.5, "smem_conflict");  // 0.5: every lane reads one word (broadcast)
    const double attr = attr_reads / (sh.rows_in_smem ? BW_R : BW_CACHED);
    ForestBatchEstimate e;
    e.strategy = sh.strategy;
    bool feasible_paper = false;
    for (const ForestCostEstimate& p : paper)
      if (p.strategy == sh.strategy) feasible_paper = p.feasible;
    e.feasible = feasible_paper;
    switch (sh.strategy) {
      case ForestKernel::SharedData:  // eq. 4; one in-order block reduction per row (eq. 2 without / N_batch)
        e.row_ns = S_sample / BW_W + attr_reads / BW_R + S_sample / BW_COA + node_reads / (BW_COA * sh.coalescing) +
                   hw.block_reduce_ns_per_thread * in.threads_per_block;
        break;
      case ForestKernel::Direct:  // eq. 5
        e.row_ns = node_reads / (BW_COA * sh.coalescing) + attr;
        break;
      case ForestKernel::SharedForest:  // eq. 6
        e.row_ns = node_reads * sh.smem_conflict / BW_R + attr;
        break;
      case ForestKernel::SplitSharedForest:  // eq. 7; the sums carried between parts read and written once per part
        e.row_ns = forest_load / (BW_W * N_batch) + node_reads * sh.smem_conflict / BW_R +
                   forest_load / (BW_COA * N_batch) + attr + hw.global_reduce_ns_per_block * in.parts / N_batch;
        break;
      case ForestKernel::Hybrid:
      case ForestKernel::Auto: not_a_model_strategy(sh.strategy);
    }
    if (sh.calibrated_row_ns > 0) e.row_ns = sh.calibrated_row_ns;
    e.throughput_ns = N_batch * e.row_ns;
    // A step: the node (shared memory, or global memory mostly from L2 on a first walk), then
    // the attribute (shared memory, or L1: taken as twice shared memory's latency).
    const bool forest_in_smem =
        sh.strategy == ForestKernel::SharedForest || sh.strategy == ForestKernel::SplitSharedForest;
    const double step_ns = (forest_in_smem ? hw.smem_latency_ns : hw.gmem_latency_ns) +
                           (sh.rows_in_smem ? hw.smem_latency_ns : 2 * hw.smem_latency_ns);
    e.path_ns = (sh.chain_steps * step_ns + sh.load_steps * hw.gmem_latency_ns) * sh.waves + sh.launches * hw.launch_ns;
    if (sh.calibrated_small_ns > 0) e.path_ns = std::max(e.path_ns, sh.calibrated_small_ns);
    e.batch_ns = std::max(e.throughput_ns, e.path_ns);
    out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(), [](const ForestBatchEstimate& a, const ForestBatchEstimate& b) {
    if (a.feasible != b.feasible) return a.feasible;
    return a.batch_ns < b.batch_ns;
  });
  return out;
}

ForestKernel choose_forest_strategy(const std::vector<ForestCostEstimate>& est) {
  const ForestCostEstimate* best = nullptr;
  for (const ForestCostEstimate& e : est)
    if (e.feasible && (!best || e.ns_per_row < best->ns_per_row)) best = &e;
  if (!best) throw Error("forest cost model: no feasible strategy among " + std::to_string(est.size()) + " estimates");
  return best->strategy;
}

// ---- the cache ----

std::string default_forest_hardware_cache() {
  const std::string dir = canopy_cache_dir();
  return dir.empty() ? dir : (std::filesystem::path(dir) / "forest_hardware.json").string();
}

namespace {

constexpr const char* kFormat = "canopy-forest-hardware";
constexpr int kVersion = 2;

bool fail(std::string* why, const std::string& msg) {
  if (why) *why = msg;
  return false;
}

}  // namespace

bool load_forest_hardware(const std::string& path, const std::string& expected_name, const std::string& expected_uuid,
                          ForestHardware* out, std::string* why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail(why, path + ": cannot open");
  std::stringstream text;
  text << f.rdbuf();
  if (f.bad()) return fail(why, path + ": cannot read");

  ForestHardware hw;
  try {
    const json j = json::parse(text.str());
    if (!j.is_object()) return fail(why, path + ": malformed: not a JSON object");
    if (!j.contains("format") || j.at("format") != kFormat)
      return fail(why, path + ": malformed: not a canopy forest-hardware record");
    hw.version = j.at("version").get<int>();
    if (hw.version != kVersion)
      return fail(why, path + ": version " + std::to_string(hw.version) + ", expected " + std::to_string(kVersion));
    hw.device_name = j.at("device_name").get<std::string>();
    hw.device_uuid = j.at("device_uuid").get<std::string>();
    hw.sm_count = j.at("sm_count").get<int>();
    hw.smem_read_gbs = j.at("smem_read_gbs").get<double>();
    hw.smem_write_gbs = j.at("smem_write_gbs").get<double>();
    hw.gmem_coalesced_gbs = j.at("gmem_coalesced_gbs").get<double>();
    hw.gmem_uncoalesced_gbs = j.at("gmem_uncoalesced_gbs").get<double>();
    hw.block_reduce_ns_per_thread = j.at("block_reduce_ns_per_thread").get<double>();
    hw.global_reduce_ns_per_block = j.at("global_reduce_ns_per_block").get<double>();
    hw.gmem_cached_random_gbs = j.at("gmem_cached_random_gbs").get<double>();
    hw.gmem_latency_ns = j.at("gmem_latency_ns").get<double>();
    hw.smem_latency_ns = j.at("smem_latency_ns").get<double>();
    hw.launch_ns = j.at("launch_ns").get<double>();
  } catch (const json::exception& e) {
    return fail(why, path + ": malformed: " + e.what());
  }

  for (double v : {hw.smem_read_gbs, hw.smem_write_gbs, hw.gmem_coalesced_gbs, hw.gmem_uncoalesced_gbs,
                   hw.gmem_cached_random_gbs})
    if (!std::isfinite(v) || v <= 0) return fail(why, path + ": malformed: a bandwidth is " + num(v));
  for (double v : {hw.gmem_latency_ns, hw.smem_latency_ns, hw.launch_ns})
    if (!std::isfinite(v) || v < 0) return fail(why, path + ": malformed: a latency is " + num(v));
  for (double v : {hw.block_reduce_ns_per_thread, hw.global_reduce_ns_per_block})
    if (!std::isfinite(v) || v < 0) return fail(why, path + ": malformed: a reduction rate is " + num(v));
  if (hw.sm_count <= 0) return fail(why, path + ": malformed: sm_count = " + std::to_string(hw.sm_count));

  if (hw.device_uuid != expected_uuid)
    return fail(why, path + ": measured on GPU " + hw.device_uuid + ", this is " + expected_uuid);
  if (hw.device_name != expected_name)
    return fail(why, path + ": measured on a " + hw.device_name + ", this is a " + expected_name);
  *out = hw;
  if (why) why->clear();
  return true;
}

void save_forest_hardware(const std::string& path, const ForestHardware& hw) {
  if (path.empty()) throw Error("save_forest_hardware: the path is empty");
  json j;
  j["format"] = kFormat;
  j["version"] = hw.version;
  j["device_name"] = hw.device_name;
  j["device_uuid"] = hw.device_uuid;
  j["sm_count"] = hw.sm_count;
  j["smem_read_gbs"] = hw.smem_read_gbs;
  j["smem_write_gbs"] = hw.smem_write_gbs;
  j["gmem_coalesced_gbs"] = hw.gmem_coalesced_gbs;
  j["gmem_uncoalesced_gbs"] = hw.gmem_uncoalesced_gbs;
  j["block_reduce_ns_per_thread"] = hw.block_reduce_ns_per_thread;
  j["global_reduce_ns_per_block"] = hw.global_reduce_ns_per_block;
  j["gmem_cached_random_gbs"] = hw.gmem_cached_random_gbs;
  j["gmem_latency_ns"] = hw.gmem_latency_ns;
  j["smem_latency_ns"] = hw.smem_latency_ns;
  j["launch_ns"] = hw.launch_ns;
  write_file_atomically(path, j.dump(2) + "\n");
}

ForestHardware load_or_measure_forest_hardware(const std::string& path, const std::string& name, const std::string& uuid,
                                               const std::function<ForestHardware()>& measure, bool* measured) {
  // One at a time in the process: predictors made on several threads at once measure the GPU
  // once (benchmarks running side by side would time each other) and then load the cache.
  static std::mutex one_at_a_time;
  const std::lock_guard<std::mutex> lock(one_at_a_time);
  ForestHardware hw;
  if (!path.empty() && load_forest_hardware(path, name, uuid, &hw)) {
    if (measured) *measured = false;
    return hw;
  }
  hw = measure();
  if (hw.device_name.empty()) hw.device_name = name;
  if (hw.device_uuid.empty()) hw.device_uuid = uuid;
  if (hw.device_name != name || hw.device_uuid != uuid)
    throw Error("load_or_measure_forest_hardware: the measurement is for " + hw.device_name + " (" + hw.device_uuid +
                "), not for " + name + " (" + uuid + ")");
  if (measured) *measured = true;
  if (!path.empty()) save_forest_hardware(path, hw);
  return hw;
}

}  // namespace canopy
