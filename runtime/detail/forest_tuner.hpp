// Internal: Auto over the adaptive layout's GPU engine, Tahoe's performance model and a small
// auto-tuner. Auto plans each call: a batch-size class it has not tuned runs a prior at once
// and, call by call, runs other schedules in some calls' place (compared with the choice's
// recent calls) until the class settles; the choice then persists (ForestChoiceFile). The model
// reads the GPU's hardware parameters (measured once, cached on disk), the warp emulator's
// coalescing ratios and each strategy's calibrated times (both from the first batch it sees);
// the tuner times a grid of schedules around the model's choice. CUDA-free. Auto's part is in
// runtime/detail/forest_auto.cu, the model's and the tuner's in runtime/detail/forest_tuner.cu.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "layouts/forest_adaptive.hpp"
#include "runtime/detail/forest_choices.hpp"
#include "runtime/detail/forest_trials.hpp"
#include "runtime/forest_predictor.hpp"
#include "scheduler/forest_model.hpp"
#include "scheduler/forest_rows.hpp"

namespace canopy {
namespace gpu {
struct AdaptiveBatch;
}
namespace detail {

template <class Layout>
class ForestEngine;

class ForestTuner {
 public:
  // The engine must outlive the tuner. file: where tuned choices are read and kept.
  ForestTuner(ForestEngine<AdaptiveForest>& engine, ForestChoiceFile file);

  // Auto's plan for one call of n_rows. While its size class is being tuned
  // (opt.online_tuning), a call either runs the class's choice (its time joins the choice's
  // recent times) or runs a candidate schedule in its place: every schedule gives the same
  // bits, so the call is the trial and costs only the difference. Before its first such call a
  // candidate is previewed after a choice call's kernel on a few rows; one far slower there is
  // dropped without ever running a whole batch.
  struct Plan {
    ForestKernel kernel = ForestKernel::Direct;  // what the call runs: the choice or a candidate
    ForestSchedule knobs;                        // unresolved
    ForestChoice choice;                         // the class's choice (a failed candidate's fallback)
    ForestTuning tuning = ForestTuning::Prior;
    bool graph = true;            // false while the class is tuned: its calls' times must compare alike
    bool candidate_call = false;  // kernel/knobs is candidate `candidate`
    bool choice_sample = false;   // the call runs the choice of a class being tuned: its time is kept
    ForestTrialRuns preview;      // resolved: the candidate on m rows (and the choice on m)
    std::tuple<int, int, bool> key;
    std::size_t candidate = 0;  // its index in the class's current step
    int step = 0;               // the step it belongs to
  };
  Plan plan(index_t n_rows, const ForestRunOptions& opt);
  // The call's kernel time (+inf: the candidate could not run) and its preview's times (if any).
  void record(const Plan& plan, index_t n_rows, double call_ms, const std::vector<double>& preview_ms);
  // The class of n_rows is tuned (or online tuning could not go on).
  bool settled(index_t n_rows, const ForestRunOptions& opt) const;

  // Canopy's model (scheduler/forest_model.hpp) for this batch: every strategy, feasible and
  // fastest first (ForestPredictor::model_estimates). GPU work only on the first batch.
  std::vector<ForestTrial> estimates(const float* rows, index_t n_rows, const ForestRunOptions& opt);
  // Every schedule of the grid that runs, timed on these rows, the fastest first
  // (ForestPredictor::tune).
  std::vector<ForestTrial> tune(const float* rows, index_t n_rows, int width, const ForestRunOptions& opt, int repeat);

 private:
  // Each strategy's time per row on this forest with the GPU full, and its time for a small
  // batch (default schedules); zero for a strategy this forest cannot take.
  struct Calibration {
    ForestKernel kernel;
    double row_ns = 0;    // per row, the GPU full
    double small_ns = 0;  // a small batch, whole
  };
  const ForestHardware& hardware(const std::string& cache);
  // The first batch seen: the warp emulator's profile and the calibration, from these rows.
  void learn_from_first_batch(const float* rows, index_t n_rows, stream_t caller);
  void calibrate(const float* rows, index_t n_rows);
  // The model's view of one strategy's run of n_rows (default schedule).
  ForestShape shape(ForestKernel k, index_t n_rows) const;
  // The caller's rows on the device as the kernels read them (row scheduling applied), with
  // the engine's own output buffer: what tune() and choose() time.
  gpu::AdaptiveBatch device_batch(const float* rows, index_t n_rows, int width, const ForestRunOptions& opt);

  ForestEngine<AdaptiveForest>& engine_;
  std::unique_ptr<ForestHardware> hardware_;
  std::string hardware_path_;
  std::unique_ptr<ForestAccessProfile> profile_;
  std::vector<Calibration> calibrated_;
  // Auto's state for one (size class, row depth, knobs left to Auto).
  struct ClassState {
    ForestChoice choice;  // what the class's calls run
    ForestTuning tuning = ForestTuning::Prior;
    bool done = false;    // no more trials (tuned, or tuning could not go on)
    bool fresh = true;    // no call yet: the first runs the prior alone
    // The current step: candidates, each run in place of the choice on kTrialSamples calls
    // and compared with the choice's recent calls of like size.
    int step = 0;         // 0: none yet; 1: the strategies; 2 + k: knob axis k of a sweep
    int sweep = 0;
    bool moved = false;   // a knob moved in this sweep
    std::vector<ForestChoice> candidates;
    std::vector<char> previewed;
    std::vector<std::vector<double>> ratios;  // candidate / the choice's estimate, per call
    std::vector<std::vector<std::pair<double, double>>> seen;  // its calls: (rows, kernel ms)
    std::size_t next = 0;
    bool candidate_turn = false;              // choice and candidate calls alternate
    std::vector<std::pair<double, double>> base;  // the choice's recent calls: (rows, kernel ms)
    double choice_preview_ms = 0;                 // the choice at the class's preview size (0: not yet)
  };
  ClassState& state(const std::tuple<int, int, bool>& key, index_t n_rows, const ForestRunOptions& opt);
  ForestChoice prior(const std::tuple<int, int, bool>& key, index_t n_rows, const ForestRunOptions& opt) const;
  // Sets up the class's next step (candidates that resolve for n_rows); false when tuning is over.
  bool next_step(ClassState& s, index_t n_rows, const ForestRunOptions& opt);
  void finish(const std::tuple<int, int, bool>& key, ClassState& s);

  // A strategy hopeless at one class is hopeless on the far side of it (thread-per-row
  // strategies at smaller batches, shared data at larger ones): per (row depth, strategy), the
  // class where it lost by more than kHopeless. Its trials are skipped there.
  bool hopeless(ForestKernel k, int size_class, int depth) const;
  std::map<std::pair<int, ForestKernel>, int> lost_at_;
  // Every preview's time, per schedule (its kernel, the knobs before resolution) and row depth:
  // more rows never take less time, so it bounds that schedule's time at larger batches.
  struct Previewed {
    ForestChoice schedule;
    int depth;
    index_t rows;
    double ms;
  };
  std::vector<Previewed> previews_;
  // The longest preview of c at depth on at most n_rows rows (0: none).
  double floor_above(const ForestChoice& c, int depth, index_t n_rows) const;

  ForestChoiceFile file_;
  ForestChoiceMap stored_;  // the file's entries for this GPU, and what was tuned since
  bool loaded_ = false;
  std::map<std::tuple<int, int, bool>, ClassState> classes_;
};

}  // namespace detail
}  // namespace canopy
