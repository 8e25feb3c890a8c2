#!/usr/bin/env bash
# Issue 46's device run, prepared on the CPU: one script, run once on a lent GPU machine from the repository's
# root, each step under its own time limit so that one slow step cannot eat the rest; everything it finds goes to
# $OUT (default ./gpu-session). The steps, most needed first:
#   1. the card: nvidia-smi's name, driver, clocks (current and top), power limit, and torch's build;
#   2. `pytest -m gpu -v` (the tests that need a CUDA device), names printed, JUnit XML kept;
#   3. a throttle readout: one lab trial of lm@large bf16 with nvidia-ml-py, its `system.gpu` facts (the flag
#      fires only where the SM clock falls 10% below the card's top, `records.shapes.CLOCK_DROP`);
#   4. `perfgate calibrate lm@large --configs bf16` with every other default: A/A pairs and a planted 7.5%
#      slowdown decided as a paired check decides, with pairs, noise and time per config;
#   5. a starved loader on the card (item 4): the diagnosis tests' vision workload stored as a baseline in bf16, then
#      checked with num_workers 2 -> 0 (tests/workloads/builtin_plants.py, plant `workers0`), `--diagnose`: the
#      device's idle wait and the host's wait for its batch side by side;
#   6. what is left of the time: the whole suite serially with names (`-p no:randomly -v --junitxml`).
# Nothing about the card is changed (no clocks or power limits are set).
#
#     bash benchmarks/gpu_session.sh            # about 9 minutes at most
#     STEP_S=120 bash benchmarks/gpu_session.sh # a shorter limit a step (TOTAL_S: the whole, 540 s)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-session}"
mkdir -p "$out"
step_s="${STEP_S:-150}"
started=$(date +%s)
left() { echo $((${TOTAL_S:-540} - ($(date +%s) - started))); }
say() { echo "== $* ($(($(date +%s) - started)) s)" | tee -a "$out/steps.log"; }

say "1. the card"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
} > "$out/card.txt" 2>&1
cat "$out/card.txt"

say "installing perfgate with its dev and gpu extras (torch as installed)"
python -m pip install --quiet -e ".[dev,gpu]" > "$out/install.log" 2>&1 || tail -5 "$out/install.log"

say "2. pytest -m gpu"
timeout "$step_s" python -m pytest -m gpu -p no:randomly -v --junitxml="$out/gpu-tests.xml" > "$out/gpu-tests.log" 2>&1
echo "exit $?" >> "$out/gpu-tests.log"
tail -15 "$out/gpu-tests.log"

say "3. one lab trial of lm@large bf16: its GPU facts"
timeout "$step_s" perfgate run lm@large --configs bf16 --trials 1 --json "$out/lab.json" > "$out/lab.log" 2>&1
echo "exit $?" >> "$out/lab.log"
python - "$out/lab.json" <<'EOF' | tee "$out/gpu-facts.txt"
import json, sys
try:
    run = json.load(open(sys.argv[1]))
except OSError as error:
    sys.exit(f"no lab results: {error}")
for workload in run["workloads"]:
    for config, entry in workload["configs"].items():
        for trial in entry["trials"]:
            gpu = (trial.get("system") or {}).get("gpu")
            print(workload["name"], config, trial.get("samples_per_sec"), json.dumps(gpu))
EOF

say "4. perfgate calibrate lm@large --configs bf16 --slowdown 7.5% (A/A, then planted)"
budget=$(left)
if [ "$budget" -gt 120 ]; then
  timeout $((budget - 60)) perfgate calibrate lm@large --configs bf16 --pairs 5 --slowdown 7.5% \
    --json "$out/calibrate.json" > "$out/calibrate.log" 2>&1
  echo "exit $?" >> "$out/calibrate.log"
  tail -25 "$out/calibrate.log"
else
  echo "skipped: $budget s left" | tee "$out/calibrate.log"
fi

say "5. a starved loader: vision bf16, num_workers 2 -> 0, --diagnose"
budget=$(left)
if [ "$budget" -gt 150 ]; then
  plants="$(pwd)/tests/workloads/builtin_plants.py:vision"
  mkdir -p "$out/loader"
  (
    cd "$out/loader" &&
      timeout 60 perfgate update "$plants" --configs bf16 --trials 3 --quiet &&
      PERFGATE_TEST_PLANT=workers0 timeout 60 perfgate check "$plants" --configs bf16 --trials 3 --diagnose
  ) > "$out/loader.log" 2>&1
  echo "exit $?" >> "$out/loader.log"
  grep -A12 "^diagnosis:" "$out/loader.log" | head -20
else
  echo "skipped: $budget s left" | tee "$out/loader.log"
fi

say "6. the suite, serially, names printed, in what time is left"
budget=$(left)
if [ "$budget" -gt 60 ]; then
  timeout "$budget" python -m pytest -p no:randomly -v -x --junitxml="$out/suite.xml" > "$out/suite.log" 2>&1
  echo "exit $?" >> "$out/suite.log"
  grep -E "PASSED|FAILED|ERROR|SKIPPED" "$out/suite.log" | tail -5
  grep -cE " PASSED" "$out/suite.log"
else
  echo "skipped: $budget s left" | tee "$out/suite.log"
fi
say "done"
