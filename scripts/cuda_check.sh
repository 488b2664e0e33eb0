#!/usr/bin/env bash
# The CUDA checks, in one go, on a machine with a GPU:
#   1. the layer tests with every tensor they create on the GPU (`pytest --torch-device cuda`), where the
#      fused layers take their eager path and must still equal PyG and the hand-computed values;
#   2. `python -m lipgnn.bench --device cuda`: fused against stock PyG on the same GPU;
#   3. whole train.py runs (30-layer GAT-Lip, PubMed, E2E_EPOCHS epochs, default 20) on CUDA, alternating
#      model.impl=pyg, model.impl=fused, and fused with train.cuda_graphs=true (the step captured and replayed);
#   4.-6. the bench's device probes (`python -m lipgnn.bench --probe NAME`, lipgnn/bench/probes/):
#      determinism (whether a step, and the ops it is built of, is bit-reproducible there), launches (kernels per
#      layer, kernel time against wall time, copies and syncs) and cuda-graph (the training step captured in a CUDA
#      graph against the eager step: time, and parameter agreement beside an eager-against-eager control; CUDA
#      only, step name `graphs`).
# usage: scripts/cuda_check.sh [OUT_DIR] (default results/bench/cuda). Each step has a time limit
# (seconds: TESTS_S, BENCH_S, E2E_S, PROBE_S) so that a slow step cannot starve the others; a step that hits
# it says so in its log and the script goes on; STEPS (default "tests bench e2e determinism launches graphs")
# picks the steps. Exit status: the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/bench/cuda}
mkdir -p "$out"
py=${PYTHON:-python}
dev=${DEVICE:-cuda}  # DEVICE=cpu runs the same steps on the CPU (to try the script where no GPU is)
steps=" ${STEPS:-tests bench e2e determinism launches graphs} "
failed=0

"$py" - <<'EOF' 2>&1 | tee "$out/env.txt"
import platform, torch, torch_geometric
print("torch", torch.__version__, "cuda", torch.version.cuda, "| pyg", torch_geometric.__version__,
      "| python", platform.python_version())
print("device:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO CUDA DEVICE")
try:
    import numba
    print("numba", numba.__version__)
except ImportError:
    print("numba absent")
EOF

layer_tests=(test_fused test_fused_activation test_fused_gcn test_fused_ggnn test_fused_gin test_fused_pair_norm
             test_kernels test_lip_gat_conv test_lip_transformer_conv test_l2_attention test_l2_fused test_lipschitz
             test_lipschitz_bounds test_san test_san_fused test_nonlocal_fused test_sparse_input
             test_block_layer_norm test_locality test_identity test_models test_cuda_graph test_flat_adam)
files=()
for t in "${layer_tests[@]}"; do files+=("tests/$t.py"); done
workers=()
if "$py" -c "import xdist" 2>/dev/null; then workers=(-n "${TEST_WORKERS:-4}"); fi
if [[ $steps == *" tests "* ]]; then
echo "== layer tests on CUDA"
timeout -k 10 "${TESTS_S:-180}" "$py" -m pytest -q -rfE --tb=short -p no:cacheprovider "${workers[@]}" \
    --torch-device "$dev" --junitxml "$out/junit.xml" "${files[@]}" > "$out/layer_tests.log" 2>&1
rc=$?; tail -n 40 "$out/layer_tests.log"; echo "layer tests: exit $rc"; [ $rc -eq 0 ] || failed=$((failed + 1))
fi

if [[ $steps == *" bench "* ]]; then
echo "== bench on CUDA"
timeout -k 10 "${BENCH_S:-150}" "$py" -m lipgnn.bench --device "$dev" --repeats "${BENCH_REPEATS:-10}" \
    --e2e-pairs 0 --no-floor --out "$out/bench" > "$out/bench.log" 2>&1
rc=$?; tail -n 30 "$out/bench.log"; echo "bench: exit $rc"; [ $rc -eq 0 ] || failed=$((failed + 1))
fi

if [[ $steps == *" e2e "* ]]; then
echo "== train.py end to end on CUDA (30-layer GAT-Lip, PubMed, ${E2E_EPOCHS:-20} epochs)"
{
  for variant in pyg graphs fused graphs pyg fused; do
    case $variant in
      graphs) args=(model.impl=fused train.cuda_graphs=true) ;;
      *) args=("model.impl=$variant") ;;
    esac
    tmp=$(mktemp -d)
    start=$EPOCHREALTIME
    timeout -k 5 "${E2E_S:-60}" "$py" train.py model=gat norm=lip depth=30 dataset=pubmed \
        "train.epochs=${E2E_EPOCHS:-20}" "device=$dev" log.progress=false "${args[@]}" "results_dir=$tmp" \
        > "$tmp/log" 2>&1
    rc=$?
    printf '%s exit %s wall %.2f s | %s\n' "${args[*]}" "$rc" "$(awk "BEGIN{print $EPOCHREALTIME - $start}")" \
        "$(grep -m1 -E 'completed|error|Error' "$tmp/log")"
    [ $rc -eq 0 ] || tail -n 20 "$tmp/log"
    rm -rf "$tmp"
  done
} 2>&1 | tee "$out/e2e.log"
grep -q " exit [^0]" "$out/e2e.log" && failed=$((failed + 1))
fi
run_probe() {  # run_probe STEP PROBE: one bench probe on $dev, its output in $out/STEP.txt
  local step=$1 probe=$2 rc
  [[ $steps == *" $step "* ]] || return 0
  echo "== $step"
  timeout -k 10 "${PROBE_S:-120}" "$py" -m lipgnn.bench --probe "$probe" --device "$dev" > "$out/$step.txt" 2>&1
  rc=$?; grep -v -e '^Processing' -e '^Done!' "$out/$step.txt" | tail -n 40; echo "$step: exit $rc"
  [ $rc -eq 0 ] || failed=$((failed + 1))
}
run_probe determinism determinism
run_probe launches launches
if [ "$dev" = cuda ]; then run_probe graphs cuda-graph; fi
echo "failed steps: $failed"
exit "$failed"
