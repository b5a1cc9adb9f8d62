# Opt-in scenario (PINCTL_VM_SCENARIOS=noise): benches/noise.sh, the noise
# benchmark (issue #42), in this guest, where every process of the machine
# is the test's own: oslat on an exclusive CPU beside stress-ng, and
# `pinctl verify --noise` over the same window, in all five set-ups, set-up
# 5 (housekeeping = true, which changes the guest's kernel settings)
# included. tests/vm/run packs oslat and stress-ng (Debian's rt-tests and
# stress-ng, from the host) with their libraries; without them it says so
# and skips. Cgroup v2 only. Its report is printed with a BENCH| prefix,
# its CSV rows with BENCH-CSV|, the machine "VM TOPOLOGY (qemu TCG on
# HOST)": under emulation the µs latencies are emulated too, compare them
# with each other, not with hardware. About 3 minutes.
if [ "$HIER" != v2 ]; then
    note "runs on cgroup v2 only"
    return 0
fi
if ! command -v oslat >/dev/null 2>&1 || ! command -v stress-ng >/dev/null 2>&1; then
    note "no oslat or stress-ng in the guest (apt-get install rt-tests stress-ng on the host): skipped"
    return 0
fi
_host=$(cat /vm/bench-host 2>/dev/null || echo "an unnamed host")
note "noise benchmark, 5 set-ups of ${NOISE_DURATION:-20} s"
{
    PINCTL_REAL_CGROUP=1 PINCTL_NOISE_SYSTEM=1 PINCTL_NOISE_DURATION=${NOISE_DURATION:-20} \
        PINCTL_BENCH_BIN_DIR=/bin PINCTL_BENCH_CSV_DIR=/tmp/noise-csv \
        PINCTL_BENCH_MACHINE="VM $TOPO (qemu TCG on $_host)" \
        sh /vm/noise-bench.sh 2>&1
    echo $? > /tmp/noise.rc
} | sed 's/^/BENCH| /'
_rc=$(cat /tmp/noise.rc)
_rows=$(($(wc -l < /tmp/noise-csv/noise.csv 2>/dev/null || echo 1) - 1))
if [ "$_rc" = 0 ] && [ "$_rows" = 5 ]; then
    pass ran "noise benchmark: 5 set-ups"
else
    fail ran "the noise benchmark failed (exit $_rc, $_rows rows of 5)"
fi
if [ -f /tmp/noise-csv/noise.csv ]; then
    sed 's/^/BENCH-CSV| /' /tmp/noise-csv/noise.csv
fi
