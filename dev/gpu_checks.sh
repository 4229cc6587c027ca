#!/usr/bin/env bash
# Every GPU check the project owes, in parts that each fit one call on a borrowed GPU (at most 10
# minutes a call, 15 minutes of device time a session, a few of them spent starting the machine).
# Whenever a GPU is at hand, `first` runs before anything else:
#
#   INR_COMMIT=$(git rev-parse --short HEAD) bash dev/gpu_checks.sh first
#
#   first    (at most 8 min) the GPU tests: every kernel against NumPy (TF32 and the fused network
#            among them, and against the FP32 path), the commands' GPU paths (fit-many --until-psnr,
#            meta-init, view's tiles, to_torch().cuda(), tune), the PyTorch peer; then the goals'
#            figures (benchmarks/gpu_goals.py): the fused sigmoid 2x64 and the fused pack of 2048
#            SIREN 3x64 against PyTorch (the fused network in both designs: the two kernels a step,
#            the engine's, and one kernel a step), our matmul against cuBLAS, the TF32 step against
#            PyTorch TF32 eager and torch.compile
#   second   (at most 8.5 min) TF32's fits against FP32's spread; seconds to 30 and 40 dB on the
#            512-px photo with the siren preset, beside PyTorch; the seed's drawing for 60 s; the
#            sample with the siren preset's 1000 steps, as the quick start runs it
#   fitmany  (at most 8 min) fit-many: 10,000 images of 64x64, the time to a mean of 30 dB, then
#            PyTorch batched on the same, as far as the part's time allows
#   steps    (at most 8 min) the step-time table of every setting (ours fused, layer by layer, TF32,
#            cuBLAS; PyTorch eager and compiled), the 8192-px render, the matmul variants
#   kernels  (at most 8 min) every kernel of each baseline setting timed launch by launch beside the
#            cost model's floor and prediction (benchmarks/kernel_costs.py), furthest first, the fused
#            network's in both designs (two kernels, one), the hash grid's in each variant of its
#            kernels (rows, levels, rows-scalar, any); the hash grid's step in each variant (those
#            four fused, the fused network in one kernel, fused TF32, layer by layer) beside the
#            PyTorch hash grid; and the model's own table for the record. INR_DRY_SETTINGS=TEXT keeps,
#            in a dry run, the settings whose name holds TEXT (the test runs one)
#   fused    (at most 7 min) the fused network in one kernel a step against the two kernels, the
#            engine's: its GPU tests (both designs against NumPy, TF32's coordinates); whole steps of
#            the fused sigmoid 2x64, the pack of 2048 SIREN 3x64 (FP32, TF32) and the hash grid
#            (2^18 samples, 16 levels, ReLU 2x64) in both designs, layer by layer and in PyTorch
#            (eager, batched, the PyTorch hash grid); then the fused settings' kernels one by one
#            beside the cost model's floor and prediction
#   hashgrid (at most 8 min) the hash grid at Kodak's size: a 768x512 photo to 40 and 44 dB with the
#            hashgrid preset, beside the PyTorch hash grid and the siren preset. The photo is not in
#            the repository: before the call, on a machine with Debian's packages,
#              apt-get download lomiri-wallpapers-16.04 && dpkg-deb -x lomiri-wallpapers-16.04_*.deb /tmp/lw
#              mkdir -p bench-results && cp /tmp/lw/usr/share/backgrounds/sunset_by_Aitzol_Berasategi.jpg bench-results/
#            and carry bench-results/sunset_by_Aitzol_Berasategi.jpg (4272x2848, drawn at 768x512);
#            without it the part says so and races on the coffee photo enlarged to 768 px instead
#   gigapixel (at most 8 min) a gigapixel end to end: a mosaic of 35 distinct real photos,
#            45920 x 21840, built on the machine from the photos carried there (about 1.5 min; the
#            photos enlarged with Lanczos where they run short, benchmarks/gigapixel_mosaic.py), then
#            benchmarks/gigapixel_run.py: inr train (the hashgrid preset sized to the image: tables of
#            2^24 entries a level, 200M parameters; until 35 dB, stopped after 220 s of wall time), a
#            2048-px region rendered, inr view's tiles, the PSNR of the run's subset of pixels against
#            every pixel's, the run resumed for 200 steps more (its 2^24 tables read back), each
#            command's peak host memory. The photos are not in the repository: before the call, on a
#            machine with Debian's packages,
#              apt-get download lomiri-wallpapers lomiri-wallpapers-16.04 lomiri-wallpapers-20.04 \
#                ukui-wallpapers mate-backgrounds gnome-backgrounds
#              for f in *.deb; do dpkg-deb -x "$f" /tmp/debs; done
#              python benchmarks/gigapixel_mosaic.py /tmp/debs/usr/share/backgrounds --copy-photos bench-results/photos
#            and carry bench-results/photos (38 JPEGs, 53 MB); without them the part says so and stops
#   walltime (at most 8 min) where the wall time of `inr train PHOTO --until-psnr 44` goes on a 9-megapixel
#            photo (training, reading, pictures, checkpoints; goal: wall time at most 2x the training
#            plus 5 s), twice (the first compiles the kernels). The photo, as for hashgrid, from
#            lomiri-wallpapers-16.04: a 4000x2250 crop of seeding_by_Clements_Engelhardt.jpg (the
#            command is in benchmarks/wall_time.py), carried as bench-results/photo-9mpx.jpg
#   kodak    (at most 8 min) Kodak-24 with the network no larger than each photo's 8-bit bytes: the
#            hashgrid preset sized to the image, its parameters in float16 (the preset's) and float32, 2000
#            steps each (the goal: a mean of 43.9 dB in at most 5 s a photo). The photos are not in
#            the repository: before the call, `mkdir -p bench-results && cp -r ../shared/kodak
#            bench-results/`, and carry bench-results/kodak (15 MB)
#   kodakpeers (at most 8 min) Kodak at GaussianImage's budgets (300k and 560k float32 parameters'
#            bytes) on the first 3 photos: the hashgrid preset (float16), the siren preset at the
#            same bytes and the PyTorch hash grid, with the 2x renders against Lanczos; carry
#            bench-results/kodak as for kodak
#   functa   (at most 8 min) sets of latents at the network sizes a CPU cannot reach: a base SIREN
#            6x128 with 768 latents (one for each of its shifts; on the CPU depth drew the photo tiles
#            best: 6x128 at 3e-4 1.9 dB above 3x128 in 10 steps, 3x256 with as many latents 1 dB below it)
#            meta-learned for 2000 outer steps at an outer rate of 3e-4 (0.001 made a 6x128 base on the
#            letters worse from the first outer step) on each data set of the weights suite, each as
#            large as it comes (--limit 400: every font's letters, every tile, every digit, 400 shapes
#            a class; on the CPU the letters of 91 fonts drew the held-out ones 3 dB better than those
#            of 40), its latents fitted in 3 and 10 steps, the probes on them, and fitting latents
#            against whole 2x32 networks (the sets preset's) to the same PSNR. The suite's images are
#            made on a machine with the fonts and carried:
#              PYTHONPATH=. python benchmarks/weights_suite.py --data bench-results/suite --limit 400 \
#                  --datasets letters photos digits shapes --starts shared --steps 1   # makes the images
#            and carry bench-results/suite (without scikit-learn there the linear probes read NaN; the
#            MLP probes run on PyTorch)
#
# Each figure is appended to its result file under $OUT (or bench-results/gpu-checks) the moment it
# is measured, and each command has its own time limit, so a call cut short still brings back what it
# did; log.txt has everything said. Every part ends with a BENCHMARKS.md section, ready to paste,
# printed and in benchmarks-block.md. The device tool copies the tree without its git history: name
# the commit in INR_COMMIT, so the files say which code they measured. A call brings back 8 files at
# most: first alone, second and fitmany together (where the call's time allows), steps alone, kernels
# alone, fused alone, hashgrid alone, gigapixel alone, walltime alone, kodak alone, kodakpeers alone, functa alone.
#
#   bash dev/gpu_checks.sh --dry-run first second fitmany steps walltime
#
# runs the same steps on the CPU at toy sizes (our kernels under the CPU emulation, PyTorch on the
# CPU, the GPU tests skipped): the script, its result files and its report, proven without a GPU.
# PYTHON names the interpreter (default python3, the GPU machine's, with CuPy, PyTorch and pytest).
set -uo pipefail
usage="usage: bash dev/gpu_checks.sh [--dry-run] PART... (PART: first second fitmany steps kernels fused hashgrid gigapixel walltime kodak kodakpeers functa)"
dry=0
parts=()
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry=1 ;;
    first | second | fitmany | steps | kernels | fused | hashgrid | gigapixel | walltime | kodak | kodakpeers | functa) parts+=("$arg") ;;
    *) echo "unknown part '$arg'; $usage" >&2; exit 2 ;;
  esac
done
[ ${#parts[@]} -gt 0 ] || { echo "$usage" >&2; exit 2; }
py="${PYTHON:-python3}"
out="${OUT:-bench-results/gpu-checks}"
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1
log="$out/log.txt"
if [ "$dry" = 1 ]; then
  echo "DRY RUN on the CPU: toy sizes, the figures mean nothing" | tee -a "$log"
  device=cpu
else
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$log"
  device=gpu
fi
echo "commit ${INR_COMMIT:-unknown}" | tee -a "$log"
goals=(--out "$out")
[ "$dry" = 1 ] && goals+=(--dry-run)
# Spread the GPU tests over worker processes where pytest-xdist is installed (the GPU machine has it).
workers=()
"$py" -c "import xdist" 2>/dev/null && workers=(-n 4)

# run SECONDS COMMAND...: the command, cut at SECONDS; its output to the log and stdout. Each command
# runs even where one before it failed or was cut; the script's exit status says whether any did.
failed=0
run() {
  local limit=$1 start=$SECONDS status
  shift
  echo "--- $* (limit ${limit} s)" | tee -a "$log"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$log"
  status=${PIPESTATUS[0]}
  [ "$status" = 124 ] && echo "=== CUT at ${limit} s: $*" | tee -a "$log"
  [ "$status" != 0 ] && { echo "=== FAILED (exit $status): $*" | tee -a "$log"; failed=1; }
  echo "--- $(( SECONDS - start )) s" | tee -a "$log"
}

for part in "${parts[@]}"; do
  echo "=== $part $(date -u +%FT%TZ)" | tee -a "$log"
  part_start=$SECONDS
  case "$part" in
    first)
      # -v: each test's verdict is in the log as it comes, even where the part's time cuts the run
      run 270 "$py" -m pytest tests/test_gpu.py tests/test_torch_reference.py -v --tb=short -rfEs --durations=15 \
        -p no:cacheprovider "${workers[@]}"
      run 200 "$py" benchmarks/gpu_goals.py fused-sigmoid fused-pack matmul tf32-step "${goals[@]}"
      ;;
    second)
      run 100 "$py" benchmarks/gpu_goals.py tf32-fit "${goals[@]}"
      if [ "$dry" = 1 ]; then sizes=(--sizes 16 --budget 20) length='"steps": 3'; else sizes=(--sizes 512 --budget 2000) length='"seconds": 60'; fi
      run 200 "$py" benchmarks/time_to_quality.py --device "$device" "${sizes[@]}" --images coffee --recipes default \
        --torch --targets 30 40 --scale 0 --workers 1 --out "$out/quality-512.json"
      run 150 "$py" benchmarks/sigmoid_drawing.py --device "$device" --out "$out" \
        "[{\"name\": \"gpu-60s\", $length}]"
      # the sample with the siren preset's whole budget, as a user runs it (BENCHMARKS.md quotes it)
      run 45 "$py" benchmarks/quick_start.py --device "$device" --steps "$([ "$dry" = 1 ] && echo 3 || echo 1000)" \
        --preset siren --out "$out/quick-start-$device-1000.json"
      ;;
    fitmany)
      if [ "$dry" = 1 ]; then many=(--size 8 --pack 4 --images 8 --steps 5); else many=(--size 64 --pack 2048 --images 10000 --steps 500); fi
      run 200 "$py" benchmarks/fit_many_speed.py --device "$device" "${many[@]}" --lr 1e-3 --rounds 1 \
        --contestants ours --out "$out/fit-many-ours-64.json"
      run 240 "$py" benchmarks/fit_many_speed.py --device "$device" "${many[@]}" --lr 1e-3 --rounds 1 \
        --contestants torch --out "$out/fit-many-torch-64.json"
      ;;
    steps)
      if [ "$dry" = 1 ]; then
        run 200 "$py" benchmarks/gpu_goals.py fused-sigmoid "${goals[@]}"  # bench_step and the render need CuPy
      else
        # torch.compile compiles for about a minute a setting: its TF32 figure is the first part's
        run 330 "$py" benchmarks/bench_step.py --no-numpy --settings sigmoid-200 siren-512 siren-1024 sigmoid-preset-200 \
          sigmoid-preset-512 siren64-200 siren64-512 --peers eager eager-tf32 --out "$out/step.json"
        run 60 "$py" benchmarks/render_large.py --out "$out/render.json"
        run 60 "$py" dev/matmul/harness.py --out "$out/matmul-variants.json"
      fi
      ;;
    kernels)
      run 300 "$py" benchmarks/gpu_goals.py kernels "${goals[@]}"
      run 120 "$py" benchmarks/gpu_goals.py hashgrid-step "${goals[@]}"
      [ "$dry" = 1 ] || run 60 "$py" benchmarks/kernel_costs.py --out "$out/kernel-costs.json"  # the CPU's: not dry
      ;;
    fused)
      # correctness on the hardware first: a design that fails here is timed all the same, and says so
      run 150 "$py" -m pytest tests/test_gpu.py -k "fused_network or coordinates" -v --tb=short -rfEs \
        -p no:cacheprovider "${workers[@]}"
      run 180 "$py" benchmarks/gpu_goals.py fused-sigmoid fused-pack hashgrid-step "${goals[@]}"
      INR_KERNEL_SETTINGS="fused|pack|rows kernels" run 90 "$py" benchmarks/gpu_goals.py kernels "${goals[@]}"
      ;;
    hashgrid)
      photo=bench-results/sunset_by_Aitzol_Berasategi.jpg
      if [ ! -f "$photo" ]; then
        echo "no $photo (see the top of this script): the coffee photo, enlarged to 768 px, instead" | tee -a "$log"
        photo=coffee
      fi
      if [ "$dry" = 1 ]; then race=(--sizes 32 --budget 20 --targets 20 25); else race=(--sizes 768 --budget 3000 --targets 40 44); fi
      run 420 "$py" benchmarks/time_to_quality.py --device "$device" --images "$photo" "${race[@]}" \
        --recipes hashgrid default --torch hashgrid --scale 0 --workers 1 --out "$out/hashgrid-768.json"
      ;;
    gigapixel)
      big="${TMPDIR:-/tmp}/inr-gigapixel"  # the mosaic (3 GB) and the run: not brought back
      rm -rf "$big" && mkdir -p "$big"
      if [ "$dry" = 1 ]; then
        mosaic=(--photos inr_cli/data/sample.png --min-pixels 0 --pixels 2e5)
        trained=(--steps 6 --interrupt-at 3 --stop-after 220 --extend 2 --train-flags "--preset hashgrid --log-every 1 --until-psnr 35")
      else
        mosaic=(bench-results/photos --pixels 1e9)
        trained=(--steps 20000 --interrupt-at 0 --stop-after 220 --extend 200 --train-flags \
          "--preset hashgrid --until-psnr 35 --log-every 100 --checkpoint-every 10000 \
           --set training.checkpoint_seconds=120 --preview-every 5000")
      fi
      if [ "$dry" = 0 ] && [ ! -d bench-results/photos ]; then
        echo "no bench-results/photos (see the top of this script): no gigapixel to train" | tee -a "$log"
        failed=1
      else
        run 120 "$py" benchmarks/gigapixel_mosaic.py "${mosaic[@]}" -o "$big/mosaic.tif"
        run 350 "$py" benchmarks/gigapixel_run.py "$big/mosaic.tif" --device "$device" "${trained[@]}" \
          --run-dir "$big/run" --full-psnr --out "$out/gigapixel.json"
      fi
      ;;
    walltime)
      photo=bench-results/photo-9mpx.jpg
      if [ "$dry" = 1 ]; then
        photo=tests/fixtures/coffee.png
        wall=(--steps 4 --device cpu --repeats 1 --size 48)
      else
        wall=(--until-psnr 44 --steps 2000 --device gpu --repeats 2)
        [ -f "$photo" ] || { echo "no $photo (see the top of this script): the part cannot run" | tee -a "$log"; failed=1; continue; }
      fi
      run 420 "$py" benchmarks/wall_time.py "$photo" "${wall[@]}" --out "$out/wall-time-9mpx.json"
      ;;
    kodak | kodakpeers)
      kodak=bench-results/kodak
      [ -d "$kodak" ] || kodak=../shared/kodak
      if [ "$part" = kodak ]; then
        if [ "$dry" = 1 ]; then goal=(--images 2 --size 192 --steps 4 --check 2); else goal=(--images 24 --steps 2000); fi
        run 450 "$py" benchmarks/kodak.py --kodak "$kodak" --device "$device" "${goal[@]}" --budgets image \
          --contestants hashgrid hashgrid-f32 --no-upscale --out "$out/kodak-goal.json"
      else
        if [ "$dry" = 1 ]; then peers=(--images 1 --size 256 --steps 4 --siren-steps 3 --check 2); else peers=(--images 3 --steps 2000); fi
        run 450 "$py" benchmarks/kodak.py --kodak "$kodak" --device "$device" "${peers[@]}" --budgets 300k 560k \
          --contestants hashgrid siren torch-hashgrid --out "$out/kodak-budgets.json"
      fi
      ;;
    functa)
      if [ "$dry" = 1 ]; then
        latents=(--limit 5 --datasets shapes --hidden 8 --layers 2 --modulations 4 --base-outer-steps 2
                 --side-by-side 4 --steps 2)
      else
        latents=(--limit 400 --datasets letters photos digits shapes --hidden 32 --layers 2 --base-hidden 128
                 --base-layers 6 --modulations 768 --base-omega0 15 --base-outer-steps 2000 --base-outer-lr 3e-4
                 --base-batch 32 --side-by-side 100)
      fi
      run 450 "$py" benchmarks/weights_suite.py --device "$device" --data bench-results/suite --starts latents \
        --latent-steps 0 10 "${latents[@]}" --out "$out/weights-suite-latents.json"
      ;;
  esac
  echo "=== $part took $(( SECONDS - part_start )) s" | tee -a "$log"
done
"$py" benchmarks/gpu_goals.py "${goals[@]}" --report --command "bash dev/gpu_checks.sh ${parts[*]}" 2>&1 | tee -a "$log"
exit "$failed"
