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
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "benchmarks/bench.hpp"
#include "benchmarks/bench_common.hpp"
#include "core/checks.hpp"
#include "core/timing.hpp"
#include "runtime/forest_predictor.hpp"
#include "io/forest_data.hpp"

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

}  // namespace

ForestOutput parse_forest_output(const std::string& s) {
  if (s == "margin") return ForestOutput::Margin;
  if (s == "prob") return ForestOutput::Prob;
  if (s == "class") return ForestOutput::Class;
  throw Error("--output: '" + s + "' is not one of margin, prob, class");
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

void add_forest_options(CLI::App& app, ForestBenchConfig& c) {
  app.add_option("--model", c.model, "XGBoost JSON (Booster.save_model) or Canopy forest JSON, plain or .gz")->required();
  app.add_option("--data", c.data, "CSV or CSV.gz with a header; every column but the label is a feature")->required();
  app.add_option("--label", c.label, "the label column (name or 0-based index): accuracy / RMSE are reported");
  app.add_option("--batch", c.batch, "rows per batch, or a list such as 1000,100000")->capture_default_str();
  app.add_option("--layouts", c.layouts, "csr, reorg, hier (comma list) or all")->capture_default_str();
  app.add_option("--kernels,--strategy", c.kernels,
                 "GPU kernels: direct, hybrid, shared-data, shared-forest, split-shared-forest, auto (comma list) or all")
      ->capture_default_str();
  app.add_option("--device", c.device, "auto, cpu, gpu or a list such as gpu,cpu")->capture_default_str();
  app.add_option("--output", c.output, "margin, prob or class")->capture_default_str();
  app.add_option("--subtree-depth", c.subtree_depth, "hierarchical layout: levels per subtree (SD)")->capture_default_str();
  app.add_option("--root-depth", c.root_depth, "hierarchical layout: levels of the root subtree (RSD, <= 12)")
      ->capture_default_str();
  app.add_option("--repeat", c.repeat, "timed runs per variant and batch (the median is reported)")->capture_default_str();
  app.add_option("--row-depth", c.row_depth, "adaptive layout: row scheduling's top-tree depth (0: off)")
      ->capture_default_str();
  app.add_option("--json", c.json, "write the results as JSON to this file");
  app.add_option("--predictions", c.predictions,
                 "write the first variant's predictions for every row of --data, one line per row");
}

int run_forest(const ForestBenchConfig& c) {
  if (c.repeat < 1) throw Error("--repeat " + std::to_string(c.repeat) + " must be at least 1");
  const std::vector<ForestLayout> layouts = parse_layouts(c.layouts);
  const std::vector<ForestKernel> kernels = parse_kernels(c.kernels);
  const std::vector<Device> devices = parse_devices(c.device);
  const ForestOutput output = parse_forest_output(c.output);
  const std::vector<index_t> batches = parse_forest_batches(c.batch);

  auto t0 = std::chrono::steady_clock::now();
  const Forest forest = Forest::load(c.model);
  const double load_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  const ForestData data = read_forest_csv(c.data, c.label);
  const double read_ms = ms_since(t0);
  check_forest_data(data, c.data, forest);
  const int width = forest.output_width(output);
  std::printf("canopy-bench forest: %s\n  %s (loaded in %.0f ms)\n", c.model.c_str(), forest.describe().c_str(), load_ms);
  std::printf("data: %s, %lld rows x %d features%s (read in %.0f ms); output %s, %d value%s per row\n", c.data.c_str(),
              static_cast<long long>(data.n_rows), data.n_features,
              data.label_name.empty() ? "" : (", label '" + data.label_name + "'").c_str(), read_ms, c.output.c_str(),
              width, width == 1 ? "" : "s");
  for (Device d : devices)
    if (d == Device::Gpu) std::printf("gpu: %s\n", gpu_description().c_str());

  // Batches: the file's rows, repeated from the top when it is shorter.
  std::vector<std::vector<float>> batch_rows;
  for (index_t n : batches) {
    std::vector<float> b(static_cast<std::size_t>(n) * data.n_features);
    for (index_t i = 0; i < n; ++i)
      std::memcpy(&b[static_cast<std::size_t>(i * data.n_features)], data.row(i % data.n_rows),
                  sizeof(float) * data.n_features);
    batch_rows.push_back(std::move(b));
  }

  std::vector<Row> rows;
  std::vector<std::vector<float>> reference(batches.size());
  nlohmann::json layouts_json = nlohmann::json::array();
  bool predictions_written = false;
  nlohmann::json skipped = nlohmann::json::array();
  for (Device dev : devices) {
    for (ForestLayout layout : layouts) {
      ForestConfig cfg;
      cfg.layout = layout;
      cfg.device = dev;
      cfg.hierarchical.subtree_depth = c.subtree_depth;
      cfg.hierarchical.root_depth = c.root_depth;
      t0 = std::chrono::steady_clock::now();
      ForestPredictor p(forest, cfg);
      const double build_ms = ms_since(t0);
      std::printf("%s layout on the %s: %.2f MiB (%s), built%s in %.0f ms\n", to_string(layout), to_string(dev),
                  static_cast<double>(p.footprint_bytes()) / (1 << 20), p.layout_details().c_str(),
                  dev == Device::Gpu ? " and uploaded" : "", build_ms);
      layouts_json.push_back({{"layout", to_string(layout)},
                              {"device", to_string(dev)},
                              {"footprint_bytes", p.footprint_bytes()},
                              {"details", p.layout_details()},
                              {"build_ms", build_ms}});
      std::vector<ForestKernel> ks;
      if (dev == Device::Cpu) ks = {ForestKernel::Direct};  // the CPU has one executor
      else
        for (ForestKernel k : kernels)
          if (p.supports(k)) ks.push_back(k);
      for (ForestKernel k : ks) {
        try {
          ForestRunOptions run;
          run.output = output;
          run.kernel = k;
          run.row_schedule_depth = layout == ForestLayout::Adaptive ? c.row_depth : 0;
          double quality = -1;
          if (!data.labels.empty() || (!c.predictions.empty() && !predictions_written)) {
            // Untimed: the whole file, for accuracy / RMSE and --predictions.
            std::vector<float> all(static_cast<std::size_t>(data.n_rows) * width);
            p.predict(data.values.data(), data.n_rows, all.data(), run);
            if (!c.predictions.empty() && !predictions_written) {
              write_predictions(c.predictions, all.data(), data.n_rows, width);
              predictions_written = true;
            }
            if (!data.labels.empty()) {
              if (forest.is_classifier()) {
                ForestRunOptions cls = run;
                cls.output = ForestOutput::Class;
                std::vector<float> pred(static_cast<std::size_t>(data.n_rows));
                p.predict(data.values.data(), data.n_rows, pred.data(), cls);
                index_t right = 0;
                for (index_t i = 0; i < data.n_rows; ++i) right += pred[static_cast<std::size_t>(i)] == data.labels[static_cast<std::size_t>(i)];
                quality = static_cast<double>(right) / static_cast<double>(data.n_rows);
              } else {
                ForestRunOptions val = run;
                val.output = ForestOutput::Prob;
                std::vector<float> pred(static_cast<std::size_t>(data.n_rows));
                p.predict(data.values.data(), data.n_rows, pred.data(), val);
                double se = 0;
                for (index_t i = 0; i < data.n_rows; ++i) {
                  const double e = pred[static_cast<std::size_t>(i)] - data.labels[static_cast<std::size_t>(i)];
                  se += e * e;
                }
                quality = std::sqrt(se / static_cast<double>(data.n_rows));
              }
            }
          }
          for (std::size_t bi = 0; bi < batches.size(); ++bi) {
            const index_t n = batches[bi];
            std::vector<float> out(static_cast<std::size_t>(n) * width);
            p.predict(batch_rows[bi].data(), n, out.data(), run);  // warm-up
            std::vector<double> total, kern, up, down;
            for (int r = 0; r < c.repeat; ++r) {
              const ForestTimes t = p.predict(batch_rows[bi].data(), n, out.data(), run);
              total.push_back(t.total_ms);
              kern.push_back(t.kernel_ms);
              up.push_back(t.upload_ms);
              down.push_back(t.download_ms);
            }
            Row row;
            row.device = to_string(dev);
            row.layout = to_string(layout);
            row.kernel = dev == Device::Cpu ? "cpu-tbb" : to_string(k);
            row.batch = n;
            row.total_ms = median(total);
            row.kernel_ms = median(kern);
            row.upload_ms = median(up);
            row.download_ms = median(down);
            row.rows_per_s = static_cast<double>(n) / (row.total_ms / 1000.0);
            row.kernel_rows_per_s = static_cast<double>(n) / (row.kernel_ms / 1000.0);
            row.checksum = checksum(out);
            for (float v : out) row.sum += v;
            if (reference[bi].empty()) reference[bi] = out;
            row.identical = std::memcmp(out.data(), reference[bi].data(), out.size() * sizeof(float)) == 0;
            for (std::size_t i = 0; i < out.size(); ++i) {
              const double a = out[i], b = reference[bi][i];
              const double d = std::fabs(a - b);
              if (d > 0) row.max_rel_diff = std::max(row.max_rel_diff, d / std::max(std::fabs(a), std::fabs(b)));
            }
            row.quality = quality;
            rows.push_back(row);
            std::printf("  %-4s %-6s %-12s batch %8lld: %10.3f ms/batch (kernel %9.3f ms)  %12.0f rows/s%s\n",
                        row.device.c_str(), row.layout.c_str(), row.kernel.c_str(), static_cast<long long>(n),
                        row.total_ms, row.kernel_ms, row.rows_per_s,
                        row.identical ? "" : ("  max rel diff " + fmt("%.2g", row.max_rel_diff)).c_str());
            std::fflush(stdout);
          }
        } catch (const Error& e) {
          // A variant that cannot run here (e.g. shared data with too many features for shared
          // memory) is reported, and the others go on.
          std::printf("  %-4s %-6s %-12s skipped: %s\n", to_string(dev), to_string(layout),
                      dev == Device::Cpu ? "cpu-tbb" : to_string(k), e.what());
          skipped.push_back({{"device", to_string(dev)}, {"layout", to_string(layout)},
                             {"kernel", dev == Device::Cpu ? "cpu-tbb" : to_string(k)}, {"error", e.what()}});
        }
      }
    }
  }

  const char* quality_name = forest.is_classifier() ? "accuracy" : "rmse";
  std::printf("\n%-4s %-6s %-12s %9s %12s %12s %14s %14s %18s %10s %9s\n", "dev", "layout", "kernel", "batch",
              "ms/batch", "kernel ms", "rows/s", "kernel rows/s", "checksum", "vs first", quality_name);
  for (const Row& r : rows) {
    std::printf("%-4s %-6s %-12s %9lld %12.3f %12.3f %14.0f %14.0f %18llx %10s %9s\n", r.device.c_str(),
                r.layout.c_str(), r.kernel.c_str(), static_cast<long long>(r.batch), r.total_ms, r.kernel_ms,
                r.rows_per_s, r.kernel_rows_per_s, static_cast<unsigned long long>(r.checksum),
                r.identical ? "same" : fmt("%.1e", r.max_rel_diff).c_str(), r.quality < 0 ? "-" : fmt("%.4f", r.quality).c_str());
  }
  std::printf("\nmedian of %d runs after a warm-up; ms/batch: the whole predict() call (GPU: with the copies); "
              "\"vs first\": the largest relative difference from the first variant's predictions\n",
              c.repeat);

  if (!c.json.empty()) {
    nlohmann::json j;
    j["workload"] = "forest";
    j["model"] = c.model;
    j["model_description"] = forest.describe();
    j["trees"] = forest.n_trees();
    j["nodes"] = forest.n_nodes();
    j["max_depth"] = forest.max_depth();
    j["data"] = c.data;
    j["rows_in_file"] = data.n_rows;
    j["features"] = data.n_features;
    j["output"] = c.output;
    j["repeat"] = c.repeat;
    j["subtree_depth"] = c.subtree_depth;
    j["root_depth"] = c.root_depth;
    j["gpu"] = gpu_available() ? gpu_description() : std::string("none");
    j["layouts"] = layouts_json;
    j["skipped"] = skipped;
    j["variants"] = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json v{{"device", r.device},       {"layout", r.layout},         {"kernel", r.kernel},
                       {"batch", r.batch},         {"ms_per_batch", r.total_ms}, {"kernel_ms", r.kernel_ms},
                       {"upload_ms", r.upload_ms}, {"download_ms", r.download_ms}, {"rows_per_s", r.rows_per_s},
                       {"kernel_rows_per_s", r.kernel_rows_per_s}, {"checksum", r.checksum}, {"sum", r.sum},
                       {"identical_to_first", r.identical}, {"max_rel_diff_to_first", r.max_rel_diff}};
      if (r.quality >= 0) v[quality_name] = r.quality;
      j["variants"].push_back(v);
    }
    std::ofstream f(c.json);
    if (!f) throw Error("--json " + c.json + ": cannot open for writing");
    f << j.dump(2) << "\n";
  }
  return skipped.empty() ? 0 : 3;
}

}  // namespace bench
}  // namespace canopy
