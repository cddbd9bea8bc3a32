// canopy-bench forest: one model, one data file, every layout x kernel x device side by side.
// A batch of N rows is the data file's first N rows (repeated from the top when the file is
// shorter). Per variant: the median time per batch, rows per second, a checksum of the
// predictions and how far they are from the first variant's; accuracy (or RMSE for a
// regressor) over the whole file when a label column is named.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "benchmarks/bench_forest.hpp"
#include "benchmarks/bench_common.hpp"
#include "core/checks.hpp"
#include "core/timing.hpp"
#include "runtime/forest_predictor.hpp"

namespace canopy {
namespace bench {
namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<ForestLayout> parse_layouts(const std::string& s) {
  if (s == "all") return {ForestLayout::Csr, ForestLayout::Reorg, ForestLayout::Hierarchical, ForestLayout::Adaptive};
  std::vector<ForestLayout> out;
  for (const std::string& n : split_list(s)) {
    if (n == "csr") out.push_back(ForestLayout::Csr);
    else if (n == "reorg") out.push_back(ForestLayout::Reorg);
    else if (n == "hier" || n == "hierarchical") out.push_back(ForestLayout::Hierarchical);
    else if (n == "adaptive") out.push_back(ForestLayout::Adaptive);
    else throw Error("--layouts: unknown layout '" + n + "' (known: csr, reorg, hier, adaptive, or all)");
  }
  if (out.empty()) throw Error("--layouts: the list is empty");
  return out;
}

std::vector<ForestKernel> parse_kernels(const std::string& s) {
  if (s == "all")
    return {ForestKernel::Direct, ForestKernel::Hybrid, ForestKernel::SharedData, ForestKernel::SharedForest,
            ForestKernel::SplitSharedForest, ForestKernel::Auto};
  std::vector<ForestKernel> out;
  for (const std::string& n : split_list(s)) {
    try {
      out.push_back(parse_forest_kernel(n));
    } catch (const Error& e) {
      throw Error(std::string("--kernels: ") + e.what());
    }
  }
  if (out.empty()) throw Error("--kernels: the list is empty");
  return out;
}

std::vector<Device> parse_devices(const std::string& s) {
  std::vector<Device> out;
  for (const std::string& n : split_list(s)) {
    if (n == "auto") out.push_back(resolve_device(Device::Auto));
    else if (n == "cpu") out.push_back(Device::Cpu);
    else if (n == "gpu") out.push_back(resolve_device(Device::Gpu));  // an Error without one
    else throw Error("--device: '" + n + "' is not one of auto, cpu, gpu (or a list such as gpu,cpu)");
  }
  if (out.empty()) throw Error("--device: the list is empty");
  return out;
}

// FNV-1a over the bits of the predictions: equal checksums <=> (almost surely) equal bits.
std::uint64_t checksum(const std::vector<float>& v) {
  std::uint64_t h = 1469598103934665603ull;
  for (float f : v) {
    std::uint32_t b;
    std::memcpy(&b, &f, sizeof b);
    for (int k = 0; k < 4; ++k) {
      h ^= (b >> (8 * k)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

struct Row {
  std::string device, layout, kernel;
  index_t batch = 0;
  double total_ms = 0, kernel_ms = 0, upload_ms = 0, download_ms = 0;
  double rows_per_s = 0, kernel_rows_per_s = 0;
  std::uint64_t checksum = 0;
  double sum = 0;
  bool identical = true;
  double max_rel_diff = 0;
  double quality = -1;  // accuracy or RMSE over the file; < 0: not measured
};

// What run_forest gathers over every variant: the rows of its table, each layout's build,
// the variants that could not run, and per batch the first variant's predictions.
class ForestBench {
 public:
  ForestBench(const ForestBenchConfig& c, const ForestWorkload& w) : c_(c), w_(w), reference_(w.batches.size()) {
    for (index_t n : w.batches) batch_rows_.push_back(forest_batch(w.data, n));
  }

  // The layout built (and uploaded) on a device, reported.
  std::unique_ptr<ForestPredictor> predictor(ForestLayout layout, Device dev) {
    ForestConfig cfg;
    cfg.layout = layout;
    cfg.device = dev;
    cfg.hierarchical.subtree_depth = c_.subtree_depth;
    cfg.hierarchical.root_depth = c_.root_depth;
    const auto t0 = std::chrono::steady_clock::now();
    auto p = std::make_unique<ForestPredictor>(w_.forest, cfg);
    const double build_ms = ms_since(t0);
    std::printf("%s layout on the %s: %.2f MiB (%s), built%s in %.0f ms\n", to_string(layout), to_string(dev),
                static_cast<double>(p->footprint_bytes()) / (1 << 20), p->layout_details().c_str(),
                dev == Device::Gpu ? " and uploaded" : "", build_ms);
    layouts_json_.push_back({{"layout", to_string(layout)},
                             {"device", to_string(dev)},
                             {"footprint_bytes", p->footprint_bytes()},
                             {"details", p->layout_details()},
                             {"build_ms", build_ms}});
    return p;
  }

  // One variant: the whole file untimed (accuracy / RMSE, --predictions), then every batch
  // timed. A variant that cannot run here (e.g. shared data with too many features for shared
  // memory) is reported, and the others go on.
  void run(ForestPredictor& p, ForestLayout layout, Device dev, ForestKernel k) {
    const std::string kernel = dev == Device::Cpu ? "cpu-tbb" : to_string(k);
    try {
      ForestRunOptions run;
      run.output = w_.output;
      run.kernel = k;
      run.row_schedule_depth = layout == ForestLayout::Adaptive ? c_.row_depth : 0;
      run.graph = c_.graph == "on";
      const double quality = whole_file(p, run);
      for (std::size_t bi = 0; bi < w_.batches.size(); ++bi) time_batch(p, run, bi, to_string(dev), to_string(layout), kernel, quality);
    } catch (const Error& e) {
      std::printf("  %-4s %-6s %-12s skipped: %s\n", to_string(dev), to_string(layout), kernel.c_str(), e.what());
      skipped_.push_back({{"device", to_string(dev)}, {"layout", to_string(layout)}, {"kernel", kernel}, {"error", e.what()}});
    }
  }

  void print_table() const {
    std::printf("\n%-4s %-6s %-12s %9s %12s %12s %14s %14s %18s %10s %9s\n", "dev", "layout", "kernel", "batch",
                "ms/batch", "kernel ms", "rows/s", "kernel rows/s", "checksum", "vs first", quality_name());
    for (const Row& r : rows_) {
      std::printf("%-4s %-6s %-12s %9lld %12.3f %12.3f %14.0f %14.0f %18llx %10s %9s\n", r.device.c_str(),
                  r.layout.c_str(), r.kernel.c_str(), static_cast<long long>(r.batch), r.total_ms, r.kernel_ms,
                  r.rows_per_s, r.kernel_rows_per_s, static_cast<unsigned long long>(r.checksum),
                  r.identical ? "same" : fmt("%.1e", r.max_rel_diff).c_str(), r.quality < 0 ? "-" : fmt("%.4f", r.quality).c_str());
    }
    std::printf("\nmedian of %d runs after a warm-up; ms/batch: the whole predict() call (GPU: with the copies); "
                "\"vs first\": the largest relative difference from the first variant's predictions\n",
                c_.repeat);
  }

  void write_json() const {
    nlohmann::json j = forest_json_header("forest", c_, w_);
    j["trees"] = w_.forest.n_trees();
    j["nodes"] = w_.forest.n_nodes();
    j["max_depth"] = w_.forest.max_depth();
    j["repeat"] = c_.repeat;
    j["subtree_depth"] = c_.subtree_depth;
    j["root_depth"] = c_.root_depth;
    j["layouts"] = layouts_json_;
    j["skipped"] = skipped_;
    j["variants"] = nlohmann::json::array();
    for (const Row& r : rows_) {
      nlohmann::json v{{"device", r.device},       {"layout", r.layout},         {"kernel", r.kernel},
                       {"batch", r.batch},         {"ms_per_batch", r.total_ms}, {"kernel_ms", r.kernel_ms},
                       {"upload_ms", r.upload_ms}, {"download_ms", r.download_ms}, {"rows_per_s", r.rows_per_s},
                       {"kernel_rows_per_s", r.kernel_rows_per_s}, {"checksum", r.checksum}, {"sum", r.sum},
                       {"identical_to_first", r.identical}, {"max_rel_diff_to_first", r.max_rel_diff}};
      if (r.quality >= 0) v[quality_name()] = r.quality;
      j["variants"].push_back(v);
    }
    bench::write_json(c_.json, j);  // the shared writer, not this member
  }

  bool all_ran() const { return skipped_.empty(); }

 private:
  const char* quality_name() const { return w_.forest.is_classifier() ? "accuracy" : "rmse"; }

  // Untimed, over the whole file: accuracy (classifiers) or RMSE (regressors) when there is a
  // label column, < 0 otherwise; the first variant's predictions for --predictions.
  double whole_file(ForestPredictor& p, const ForestRunOptions& run) {
    const ForestData& data = w_.data;
    const bool write = !c_.predictions.empty() && !predictions_written_;
    if (data.labels.empty() && !write) return -1;
    std::vector<float> all(static_cast<std::size_t>(data.n_rows) * w_.width);
    p.predict(data.values.data(), data.n_rows, run, all.data());
    if (write) {
      write_predictions(c_.predictions, all.data(), data.n_rows, w_.width);
      predictions_written_ = true;
    }
    if (data.labels.empty()) return -1;
    ForestRunOptions one = run;  // one value per row: the class, or the regressor's value
    one.output = w_.forest.is_classifier() ? ForestOutput::Class : ForestOutput::Prob;
    std::vector<float> pred(static_cast<std::size_t>(data.n_rows));
    p.predict(data.values.data(), data.n_rows, one, pred.data());
    double total = 0;
    for (index_t i = 0; i < data.n_rows; ++i) {
      const double e = pred[static_cast<std::size_t>(i)] - data.labels[static_cast<std::size_t>(i)];
      total += w_.forest.is_classifier() ? (e == 0) : e * e;
    }
    const double mean = total / static_cast<double>(data.n_rows);
    return w_.forest.is_classifier() ? mean : std::sqrt(mean);
  }

  // Batch bi: a warm-up, then the median of the timed runs, and its predictions against the
  // first variant's.
  void time_batch(ForestPredictor& p, const ForestRunOptions& run, std::size_t bi, const char* dev, const char* layout,
                  const std::string& kernel, double quality) {
    const index_t n = w_.batches[bi];
    std::vector<float> out(static_cast<std::size_t>(n) * w_.width);
    p.predict(batch_rows_[bi].data(), n, run, out.data());  // warm-up
    std::vector<double> total, kern, up, down;
    for (int r = 0; r < c_.repeat; ++r) {
      const ForestTimes t = p.predict(batch_rows_[bi].data(), n, run, out.data());
      total.push_back(t.wall_ms);
      kern.push_back(t.kernel_ms);
      up.push_back(t.upload_ms);
      down.push_back(t.download_ms);
    }
    Row row;
    row.device = dev;
    row.layout = layout;
    row.kernel = kernel;
    row.batch = n;
    row.total_ms = median(total);
    row.kernel_ms = median(kern);
    row.upload_ms = median(up);
    row.download_ms = median(down);
    row.rows_per_s = static_cast<double>(n) / (row.total_ms / 1000.0);
    row.kernel_rows_per_s = static_cast<double>(n) / (row.kernel_ms / 1000.0);
    row.checksum = checksum(out);
    for (float v : out) row.sum += v;
    std::vector<float>& reference = reference_[bi];
    if (reference.empty()) reference = out;
    row.identical = std::memcmp(out.data(), reference.data(), out.size() * sizeof(float)) == 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      const double a = out[i], b = reference[i];
      const double d = std::fabs(a - b);
      if (d > 0) row.max_rel_diff = std::max(row.max_rel_diff, d / std::max(std::fabs(a), std::fabs(b)));
    }
    row.quality = quality;
    rows_.push_back(row);
    std::printf("  %-4s %-6s %-12s batch %8lld: %10.3f ms/batch (kernel %9.3f ms)  %12.0f rows/s%s\n",
                row.device.c_str(), row.layout.c_str(), row.kernel.c_str(), static_cast<long long>(n), row.total_ms,
                row.kernel_ms, row.rows_per_s,
                row.identical ? "" : ("  max rel diff " + fmt("%.2g", row.max_rel_diff)).c_str());
    std::fflush(stdout);
  }

  const ForestBenchConfig& c_;
  const ForestWorkload& w_;
  std::vector<std::vector<float>> batch_rows_;
  std::vector<std::vector<float>> reference_;  // per batch: the first variant's predictions
  std::vector<Row> rows_;
  nlohmann::json layouts_json_ = nlohmann::json::array();
  nlohmann::json skipped_ = nlohmann::json::array();
  bool predictions_written_ = false;
};

}  // namespace

ForestOutput parse_forest_output(const std::string& s) {
  if (s == "margin") return ForestOutput::Margin;
  if (s == "prob") return ForestOutput::Prob;
  if (s == "class") return ForestOutput::Class;
  if (s == "leaf") return ForestOutput::Leaf;
  if (s == "proba") return ForestOutput::Proba;
  throw Error("--output: '" + s + "' is not one of margin, prob, class, leaf, proba");
}

std::vector<index_t> parse_forest_batches(const std::string& s) {
  std::vector<index_t> out;
  for (const std::string& n : split_list(s)) {
    char* end = nullptr;
    const long long v = std::strtoll(n.c_str(), &end, 10);
    if (*end != '\0' || v < 1) throw Error("--batch: '" + n + "' is not a positive row count");
    out.push_back(v);
  }
  if (out.empty()) throw Error("--batch: the list is empty");
  return out;
}

void add_forest_input_options(CLI::App& app, ForestInputs& c) {
  app.add_option("--model", c.model, "XGBoost JSON or UBJSON (Booster.save_model) or Canopy forest JSON, plain or .gz")->required();
  app.add_option("--data", c.data, "CSV or CSV.gz with a header; every column but the label is a feature")->required();
  app.add_option("--label", c.label,
                 "the label column (name or 0-based index), left out of the features (forest: accuracy / RMSE are reported)");
  app.add_option("--batch", c.batch, "rows per batch, or a list such as 1000,100000")->capture_default_str();
  app.add_option("--repeat", c.repeat, "timed runs per variant and batch (the median is reported)")->capture_default_str();
  app.add_option("--row-depth", c.row_depth, "adaptive layout: row scheduling's top-tree depth (forest: 0 is off)")
      ->capture_default_str();
  app.add_option("--output", c.output, "margin, prob, class or leaf (XGBoost's pred_leaf: one node id per tree)")
      ->capture_default_str();
  app.add_option("--json", c.json, "write the results as JSON to this file");
  app.add_option("--graph", c.graph, "GPU: on replays a repeated call's launch as a CUDA graph (ForestRunOptions::graph), off launches every call")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
}

nlohmann::json forest_json_header(const char* workload, const ForestInputs& c, const ForestWorkload& w) {
  return {{"workload", workload},
          {"model", c.model},
          {"model_description", w.forest.describe()},
          {"data", c.data},
          {"rows_in_file", w.data.n_rows},
          {"features", w.data.n_features},
          {"output", c.output},
          {"gpu", gpu_available() ? gpu_description() : std::string("none")}};
}

ForestWorkload load_forest_workload(const ForestInputs& c) {
  if (c.repeat < 1) throw Error("--repeat " + std::to_string(c.repeat) + " must be at least 1");
  ForestWorkload w;
  w.batches = parse_forest_batches(c.batch);
  w.output = parse_forest_output(c.output);
  auto t0 = std::chrono::steady_clock::now();
  w.forest = Forest::load(c.model);
  w.load_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  w.data = read_forest_csv(c.data, c.label);
  w.read_ms = ms_since(t0);
  check_forest_data(w.data, c.data, w.forest);
  w.width = w.forest.output_width(w.output);
  return w;
}

std::vector<float> forest_batch(const ForestData& d, index_t n, double jitter) {
  const int F = d.n_features;
  std::vector<float> rows(static_cast<std::size_t>(n) * F);
  for (index_t i = 0; i < n; ++i) std::memcpy(&rows[static_cast<std::size_t>(i * F)], d.row(i % d.n_rows), sizeof(float) * F);
  if (jitter <= 0 || n <= d.n_rows) return rows;
  // Each feature's standard deviation over the file, missing values left out.
  std::vector<double> mean(static_cast<std::size_t>(F), 0), sq(static_cast<std::size_t>(F), 0), cnt(static_cast<std::size_t>(F), 0);
  for (index_t i = 0; i < d.n_rows; ++i)
    for (int f = 0; f < F; ++f) {
      const double x = d.row(i)[f];
      if (x != x) continue;
      mean[static_cast<std::size_t>(f)] += x;
      sq[static_cast<std::size_t>(f)] += x * x;
      cnt[static_cast<std::size_t>(f)] += 1;
    }
  std::vector<double> sd(static_cast<std::size_t>(F), 0);
  for (int f = 0; f < F; ++f) {
    const std::size_t k = static_cast<std::size_t>(f);
    if (cnt[k] < 2) continue;
    const double m = mean[k] / cnt[k];
    sd[k] = std::sqrt(std::max(0.0, sq[k] / cnt[k] - m * m));
  }
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  auto uniform = [&state]() {  // splitmix64 -> (0, 1)
    state += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (static_cast<double>(z >> 11) + 0.5) / 9007199254740992.0;
  };
  for (index_t i = d.n_rows; i < n; ++i) {
    float* dst = &rows[static_cast<std::size_t>(i * F)];
    for (int f = 0; f < F; ++f) {
      const float src = dst[f];
      if (src != src) continue;
      const double z = std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
      dst[f] = static_cast<float>(src + jitter * sd[static_cast<std::size_t>(f)] * z);
    }
  }
  return rows;
}

void add_forest_options(CLI::App& app, ForestBenchConfig& c) {
  add_forest_input_options(app, c);
  app.add_option("--layouts", c.layouts, "csr, reorg, hier (comma list) or all")->capture_default_str();
  app.add_option("--kernels,--strategy", c.kernels,
                 "GPU kernels: direct, hybrid, shared-data, shared-forest, split-shared-forest, auto (comma list) or all")
      ->capture_default_str();
  app.add_option("--device", c.device, "auto, cpu, gpu or a list such as gpu,cpu")->capture_default_str();
  app.add_option("--subtree-depth", c.subtree_depth, "hierarchical layout: levels per subtree (SD)")->capture_default_str();
  app.add_option("--root-depth", c.root_depth, "hierarchical layout: levels of the root subtree (RSD, <= 12)")
      ->capture_default_str();
  app.add_option("--predictions", c.predictions,
                 "write the first variant's predictions for every row of --data, one line per row");
}

int run_forest(const ForestBenchConfig& c) {
  const std::vector<ForestLayout> layouts = parse_layouts(c.layouts);
  const std::vector<ForestKernel> kernels = parse_kernels(c.kernels);
  std::vector<Device> devices = parse_devices(c.device);
  const ForestWorkload w = load_forest_workload(c);
  std::printf("canopy-bench forest: %s\n  %s (loaded in %.0f ms)\n", c.model.c_str(), w.forest.describe().c_str(), w.load_ms);
  std::printf("data: %s, %lld rows x %d features%s (read in %.0f ms); output %s, %d value%s per row\n", c.data.c_str(),
              static_cast<long long>(w.data.n_rows), w.data.n_features,
              w.data.label_name.empty() ? "" : (", label '" + w.data.label_name + "'").c_str(), w.read_ms,
              c.output.c_str(), w.width, w.width == 1 ? "" : "s");
  for (Device d : devices)
    if (d == Device::Gpu) std::printf("gpu: %s\n", gpu_description().c_str());

  ForestBench bench(c, w);
  for (Device dev : devices)
    for (ForestLayout layout : layouts) {
      const std::unique_ptr<ForestPredictor> p = bench.predictor(layout, dev);
      if (dev == Device::Cpu) {
        bench.run(*p, layout, dev, ForestKernel::Direct);  // the CPU has one executor
        continue;
      }
      for (ForestKernel k : kernels)
        if (p->supports(k)) bench.run(*p, layout, dev, k);
    }
  bench.print_table();
  if (!c.json.empty()) bench.write_json();
  return bench.all_ran() ? 0 : 3;
}

}  // namespace bench
}  // namespace canopy
