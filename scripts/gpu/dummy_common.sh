# Shared by the dummy-weight stages (dummy_moe.sh, tp2.sh, ray1.sh, capacity.sh): sourced, not run. Results go to $OUT;
# runs.db, logs and the compile caches persist in /tmp between stages of one lent machine.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT
W=/tmp/autotune; DB=$W/runs.db
export AUTOTUNE_CACHE=$W/cache   # the generated shape directories (config + tokenizer)
mkdir -p "$W/logs"
at="python3 -m autotune"
save() {
  cp "$DB" "$OUT/runs.db" 2>/dev/null; tar czf "$OUT/logs.tgz" -C "$W" logs 2>/dev/null
  COLUMNS=220 $at show --db "$DB" > "$OUT/show.txt" 2>&1
}
install() {  # the parts hold stage/install-on-device: join them first (only once)
  (cd /tmp/gpu-bundle && { [[ -d stage ]] || cat part* | tar x; } && bash stage/install-on-device) \
    > "$OUT/install.txt" 2>&1 || { cat "$OUT/install.txt"; exit 1; }
  nvidia-smi >> "$OUT/install.txt" 2>&1   # $OUT brings back 8 files at most: keep the count down
}
one_gpu_raylets() {  # $1: how many; writes $W/cluster.yaml: this host as N nodes, one GPU (and raylet) each
  local ip i
  ip=$(python3 -c "from autotune.launchers.cluster import host_ip; print(host_ip())")
  { printf 'gpus_per_node: 1\nrdma: false\nnodes:\n'
    for (( i = 0; i < $1; i++ )); do printf '  - {ip: %s, gpus: "%d", temp_dir: /tmp/at-r%d}\n' "$ip" "$i" "$i"; done
  } > "$W/cluster.yaml"
}
checked() {  # $1: a name; the rest: a command, run inside an NVML-counter vs nvidia-smi cross-check (issue 33)
  local name=$1; shift
  python3 scripts/gpu/energy_check.py -- "$@" > "$OUT/energy-$name.json" 2> "$W/energy-$name.err"
  echo "energy_check exit $?"; tail -5 "$W/energy-$name.err"
  [[ -s $OUT/$name.txt ]] || "$@"   # the check could not start the command (no NVML): run it bare
}
