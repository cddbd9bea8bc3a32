#!/usr/bin/env bash
# The MPI layer on a machine of two or more GPUs (issue 21), over what `scripts/gpu-stage.sh dist`
# staged; one rank per GPU. Logs and JSON go to one archive, $OUT/results-dist.tgz.
#   1. Open MPI: the machine's own if it has Open MPI 4, else the staged Debian files, unpacked
#      into / without replacing any file the machine has; a small run checks the transport.
#   2. Replicate mode against one process on one GPU (rank 0 times the single-process call in
#      the same run): pc and knn on uniform:20000000:3, forest predict on 10^7 rows, each with
#      the results gathered on every rank, on rank 0, or left on the rank that computed them.
#   3. Partition mode: pc and knn over 20M points with a per-rank memory budget below the whole
#      tree, and forest predict on 10^7 rows with the trees split under a budget below the whole
#      forest, checked against one process.
#   4. The GPU tests, split over the GPUs, and the MPI tests under mpirun.
#   (The replicate runs call into buffers made once; the -dev steps keep queries, rows and results
#   in each rank's device memory.)
# NP (default: the GPU count), STEPS (default: every step), BUDGET_S (the tests run only if the
# steps before them left time).
set -uo pipefail
cd "$(dirname "$0")/.."
final=${OUT:-out}
mkdir -p "$final"
out=$(mktemp -d)
trap 'wait; tar -czf "$final/results-dist.tgz" --exclude=./fuzz/fuzz_forest_diff --exclude=./fuzz/seeds -C "$out" . ; echo "results in $final/results-dist.tgz"' EXIT
trap "exit 143" TERM INT
export LD_LIBRARY_PATH=$PWD/stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bin=stage/bin
[ -f stage/bins.tgz ] && tar -xzf stage/bins.tgz -C stage
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }

{
  nvidia-smi -L
  nvidia-smi topo -m
  nproc
} 2>&1 | tee "$out/machine.txt"
gpus=$(nvidia-smi -L | grep -c '^GPU')
np=${NP:-$gpus}

if ! { orterun --version || mpirun --version; } 2>/dev/null | grep -Eq '(Open MPI|OpenRTE)\) 4\.'; then
  echo "Open MPI 4 not found here ($(command -v mpirun || echo no mpirun)): unpacking the staged one"
  tar --skip-old-files -xzf stage/mpiroot.tgz -C / && ldconfig
fi
launcher=$(command -v orterun || command -v mpirun)
$launcher --version 2>&1 | head -1 | tee -a "$out/machine.txt"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One host: shared memory between the ranks (no UCX or network transports to probe).
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_base_warn_component_unused=0
export NCCL_NVLS_ENABLE=0
# No binding: each rank's TBB and the one-process baseline on rank 0 may use every core.
mpirun=("$launcher" --bind-to none -np "$np")

dist() {  # dist NAME TIMEOUT ARGS...: canopy-bench dist under mpirun, its table and JSON kept
  local name=$1 limit=$2
  shift 2
  echo "== [$(elapsed) s] mpirun -np $np canopy-bench dist $*"
  timeout "$limit" "${mpirun[@]}" $bin/canopy-bench dist "$@" --json "$out/$name.json"
  echo "exit $?"
}

# FUZZ_S > 0: while the steps run, the cores they leave fuzz forest_diff (issue 18) in fork mode,
# FUZZ_JOBS processes, from stage/fuzz.tgz (the ASan + UBSan target built here and its corpus):
# its log comes back with the results.
if [[ ${FUZZ_S:-0} -gt 0 && -f stage/fuzz.tgz ]]; then
  mkdir -p "$out/fuzz" && tar -xzf stage/fuzz.tgz -C "$out/fuzz"
  (cd "$out/fuzz" && mkdir -p corpus artifacts && ASAN_OPTIONS=protect_shadow_gap=0 UBSAN_OPTIONS=print_stacktrace=1 \
     TMPDIR=/dev/shm nice -n 10 ./fuzz_forest_diff -fork="${FUZZ_JOBS:-16}" -max_total_time="$FUZZ_S" -entropic=0 \
     -max_len=512 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=artifacts/ corpus seeds \
     > fuzz_forest_diff.log 2>&1; rm -rf corpus) &
fi

mpi_tests() {  # canopy_mpi_tests on np ranks and on 3 (the partitioned device tests build GPU trees)
  timeout 150 "${mpirun[@]}" $bin/canopy_mpi_tests --gtest_brief=1 > "$out/mpi_tests.txt" 2>&1
  echo "canopy_mpi_tests exit $?: $(tail -1 "$out/mpi_tests.txt")"
  timeout 150 "$launcher" --bind-to none --oversubscribe -np 3 $bin/canopy_mpi_tests --gtest_brief=1 \
    > "$out/mpi_tests_np3.txt" 2>&1
  echo "canopy_mpi_tests -np 3 exit $?: $(tail -1 "$out/mpi_tests_np3.txt")"
}

steps=${STEPS:-smoke pc pc-dev knn knn-dev forest forest-dev part-pc part-knn part-pc-dev part-knn-dev part-forest tests}
for step in $steps; do
  case $step in
    smoke)
      # Messages past the eager limit take the single-copy path (CMA), which some kernels forbid.
      if ! dist smoke 60 --workload pc --generate uniform:200000:3 --repeat 1 --warmup 0 --baseline 0 \
             --gather all > "$out/smoke.txt" 2>&1 || ! grep -q "identical to" "$out/smoke.txt"; then
        cat "$out/smoke.txt"
        echo "the smoke run failed: again without the single-copy mechanism"
        export OMPI_MCA_btl_vader_single_copy_mechanism=none
        dist smoke 60 --workload pc --generate uniform:200000:3 --repeat 1 --warmup 0 --baseline 0 --gather all \
          > "$out/smoke.txt" 2>&1
      fi
      cat "$out/smoke.txt"
      ;;
    pc)
      dist pc_replicate 120 --workload pc --generate uniform:20000000:3 --gather all,root,local --repeat 5 ;;
    pc-dev)
      # (root and all: the results gathered GPU to GPU)
      dist pc_replicate_dev 120 --workload pc --generate uniform:20000000:3 --on-device 1 --gather local,root,all \
        --repeat 5 ;;
    pc-dev-input)
      # The same calls with each rank a contiguous run of the input (random) order, the shards
      # before spatial sharding became auto's choice for device queries.
      dist pc_replicate_dev_input 120 --workload pc --generate uniform:20000000:3 --on-device 1 --gather local \
        --repeat 5 --shard input ;;
    knn-dev-input)
      dist knn_replicate_dev_input 120 --workload knn --k 8 --generate uniform:20000000:3 --on-device 1 \
        --gather local --repeat 5 --shard input ;;
    pc-host-shards)
      # Host queries and results: input shards (auto's choice there) against spatial ones.
      for sh in input spatial; do
        dist "pc_replicate_host_$sh" 150 --workload pc --generate uniform:20000000:3 --gather local,root --repeat 5 \
          --shard $sh
      done ;;
    pc-variants)
      # The on-device pc under each schedule x executor (VARIANTS), the baseline under the same.
      for v in ${VARIANTS:-auto fsm-lockstep-sorted sorted-independent hybrid-key independent}; do
        dist "pc_dev_$v" 60 --workload pc --generate uniform:20000000:3 --on-device 1 --gather local --repeat 5 \
          --variant "$v"
      done ;;
    pc-presort)
      # The same with the queries in a spatial order (a program that keeps its particles sorted):
      # each rank's half is then a region of space at the whole set's density.
      dist pc_dev_presort 90 --workload pc --generate uniform:20000000:3 --presort 1 --on-device 1 --gather local \
        --repeat 5 ;;
    knn)
      dist knn_replicate 150 --workload knn --k 8 --generate uniform:20000000:3 --gather all,root,local --repeat 5 ;;
    knn-dev)
      dist knn_replicate_dev 120 --workload knn --k 8 --generate uniform:20000000:3 --on-device 1 \
        --gather local,root,all --repeat 5 ;;
    forest)
      dist forest_replicate 150 --workload forest --model stage/forest/covtype_xgb_bin_d8.json.gz \
        --data stage/forest/covtype_bin.csv.gz --label Cover_Type_2 --rows 10000000 --gather all,root,local \
        --repeat 5 ;;
    forest-dev)
      dist forest_replicate_dev 120 --workload forest --model stage/forest/covtype_xgb_bin_d8.json.gz \
        --data stage/forest/covtype_bin.csv.gz --label Cover_Type_2 --rows 10000000 --on-device 1 --gather local \
        --repeat 5 ;;
    part-pc)
      # The whole tree of 20M 3-d points takes about 0.8 GB; each rank's budget is 0.6 of it.
      dist pc_partition 150 --workload pc --distribute partition --generate uniform:20000000:3 \
        --memory-budget-mb 480 --gather root,local --repeat 2 --warmup 1 ;;
    part-forest)
      # The trees split between the ranks, each with a budget (2.5 MiB) below the whole forest's
      # adaptive layout (3.4 MB): each rank's leaves come from the leaf kernel, and the running
      # sums pass from rank to rank on the host.
      dist forest_partition 200 --workload forest --distribute partition \
        --model stage/forest/covtype_xgb_bin_d8.json.gz --data stage/forest/covtype_bin.csv.gz --label Cover_Type_2 \
        --rows 10000000 --memory-budget-mb 2.5 --gather root,local --repeat 2 --warmup 1 ;;
    part-knn)
      dist knn_partition 200 --workload knn --k 8 --distribute partition --generate uniform:20000000:3 \
        --memory-budget-mb 480 --gather root --repeat 1 --warmup 1 ;;
    mpi-tests)
      mpi_tests ;;
    memcheck-dev)
      # compute-sanitizer over the device path's MPI tests, one sanitizer per rank
      timeout 300 "${mpirun[@]}" /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 3 \
        $bin/canopy_mpi_tests --gtest_brief=1 --gtest_filter='PartitionedDevice.*:DeviceGather.*' \
        > "$out/memcheck_dev.txt" 2>&1
      echo "memcheck of the device MPI tests exit $?: $(grep -h 'ERROR SUMMARY' "$out/memcheck_dev.txt" | tr '\n' ' ')" ;;
    part-pc-dev|part-knn-dev)
      # Partitioned with the queries and results on the GPUs (issue 39): routed, moved and gathered
      # GPU to GPU (TRANSPORT: auto, ipc or host, CANOPY_DIST_TRANSPORT), against one process on
      # one GPU with the whole tree and the same device queries.
      w=${step#part-}; w=${w%-dev}
      CANOPY_DIST_TRANSPORT=${TRANSPORT:-auto} dist "${w}_partition_dev_${TRANSPORT:-auto}_k${K:-8}" 200 --workload "$w" --k ${K:-8} \
        --distribute partition --generate uniform:20000000:3 --memory-budget-mb 480 --on-device 1 --gather local,root \
        --repeat 5 --warmup 2 ;;
    tests)
      left=$((${BUDGET_S:-480} - $(elapsed)))
      ((left > 60)) || { echo "no time left for the tests"; continue; }
      echo "== [$(elapsed) s] canopy_tests over $gpus GPUs in shards, $left s"
      for ((i = 0; i < gpus; ++i)); do
        CUDA_VISIBLE_DEVICES=$i GTEST_TOTAL_SHARDS=$gpus GTEST_SHARD_INDEX=$i timeout $((left - 30)) \
          $bin/canopy_tests --gtest_brief=1 > "$out/tests_$i.txt" 2>&1 &
      done
      mpi_tests
      wait
      for ((i = 0; i < gpus; ++i)); do echo "shard $i: $(grep -E '^\[  (PASSED|FAILED)|tests? ran|SKIPPED \]' "$out/tests_$i.txt" | tr '\n' ' ')"; done
      grep -h "FAILED \]" "$out"/tests_*.txt | head -20
      ;;
  esac
done 2>&1 | tee "$out/dist.txt" "$final/dist-live.txt"
