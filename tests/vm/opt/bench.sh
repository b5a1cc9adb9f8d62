# Opt-in scenario (PINCTL_VM_SCENARIOS=bench): benches/real_cgroup.rs, the
# real-cgroupfs benchmark, on this guest's kernel and hierarchy (cgroup v2,
# or v1). Its report is printed with a BENCH| prefix, its CSV rows (see
# benches/support/record.rs) with a BENCH-CSV| prefix, the machine named
# "VM TOPOLOGY (qemu TCG on HOST)"; the check is that it ran to the end.
# Software emulation makes every figure slower than on hardware: compare
# them with each other (v1 with v2, before with after), not with the targets.
_sizes=${BENCH_SIZES:-10,1000}
_host=$(cat /vm/bench-host 2>/dev/null || echo "an unnamed host")
# 5,000 containers are 10,000 cgroups, each watched by the daemon, and the
# bench watches a file of each container: more than a small guest's default.
echo 1048576 > /proc/sys/fs/inotify/max_user_watches
note "benchmark at $_sizes live containers"
# Its lines as they come: a run of many minutes says nothing else, and the
# bed stops a guest silent for PINCTL_VM_QUIET_LIMIT.
{
    PINCTL_BENCH_PINCTLD=/bin/pinctld PINCTL_BENCH_SIZES=$_sizes PINCTL_BENCH_ROUNDS=10 \
        PINCTL_BENCH_CHURN=30 PINCTL_BENCH_HUPS=2 PINCTL_BENCH_BUDGET=60 \
        PINCTL_BENCH_CSV_DIR=/tmp/bench-csv PINCTL_BENCH_MACHINE="VM $TOPO (qemu TCG on $_host)" \
        pinctl-bench --bench 2>&1
    echo $? > /tmp/bench.rc
} | sed 's/^/BENCH| /'
_rc=$(cat /tmp/bench.rc)
if [ "$_rc" = 0 ]; then
    pass ran "benchmark at $_sizes containers"
else
    fail ran "the benchmark failed (exit $_rc)"
fi
if [ -f /tmp/bench-csv/real_cgroup.csv ]; then
    sed 's/^/BENCH-CSV| /' /tmp/bench-csv/real_cgroup.csv
fi
