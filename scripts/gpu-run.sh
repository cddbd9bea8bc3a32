#!/usr/bin/env bash
# Runs on the GPU machine over what scripts/gpu-stage.sh staged; the logs and JSON files go to
# one archive, $OUT/results-<what>.tgz (or out/), since only a few files may come back.
#   tests  all tests, then compute-sanitizer memcheck and racecheck over the GPU tests
#   bench  canopy-bench pc on covtype, cities and uniform:400000:7 (shuffled and file order)
#   depth  the depth-sensitivity sweep (d = 4..14) on covtype and uniform
#   forest the forest tests under compute-sanitizer and the forest benchmark (staged models)
#   guided canopy-bench nn, knn, bt, vp on covtype, cities and uniform:400000:7, shuffled
#   bh     canopy-bench bh on plummer:1000000 and uniform:1000000:3
#   quick  the tests once (no sanitizers), then guided and bh with 3 repeats
#   knn-qps  kNN queries per second, GPU hybrid against the CPU executor, k = 1, 8, 32
#   depth-auto  --depth auto against every fixed depth, pc and knn on covtype, cities, uniform
#   guided-rows  nn, knn, bt, vp: guided rows without a probe (depths 10-13) against the probed
#          default (depth 8), unpipelined
#   pipeline  4M queries against a 400k tree, pc and knn, pipelined and not, and pipelined with
#          equal chunks (--ramp off)
#   pipeline-rows  the pipelined kNN's guided rows: lean probe at depth 8, no probe at depths
#          10-13 and capped at 16, no probe unpipelined; pc with one stream priority
#   graph  the quadtree-over-cities example (a user tree as a Boost.Graph) on the full cities file
#   forest-study  the adaptive layout's forest tests, then canopy-bench forest-study on the six
#          models of the forest issue (the five and the categorical covtype model); FS_RUNS=3
#          repeats it with fresh hardware caches, FS_TUNE=1 adds the tuner (batches 100, 10,000, 1,000,000); FS_MODELS narrows the list
#   forest-serve  canopy-bench forest-serve on the issue's three models (covtype_xgb_bin_d8,
#          higgs_xgb_d6, covtype_rf_d12): the default call under SERVE_CALLS (10,000) calls of
#          random batch sizes (1 to SERVE_MAX, 10,000), a cold process on an empty cache, then a
#          warm one, a second process on the same CANOPY_CACHE_DIR; SERVE_RUNS=n repeats it with
#          fresh caches; serve_<run>_<model>_{cold,warm}.json (forest_study_table.py --serve)
#   profile  Nsight Compute sections of the executor kernels (mask, FSM, independent)
#   sanitize  compute-sanitizer memcheck (leak check on), initcheck, synccheck and racecheck, each
#          over the whole test binary (every GPU test; the CPU tests ride along), one tool after
#          another in SHARDS gtest shards side by side (default 8, spread over the GPUs there are;
#          TOOLS narrows the tools; SANITIZE_LIST=file runs the tests it names, one process
#          each); the
#          tests excluded are listed below with their reasons; racecheck leaves CUB's kernels
#          out (RACECHECK_EXCLUDE)
#   soak   canopy_soak: 10,000 calls of pc, knn, bh, custom and forest from 4 threads, every
#          result checked, device and host memory at the start and the end
#   smoke  the driver's smoke test (scripts/driver_smoke.sh): every canopy-bench subcommand on 10^5
#          and 10^6 points and on the real files, each checked (exit 0, the variants' results
#          identical, ...), a summary table; SMOKE_JOBS cases side by side (default 2), SMOKE_ONLY
#          a regex of the cases to run, SMOKE_ARGS more of the script's options
#   smoke-memcheck  the same under compute-sanitizer memcheck, 10^5 points, no real files
#          (SMOKE_JOBS default 4)
#   jz     issue 38's table at jz-tree's shape (canopy-bench e2e: N uniform 3-d points, N separate
#          queries, data on the device, build + the default call, its trial): N = 10^6, 10^7,
#          3x10^7, kNN k = 8, 16, 30, 64 and radius counts for a mean of 30; 2-d and 7-d at 10^6
#   defaults  the default call against every schedule x executor (independent, sorted,
#          hybrid-key, auto, the old dense-matrix default): pc and knn on covtype, cities,
#          uniform 400k-7d and 10^5..10^7 3-d, bh on plummer and uniform 1M (RESULTS.md,
#          "The default call")
set -uo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
what=${1:-all}
final=${OUT:-out}
out=$(mktemp -d)
trap 'tar -czf "$final/results-$what.tgz" -C "$out" . ; echo "results in $final/results-$what.tgz"' EXIT
trap "exit 143" TERM INT
mkdir -p "$final"
bin=${CANOPY_BIN:-stage/bin}
# gpu-stage.sh packs the binaries (stage/bins.tgz) where they would not fit the carry otherwise.
[[ -f stage/bins.tgz && ! -x $bin/canopy_tests ]] && tar -xzf stage/bins.tgz -C stage
# The deliberate out-of-memory test is left out: memcheck reports its failed cudaMalloc.
gpu_tests='*Gpu*:Soundness.Gpu*:Inspector.Gpu*:CountsEqualBruteForceReal.*:CountsEqualBruteForceEdge.*:ForestGpu.*:KnnSoundness.*:KnnDegenerate.*:GuidedInspector.*:BhApi.*:BhSoundness.*:-RuntimeErrors.NotEnoughGpuMemoryNamesTheBuffer:*Cpu:KnnExactGpu.KdTree:KnnExactGpu.BallTree:KnnExactGpu.VpTree'

repeat=5
if [[ $what == quick ]]; then
  repeat=3
  $bin/canopy_tests --gtest_brief=1 2>&1 | tail -40 | tee "$out/tests.txt"
fi

if [[ $what == tests || $what == all ]]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  $bin/canopy_tests --gtest_brief=1 2>&1 | tail -40 | tee "$out/tests.txt"
  timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 $bin/canopy_tests --gtest_brief=1 \
    --gtest_filter="$gpu_tests" > "$out/memcheck.txt" 2>&1
  echo "memcheck exit $?" | tee -a "$out/memcheck.txt"; tail -4 "$out/memcheck.txt"
  timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 $bin/canopy_tests --gtest_brief=1 \
    --gtest_filter='Soundness.Gpu*:Inspector.Gpu*:ForestGpu.EveryKernelIsBitIdenticalToTheCpu:GuidedSchedulerGpu.*:KnnSoundness.KdTree:BhSoundness.*' > "$out/racecheck.txt" 2>&1
  echo "racecheck exit $?" | tee -a "$out/racecheck.txt"; tail -4 "$out/racecheck.txt"
  f=tests/data/forest
  { for e in pc knn bh custom; do $bin/${e}_example; done
    $bin/forest_example $f/xgb_higgs.json $f/higgs_rows.csv $f/xgb_higgs.prob.txt; } | tee "$out/example.txt"
fi

if [[ $what == tests || $what == graph || $what == all ]]; then
  # Any tree given as a graph: the quadtree example on the full cities file, CPU and GPU.
  $bin/quadtree_cities stage/data/cities_171k.csv.gz 1000000 2>&1 | tee "$out/quadtree_cities.txt"
fi

if [[ $what == bench || $what == all ]]; then
  run() { local name=$1; shift; echo "== canopy-bench pc $*"; $bin/canopy-bench pc "$@" --json "$out/$name.json" | tail -12; }
  {
    run covtype_shuffled --points stage/data/covtype_points_254k.csv.gz --columns 0-6 --radius auto:32 --shuffle 1 --variants all
    run cities_shuffled --points stage/data/cities_171k.csv.gz --radius auto:32 --shuffle 1 --variants all
    run uniform_shuffled --generate uniform:400000:7 --radius auto:32 --shuffle 1 --variants all
    run covtype_file --points stage/data/covtype_points_254k.csv.gz --columns 0-6 --radius auto:32 --variants all
    run cities_file --points stage/data/cities_171k.csv.gz --radius auto:32 --variants all
  } 2>&1 | tee "$out/bench.txt"
fi

if [[ $what == smoke || $what == smoke-memcheck || $what == all ]]; then
  # The driver's smoke test over the staged binary and data; its per-case logs go in smoke/.
  smoke=(--bin "$bin/canopy-bench" --data stage/data --out "$out/smoke" --jobs "${SMOKE_JOBS:-2}")
  [[ $what == smoke-memcheck ]] && smoke=(--bin "$bin/canopy-bench" --out "$out/smoke-memcheck" --memcheck
                                          --jobs "${SMOKE_JOBS:-4}")
  [[ -n ${SMOKE_ONLY:-} ]] && smoke+=(--only "$SMOKE_ONLY")
  # shellcheck disable=SC2206
  smoke+=(${SMOKE_ARGS:-})
  bash scripts/driver_smoke.sh "${smoke[@]}" 2>&1 | tee "$out/$what.txt"
fi

if [[ $what == depth || $what == all ]]; then
  {
    for input in "--points stage/data/covtype_points_254k.csv.gz --columns 0-6" "--generate uniform:400000:7" \
                 "--points stage/data/cities_171k.csv.gz"; do
      name=$(echo "$input" | sed -E 's/.*(uniform|covtype|cities).*/\1/')
      echo "== depth sweep, $name"
      $bin/canopy-bench pc $input --radius auto:32 --shuffle 1 --variants mask-lockstep,hybrid,hybrid-gpu-sandpile \
        --depths 4-14 --repeat 5 --json "$out/depth_$name.json" | tail -38
    done
  } 2>&1 | tee "$out/depth.txt"
fi

inputs=("covtype --points stage/data/covtype_points_254k.csv.gz --columns 0-6"
        "cities --points stage/data/cities_171k.csv.gz" "uniform --generate uniform:400000:7")
if [[ $what == guided || $what == quick || $what == all ]]; then
  {
    for w in nn knn bt vp; do
      for input in "${inputs[@]}"; do
        set -- $input
        name=$1; shift
        echo "== canopy-bench $w $* --shuffle 1"
        timeout 300 $bin/canopy-bench $w "$@" --shuffle 1 --repeat $repeat --json "$out/${w}_$name.json" | tail -12
      done
    done
  } 2>&1 | tee "$out/guided.txt"
fi

if [[ $what == bh || $what == quick || $what == all ]]; then
  {
    for input in plummer:1000000 uniform:1000000:3; do
      echo "== canopy-bench bh --generate $input --shuffle 1"
      timeout 300 $bin/canopy-bench bh --generate $input --shuffle 1 --repeat $repeat \
        --json "$out/bh_${input%%:*}.json" | tail -14
    done
  } 2>&1 | tee "$out/bh.txt"
fi

if [[ $what == jz ]]; then
  for N in 1000000 10000000 30000000; do
    for K in 8 16 30 64; do
      echo "== e2e knn uniform:$N:3 k $K"
      timeout 300 $bin/canopy-bench e2e --workload knn --generate uniform:$N:3 --queries uniform:$N:3 --k $K --repeat 3 \
        --json "$out/jz_knn_${N}_$K.json" | grep -E "^\| (default|leaf)|second"
    done
    echo "== e2e pc uniform:$N:3 radius auto:30"
    timeout 300 $bin/canopy-bench e2e --workload pc --generate uniform:$N:3 --queries uniform:$N:3 --radius auto:30 \
      --repeat 3 --json "$out/jz_pc_$N.json" | grep -E "^\| (default|leaf)|second"
  done 2>&1 | tee "$out/jz.txt"
  for D in 2 7; do
    echo "== e2e knn uniform:1000000:$D k 30"
    timeout 300 $bin/canopy-bench e2e --workload knn --generate uniform:1000000:$D --queries uniform:1000000:$D --k 30 \
      --repeat 3 --json "$out/jz_knn_${D}d.json" | grep -E "^\| (default|leaf)|second"
  done 2>&1 | tee -a "$out/jz.txt"
fi

if [[ $what == defaults ]]; then
  {
    v=independent,sorted-independent,fsm-lockstep-sorted,hybrid-key,hybrid-key-independent,auto
    cov="--points stage/data/covtype_points_254k.csv.gz --columns 0-6"
    cit="--points stage/data/cities_171k.csv.gz"
    for w in pc knn; do
      old=hybrid-gpu-sandpile
      [[ $w == knn ]] && old=hybrid-gpu-buckets
      for input in "$cov" "$cit" "--generate uniform:400000:7" "--generate uniform:100000:3" \
                   "--generate uniform:1000000:3" "--generate uniform:10000000:3"; do
        name=$(echo "$input" | tr -c 'a-z0-9' '_')
        echo "== canopy-bench $w $input --shuffle 1"
        timeout 300 $bin/canopy-bench $w $input --shuffle 1 --repeat $repeat --variants $v,$old \
          --json "$out/defaults_${w}_${name}.json" | grep -E "^(independent|sorted|fsm|hybrid|auto)|picked"
      done
    done
    for input in plummer:1000000 uniform:1000000:3; do
      echo "== canopy-bench bh --generate $input --shuffle 1"
      timeout 300 $bin/canopy-bench bh --generate $input --shuffle 1 --repeat $repeat \
        --variants $v,hybrid-gpu-sandpile --json "$out/defaults_bh_${input%%:*}.json" |
        grep -E "^(independent|sorted|fsm|hybrid|auto)|picked"
    done
  } 2>&1 | tee "$out/defaults.txt"
fi

if [[ $what == guided-depth ]]; then
  {
    for w in nn knn vp; do
      for input in "${inputs[@]}"; do
        set -- $input
        name=$1; shift
        echo "== depth sweep: canopy-bench $w $* --shuffle 1"
        timeout 200 $bin/canopy-bench $w "$@" --shuffle 1 --variants mask-lockstep,hybrid --depths 4-11 \
          --repeat 3 --json "$out/depth_${w}_$name.json" | tail -11
      done
    done
  } 2>&1 | tee "$out/guided_depth.txt"
fi

if [[ $what == guided-rows ]]; then
  # Guided rows without a probe (depths 10-13, cap 32) against the probed default (depth 8),
  # unpipelined, on the guided study's inputs.
  {
    for w in nn knn bt vp; do
      for input in "${inputs[@]}"; do
        set -- $input
        name=$1; shift
        echo "== canopy-bench $w $* --shuffle 1 --probe full / none"
        timeout 150 $bin/canopy-bench $w "$@" --shuffle 1 --variants hybrid,hybrid-gpu-buckets --depth 8 \
          --repeat 5 --json "$out/rows_full_${w}_$name.json" | tail -5
        timeout 200 $bin/canopy-bench $w "$@" --shuffle 1 --variants hybrid,hybrid-gpu-buckets --depths 10-13 \
          --probe none --repeat 5 --json "$out/rows_none_${w}_$name.json" | tail -11
      done
    done
  } 2>&1 | tee "$out/guided_rows.txt"
fi

if [[ $what == knn-qps ]]; then
  # Queries per second of hybrid on the GPU against the TBB CPU executor on this host's cores.
  {
    for k in 1 8 32; do
      echo "== knn k=$k, GPU"
      timeout 120 $bin/canopy-bench knn --generate uniform:400000:7 --shuffle 1 --k $k --repeat 3 \
        --variants mask-lockstep,independent,hybrid,hybrid-gpu-buckets --json "$out/qps_gpu_k$k.json" | tail -7
      echo "== knn k=$k, CPU ($(nproc) threads)"
      timeout 200 $bin/canopy-bench knn --generate uniform:400000:7 --shuffle 1 --k $k --repeat 3 --device cpu \
        --variants independent,hybrid-independent --json "$out/qps_cpu_k$k.json" | tail -5
    done
  } 2>&1 | tee "$out/knn_qps.txt"
fi

if [[ $what == forest ]]; then
  {
    for m in "covtype_xgb_d8.json.gz covtype.csv.gz Cover_Type" "higgs_rf_d20.json higgs.csv.gz label"; do
      set -- $m
      echo "== canopy-bench forest --model $1"
      $bin/canopy-bench forest --model stage/forest/$1 --data stage/forest/$2 --label $3 --batch 1000,100000 \
        --device gpu,cpu --repeat 10 --json "$out/forest_${1%%.*}.json"
    done
  } 2>&1 | tee "$out/forest.txt"
fi

if [[ $what == forest-study ]]; then
  {
    echo "== forest tests (adaptive layout)"
    $bin/canopy_tests --gtest_brief=1 --gtest_filter='ForestAdaptive*:ForestRowSchedule*:ForestHardware*:ForestCostModel*:TreeSimilarity*'
    # FS_RUNS independent runs (default 1), each with a fresh hardware cache; with several,
    # scripts/forest_study_table.py --runs study_*.json tabulates auto against tuned per run.
    for ((run = 1; run <= ${FS_RUNS:-1}; ++run)); do
      export CANOPY_CACHE_DIR=$out/cache$run
      for m in ${FS_MODELS:-"covtype_xgb_bin_d8:covtype_bin:Cover_Type_2" "higgs_xgb_d6:higgs:label" "letter_xgb_d4:letter:lettr" "covtype_rf_d12:covtype_bin:Cover_Type_2" "higgs_rf_d20:higgs:label" "covtype_xgb_cat_d8:covtype_cat:Cover_Type_2"}; do
        IFS=: read -r model data label <<< "$m"
        echo "== run $run: canopy-bench forest-study --model $model"
        timeout ${FS_TIMEOUT:-240} $bin/canopy-bench forest-study --model stage/forest/$model.json.gz \
          --data stage/forest/$data.csv.gz --label $label --batch ${FS_BATCH:-100,10000,1000000} --repeat ${FS_REPEAT:-10} \
          ${FS_TUNE:+--tune} --json "$out/study_${run}_$model.json"
      done
    done
  } 2>&1 | tee "$out/forest_study.txt"
fi

if [[ $what == forest-serve ]]; then
  # The default predictor as a server calls it, the cold phase and then the warm phase each a
  # process of its own over one cache directory (the choices the cold process saved, and the
  # hardware parameters it measured, are what the warm one starts from).
  {
    for ((run = 1; run <= ${SERVE_RUNS:-1}; ++run)); do
      for m in ${SERVE_MODELS:-"covtype_xgb_bin_d8:covtype_bin:Cover_Type_2" "higgs_xgb_d6:higgs:label" "covtype_rf_d12:covtype_bin:Cover_Type_2"}; do
        IFS=: read -r model data label <<< "$m"
        cache=$out/serve_cache_${run}_$model
        rm -rf "$cache"
        mkdir -p "$cache"
        export CANOPY_CACHE_DIR=$cache
        for phase in cold warm; do
          echo "== run $run: canopy-bench forest-serve --model $model --phase $phase"
          timeout ${SERVE_TIMEOUT:-280} $bin/canopy-bench forest-serve --model stage/forest/$model.json.gz \
            --data stage/forest/$data.csv.gz --label $label --calls ${SERVE_CALLS:-10000} --max-batch ${SERVE_MAX:-10000} \
            --phase $phase --cache-dir "$cache" --json "$out/serve_${run}_${model}_$phase.json"
          echo "exit $?"
        done
        ls -R "$cache" | head -20
      done
    done
    python3 scripts/forest_study_table.py --serve "$out"/serve_*.json 2>&1 || true
  } 2>&1 | tee "$out/forest_serve.txt"
fi

if [[ $what == pipeline ]]; then
  # 4,000,000 queries against a 400,000-point tree, pipelined and not (the execute-only time of
  # the pipelined schedule is in the pipelined table).
  {
    for w in pc knn; do
      v=hybrid,hybrid-gpu-sandpile
      [[ $w == knn ]] && v=hybrid,hybrid-gpu-buckets
      for p in on off; do
        echo "== canopy-bench $w --generate uniform:400000:7 --queries uniform:4000000:7 --pipeline $p"
        timeout 280 $bin/canopy-bench $w --generate uniform:400000:7 --queries uniform:4000000:7 --variants $v \
          --pipeline $p --repeat 3 --json "$out/pipeline_${w}_$p.json" | tail -14
      done
    done
    # The chunk ramp (the default) against equal chunks.
    g="--generate uniform:400000:7 --queries uniform:4000000:7 --repeat 3"
    echo "== canopy-bench knn $g --pipeline on --ramp off (equal chunks)"
    timeout 200 $bin/canopy-bench knn $g --variants hybrid,hybrid-gpu-buckets --pipeline on --ramp off \
      --json "$out/pipeline_knn_equal.json" | tail -14
    echo "== canopy-bench pc $g --pipeline on --ramp off (equal chunks)"
    timeout 200 $bin/canopy-bench pc $g --variants hybrid,hybrid-gpu-sandpile --pipeline on --ramp off \
      --json "$out/pipeline_pc_equal.json" | tail -14
  } 2>&1 | tee "$out/pipeline.txt"
fi

if [[ $what == pipeline-rows ]]; then
  # The pipelined kNN's guided rows: the default (no probe, depth 12, cap 32) against the lean
  # probe of the earlier runs, other depths and a cap of 16, rows without a probe unpipelined,
  # and point correlation with one stream priority for all.
  {
    g="--generate uniform:400000:7 --queries uniform:4000000:7 --variants hybrid,hybrid-gpu-buckets --repeat 3"
    echo "== canopy-bench knn $g --pipeline on --probe lean --depth 8"
    timeout 200 $bin/canopy-bench knn $g --pipeline on --probe lean --depth 8 --json "$out/pipeline_knn_lean8.json" | tail -14
    echo "== canopy-bench knn $g --pipeline on --probe none --depths 10,11,13"
    timeout 280 $bin/canopy-bench knn $g --pipeline on --probe none --depths 10,11,13 \
      --json "$out/pipeline_knn_none_sweep.json" | tail -20
    echo "== canopy-bench knn $g --pipeline on --probe none --row-cap 16 --depths 12,13"
    timeout 200 $bin/canopy-bench knn $g --pipeline on --probe none --row-cap 16 --depths 12,13 \
      --json "$out/pipeline_knn_none_cap16.json" | tail -16
    echo "== canopy-bench knn $g --pipeline off --probe none --depth 12"
    timeout 200 $bin/canopy-bench knn $g --pipeline off --probe none --depth 12 --json "$out/pipeline_knn_none_off.json" | tail -14
    echo "== canopy-bench pc --generate uniform:400000:7 --queries uniform:4000000:7 --pipeline on --inspector-first off"
    timeout 200 $bin/canopy-bench pc --generate uniform:400000:7 --queries uniform:4000000:7 \
      --variants hybrid,hybrid-gpu-sandpile --pipeline on --inspector-first off --repeat 3 \
      --json "$out/pipeline_pc_equal.json" | tail -14
  } 2>&1 | tee "$out/pipeline_rows.txt"
fi

if [[ $what == depth-auto ]]; then
  # --depth auto next to every fixed depth 4..12, pc and knn on the three inputs.
  {
    for w in pc knn; do
      v=hybrid,hybrid-gpu-sandpile
      [[ $w == knn ]] && v=hybrid,hybrid-gpu-buckets
      for input in "${inputs[@]}"; do
        set -- $input
        name=$1; shift
        echo "== canopy-bench $w $* --shuffle 1 --depths 4-12,auto"
        timeout 200 $bin/canopy-bench $w "$@" --shuffle 1 --variants $v --depths 4-12,auto --repeat 5 \
          --json "$out/depth_auto_${w}_$name.json" | tail -27
      done
    done
  } 2>&1 | tee "$out/depth_auto.txt"
fi

if [[ $what == profile ]]; then
  for input in "--generate uniform:400000:7" "--points stage/data/covtype_points_254k.csv.gz --columns 0-6"; do
    name=$(echo "$input" | sed -E 's/.*(uniform|covtype).*/\1/')
    ncu --kernel-name regex:"lockstep_kernel|independent_kernel" --launch-count 6 \
      --section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats \
      --section MemoryWorkloadAnalysis --section LaunchStats \
      $bin/canopy-bench pc $input --shuffle 1 --variants mask-lockstep,hybrid,independent --repeat 1 \
      > "$out/ncu_$name.txt" 2>&1
    grep -E "^  [a-z_]+kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Issued Warp|No Eligible|L1/TEX Hit|L2 Hit|Stall" "$out/ncu_$name.txt" | head -80
  done
fi

if [[ $what == sanitize ]]; then
  # Excluded: RuntimeErrors.NotEnoughGpuMemoryNamesTheBuffer asks for more memory than the GPU
  # has, on purpose; memcheck reports the failed cudaMallocAsync that the test expects. The two
  # NoWorkRunsOnTheLegacyDefaultStream tests need a call to finish while a kernel spins on another
  # stream; the tools serialise kernels, so the call waits for the spin by construction.
  # ForestHardwareGpu.MeasuresPlausibleNumbers measures the GPU afresh (bandwidth loops that
  # take minutes under the tools); its kernels are checked below, judged by the tool alone.
  exclude='-RuntimeErrors.NotEnoughGpuMemoryNamesTheBuffer:*NoWorkRunsOnTheLegacyDefaultStream:ForestHardwareGpu.MeasuresPlausibleNumbers'
  # One tool at a time, its SHARDS gtest shards side by side (H100, 8 shards: memcheck 434 s,
  # initcheck 317 s, synccheck 55 s; racecheck far longer: the GPU tree builds take minutes
  # each under it).
  shards=${SHARDS:-8}
  # Tests that repeat kernels hundreds of times repeat them fewer times under a tool
  # (test::under_tool). The forest tests' hardware measurement (ForestHardware: bandwidth loops,
  # minutes under racecheck) is made once, uninstrumented, into the tests' cache file first;
  # its kernels are checked by their own test (MeasuresPlausibleNumbers, below, judged by the
  # tool's summary alone).
  export CANOPY_UNDER_TOOL=1
  $bin/canopy_tests --gtest_brief=1 --gtest_filter='ForestGpu.ASecondIdenticalCallAllocatesAndFreesNothing' > "$out/hw_cache.txt" 2>&1 || true
  # On a machine of several GPUs the shards take them in turn.
  # (SANITIZE_GPUS=n keeps them on the first n, leaving the others free for other work.)
  gpus=${SANITIZE_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
  ((gpus > 0)) || gpus=1
  for tool in ${TOOLS:-memcheck initcheck synccheck racecheck}; do
    extra=()
    [[ $tool == memcheck ]] && extra=(--leak-check full)
    # racecheck: CUB's and Thrust's kernels (NVIDIA's sorts and scans inside the GPU tree builds,
    # which take minutes each under the tool) run uninstrumented; every Canopy kernel is checked.
    # RACECHECK_EXCLUDE='' instruments them too.
    [[ $tool == racecheck && -n ${RACECHECK_EXCLUDE-kns=cub} ]] && extra=(--kernel-name-exclude "${RACECHECK_EXCLUDE-kns=cub}")
    if [[ -n ${SANITIZE_LIST:-} ]]; then
      # The tests named in that file (one Suite.Name a line), each a process of its own, SHARDS at
      # a time: what a sharded run left unfinished.
      i=0
      while read -r t; do
        [[ -n $t ]] || continue
        while (($(jobs -rp | wc -l) >= shards)); do sleep 1; done
        CUDA_VISIBLE_DEVICES=$((i % gpus)) timeout ${SANITIZE_TIMEOUT:-560} \
          compute-sanitizer --tool $tool "${extra[@]}" --error-exitcode 9 $bin/canopy_tests \
          --gtest_filter="$t" > "$out/$tool.$i.txt" 2>&1 &
        i=$((i + 1))
      done < "$SANITIZE_LIST"
      wait
      continue
    fi
    for ((i = 0; i < shards; ++i)); do
      CUDA_VISIBLE_DEVICES=$((i % gpus)) GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout ${SANITIZE_TIMEOUT:-560} \
        compute-sanitizer --tool $tool "${extra[@]}" --error-exitcode 9 $bin/canopy_tests \
        --gtest_filter="$exclude" > "$out/$tool.$i.txt" 2>&1 &
    done
    wait
  done
  for f in "$out"/*check.*.txt; do
    # compute-sanitizer's own summary line, gtest's verdict and the tests that finished (a
    # shard cut off by the timeout has no summary).
    echo "$(basename "$f"): $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY\|LEAK SUMMARY' "$f" | tr '\n' ' ')" \
      "$(grep -h '^\[  PASSED  \]\|FAILED TEST' "$f" | tr '\n' ' ') finished: $(grep -c '^\[       OK \]' "$f")"
  done | tee "$out/sanitize_summary.txt"
fi

if [[ $what == soak ]]; then
  soak=${CANOPY_SOAK:-$(dirname "$bin")/canopy_soak}
  [[ -x $soak ]] || soak=$bin/canopy_soak
  timeout 560 "$soak" --calls ${SOAK_CALLS:-10000} --threads 4 2>&1 | tee "$out/soak.txt"
fi
