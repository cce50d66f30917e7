# Shared by the dummy-weight stages (dummy_moe.sh, tp2.sh, ray1.sh, capacity.sh): sourced, not run. Results go to $OUT;
# runs.db, logs and the compile caches persist in /tmp between stages of one lent machine.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
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
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
}
one_gpu_raylets() {  # $1: how many; writes $W/cluster.yaml: this host as N nodes, one GPU (and raylet) each
  local ip i
  ip=$(python3 -c "from autotune.launchers.cluster import host_ip; print(host_ip())")
  { printf 'gpus_per_node: 1\nrdma: false\nnodes:\n'
    for (( i = 0; i < $1; i++ )); do printf '  - {ip: %s, gpus: "%d", temp_dir: /tmp/at-r%d}\n' "$ip" "$i" "$i"; done
  } > "$W/cluster.yaml"
}
