# Slurm beside pinctld (issue #33): Debian's slurmctld and slurmd (22.05
# on Debian 12, 24.11 on Debian 13)
# on the one node, munge, the cgroup/v2 plugin with ConstrainCores=yes.
# slurmd makes system.slice/<node>_slurmstepd.scope over D-Bus (before the
# daemon knew that name, it wrote the shared pool into Slurm's jobs), and a cgroup per
# job below it, while the daemon holds the exclusive workloads of the
# earlier scenarios (X, R) and system.slice is among its shared_cgroups.
#
# Checked: a job from srun and one from sbatch run; the kernel gives each
# job what Slurm wrote (effective = cpuset.cpus) and its process those
# CPUs; system.slice keeps every CPU while the tree is in it, and the
# services beside it the shared pool; no event of the daemon writes in
# slurmstepd.scope; `pinctl status` lists the jobs and says where the tree
# is; with Slurm's spec CPUs (CpuSpecList) on pinctl's exclusive ones, as
# the README says, `pinctl verify` finds no conflict; a new pin on the CPUs
# of a job on the whole node, on purpose: the job keeps them all, and
# `pinctl verify` fails naming it. Then [slurm] housekeeping keeps a
# batch job's cores quiet (below). Then Slurm stops.
#
# cgroup v2 only: on v1 Slurm's cgroup/v1 plugin keeps its own tree in each
# hierarchy's root (slurm/uid_*/job_*), which no configuration of the
# daemon's touches.
if [ "$HIER" != v2 ]; then
    note "v1: Slurm's cgroup/v1 tree is outside the daemon's subtrees; not run"
else
    EXCL=${EXCL:-$X}
    # Bundles the runtimes and neighbour scenarios wrote by hand, of
    # containers deleted since: a container of this scenario with the same
    # id would be read with their annotations.
    rm -rf "${BUNDLES:?}"/*
    mkdir -p /etc/slurm /var/lib/slurm/slurmd /var/lib/slurm/slurmctld /var/log/slurm
    chown slurm: /var/lib/slurm/slurmctld /var/log/slurm
    NODE=$(hostname -s)
    # Slurm resolves the node's name with AI_ADDRCONFIG, which counts no
    # loopback address, and the guest has no other interface: an address
    # of its own on lo, and the name for it.
    ip addr add 10.99.0.1/32 dev lo 2>/dev/null || true
    grep -q "[[:space:]]$NODE\$" /etc/hosts || echo "10.99.0.1 $NODE" >>/etc/hosts
    # The node's line as slurmd sees the machine (CPUs, sockets, threads).
    _hw=$(slurmd -C 2>/dev/null | sed -n 1p | sed 's/ UpTime=.*//')
    cat >/etc/slurm/slurm.conf <<EOF
ClusterName=pinctl-vm
SlurmctldHost=$NODE
AuthType=auth/munge
SlurmUser=slurm
SlurmdUser=root
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
$_hw CpuSpecList=$EXCL State=UNKNOWN
PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    printf 'CgroupPlugin=cgroup/v2\nConstrainCores=yes\n' >/etc/slurm/cgroup.conf
    note "slurm.conf node line: $_hw CpuSpecList=$EXCL"
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey --create --keyfile /etc/munge/munge.key 2>&1 | tail -n 1
        chown munge: /etc/munge/munge.key
        chmod 0600 /etc/munge/munge.key
    fi
    _start() {
        systemctl start "$1" 2>&1 || { journalctl -b -u "$1" --no-pager -n 8 -o cat; tail -n 8 /var/log/slurm/*.log 2>/dev/null; return 1; }
    }
    check munge "munge.service starts" _start munge.service
    check slurmctld "slurmctld.service starts" _start slurmctld.service
    check slurmd "slurmd.service starts" _start slurmd.service
    _idle() { sinfo -h -o %T 2>&1 | grep -qx idle; }
    wait_for 90 _idle
    check node-idle "sinfo: the node is idle ($(sinfo -h -o '%T %C' 2>&1))" _idle
    # slurmstepd.scope, or <node>_slurmstepd.scope (Debian's 22.05).
    _scope() { SCOPE=$(cd "$CS" && ls -d system.slice/*slurmstepd.scope 2>/dev/null | head -n 1); [ -n "$SCOPE" ]; }
    wait_for 30 _scope
    check scope "slurmd made its scope: ${SCOPE:-none in system.slice}" _scope

    # A job from srun and one from sbatch, 2 CPUs each.
    srun -n1 -c2 -J small sleep 600 >/run/slurm-srun.out 2>&1 &
    SRUN=$!
    sbatch -n1 -c2 -J batch -o /dev/null --wrap 'sleep 600' >/run/slurm-sbatch.out 2>&1
    _running() { [ "$(squeue -h -t R -o %i | wc -l)" -ge 2 ]; }
    wait_for 60 _running
    check jobs-run "srun and sbatch jobs run: $(squeue -h -o '%i %j %T %C' | tr '\n' ';')" _running
    # job_slurm REL: what Slurm wrote and what the kernel gives agree.
    _job_whole() {
        _c=$(cl norm "$(cat "$CS/$1/cpuset.cpus")"); _e=$(cl norm "$(eff "$1")")
        [ -n "$_c" ] && [ "$_c" = "$_e" ] || { echo "cpuset.cpus '$_c', effective '$_e'"; return 1; }
        echo "$_c"
    }
    for _id in $(squeue -h -t R -o %i); do
        _j=$SCOPE/job_$_id
        check "job-$_id-whole" "$_j keeps what Slurm gave it" _job_whole "$_j"
        _pid=$(head -n 1 "$CS/$_j/step_0/user/task_0/cgroup.procs" 2>/dev/null ||
            find "$CS/$_j" -name cgroup.procs -exec cat {} + 2>/dev/null | head -n 1)
        [ -n "$_pid" ] && expect "job-$_id-process" "$(cat "$CS/$_j/cpuset.cpus")" allowed "$_pid"
    done
    expect system-slice-whole "$(online)" eff system.slice
    J_PID=$(systemctl show -p MainPID --value systemd-journald.service)
    shared_ok slurm-beside "$EXCL" burstable=$B_PID journald=$J_PID

    _listed() {
        _n=$(pinctl status --json | jq -r '.slurm.jobs[]?.name' | sort | tr '\n' ' ')
        for _id in $(squeue -h -t R -o %i); do
            case " $_n" in *" job_$_id "*) ;; *) echo "status lists: $_n"; return 1 ;; esac
        done
        echo "$_n"
    }
    # The watchdog's rounds find them (watchdog_interval, 10 s by default).
    wait_for 40 _listed >/dev/null
    check status-jobs "pinctl status lists the jobs" _listed
    _inside() { pinctl status | grep "^Config: .*Slurm's jobs run in $SCOPE"; }
    check status-config "pinctl status says where Slurm's tree is" _inside
    _clean() {
        pinctl verify >/run/verify.out 2>&1 && return 0
        ! grep "Slurm job" /run/verify.out
    }
    check verify-clean "pinctl verify: no job on exclusive CPUs, none clipped" _clean

    # A job on every CPU Slurm may give (all but its spec CPUs), then a new
    # pin that takes two of them, on purpose (pinctl's reserved_cpus do not
    # keep it off Slurm's CPUs here): the job keeps every CPU Slurm gave it
    # (system.slice is never narrowed below it), and verify names the
    # overlap.
    scancel -u root
    wait "$SRUN" 2>/dev/null
    _none() { [ -z "$(squeue -h)" ]; }
    wait_for 60 _none
    srun -n1 --exclusive -J whole sleep 600 >/run/slurm-whole.out 2>&1 &
    WHOLE=$!
    _one() { [ "$(squeue -h -t R -o %i | wc -l)" -eq 1 ]; }
    wait_for 60 _one
    _wid=$(squeue -h -t R -o %i)
    check whole-runs "a job on the whole node runs ($(squeue -h -o '%i %j %T %C' | tr '\n' ';'))" _one
    container cgroupfs guaranteed 9 2; OV=$APP
    pin overlap-pinned "$OV" 2; OV_SET=$GOT
    [ -n "$_wid" ] && check whole-keeps "job_$_wid keeps every CPU Slurm gave it" _job_whole "$SCOPE/job_$_wid"
    _overlap() {
        ! pinctl verify >/run/verify.out 2>&1 &&
            grep "problem: Slurm job job_$_wid .* that exclusive workload" /run/verify.out | head -n 1
    }
    check verify-overlap "pinctl verify fails on the job beside the new pin $OV_SET" _overlap
    rmcg "$(dirname "$OV")"
    _untouched() {
        _w=$(pinctl events | grep -c "slurmstepd.scope")
        [ "$_w" -eq 0 ] || { pinctl events | grep slurmstepd.scope | head -n 3; return 1; }
    }
    check never-written "no event of the daemon in $SCOPE" _untouched

    # [slurm] housekeeping (with irq_affinity, and [run] on for the ask
    # from inside a job), by a restart: a batch job on 4 CPUs. While it
    # runs, journald (a service of system.slice), the workqueue mask and
    # every steerable interrupt leave its CPUs, sampled for 3 s; its own
    # process keeps them all; the status names them; `pinctl run` from
    # inside the job is refused, naming it; verify passes. When it ends
    # journald has them back, timed from the job's cgroup going away.
    scancel -u root
    wait "$WHOLE" 2>/dev/null
    wait_for 60 _none
    cp "$CONFIG" /run/pinctld.toml.slurm
    sed -i 's/^irq_affinity = .*/irq_affinity = true/' "$CONFIG"
    sed -i '/^\[run\]/,/^\[/ s/^enabled = false$/enabled = true/' "$CONFIG"
    if grep -q '^\[slurm\]' "$CONFIG"; then
        sed -i '/^\[slurm\]/,$ s/^housekeeping = .*/housekeeping = true/' "$CONFIG"
    else
        printf '\n[slurm]\nhousekeeping = true\n' >>"$CONFIG"
    fi
    check quiet-restart "systemctl restart with [slurm] housekeeping = true" systemctl restart pinctld.service
    # A user's process in user.slice, as a login session's would be (the
    # image has no PAM session module for logind's own sessions).
    id quiet >/dev/null 2>&1 || useradd -m quiet
    _uid=$(id -u quiet)
    systemd-run --uid=quiet --slice="user-$_uid.slice" --unit=quiet-session sleep 3600 >/dev/null 2>&1
    _usess() {
        U_PID=$(systemctl show -p MainPID --value quiet-session.service)
        [ -n "$U_PID" ] && [ "$U_PID" != 0 ] && [ -n "$(allowed "$U_PID")" ]
    }
    wait_for 30 _usess
    check quiet-user "a user's process runs in user.slice/user-$_uid.slice (pid ${U_PID:-none})" _usess
    sbatch -n1 -c4 -J quiet -o /dev/null --wrap 'sleep 600' >/run/slurm-quiet.out 2>&1
    wait_for 60 _one
    _qid=$(squeue -h -t R -o %i)
    QJOB=$SCOPE/job_$_qid
    _written() { [ -n "$(cl norm "$(cpus "$QJOB")")" ]; }
    wait_for 30 _written
    JC=$(cl norm "$(cpus "$QJOB")")
    _four() { [ "$(cl count "$JC")" = 4 ] || { echo "$JC"; return 1; }; echo "$JC"; }
    check quiet-job "a batch job runs on 4 CPUs" _four
    # A reserved CPU stays in the shared pool, job or not (Slurm may give
    # one here: its spec CPUs are pinctl's exclusive ones): JQ is the rest.
    RES=$(pinctl status --json | jq -r .reserved)
    JQ=$(cl minus "$JC" "$RES")
    _off() {
        _j=$(cl inter "$(allowed "$J_PID")" "$JQ")
        _u=""
        if [ -n "${U_PID:-}" ]; then
            _ua=$(allowed "$U_PID")
            [ -n "$_ua" ] || { echo "the user's process $U_PID is gone"; return 1; }
            _u=$(cl inter "$_ua" "$JQ")
        fi
        _w=$(cl inter "$(mask_list /sys/devices/virtual/workqueue/cpumask)" "$JQ")
        _s=""
        for _n in $(stray "$JQ"); do refuses "$_n" "$JQ" || _s="$_s $_n"; done
        [ -z "$_j$_u$_w$_s" ] || { echo "journald on '$_j', the user's session on '$_u', workqueue mask on '$_w', interrupts$_s"; return 1; }
    }
    wait_for 10 _off
    _sampled() {
        _end=$(( $(now_ms) + 3000 )); _n=0
        while [ "$(now_ms)" -lt "$_end" ]; do _off || return 1; _n=$((_n + 1)); sleep 0.2; done
        echo "$_n samples"
    }
    check quiet-off "journald, a user's process, the workqueue mask and every steerable interrupt keep off $JQ (reserved: $RES)" _sampled
    _qpid=$(find "$CS/$QJOB" -name cgroup.procs -exec cat {} + 2>/dev/null | head -n 1)
    [ -n "$_qpid" ] && expect quiet-job-process "$JC" allowed "$_qpid"
    _named() { pinctl status | grep "^Slurm: .*job cores $JQ kept quiet"; }
    wait_for 10 _named >/dev/null
    check quiet-status "pinctl status names the job cores" _named
    _in_job() {
        _out=$(srun --jobid="$_qid" --overlap -n1 pinctl run -n 1 -- true 2>&1) && { echo "served: $_out"; return 1; }
        echo "$_out" | grep "runs in Slurm's job_$_qid"
    }
    check quiet-run-refused "pinctl run from inside the job is refused" _in_job
    check quiet-verify "pinctl verify passes" pinctl verify
    # A conflict on purpose, where the daemon cannot undo it: stopped (a
    # stop leaves every set as it is), journald's cgroup given every CPU.
    # `pinctl verify --offline` (the daemon's file, the live tree) fails
    # naming the job; a start puts journald back off the job's cores.
    _jcg=$(awk -F: '$1 == "0" { print substr($3, 2) }' "/proc/$J_PID/cgroup")
    systemctl stop pinctld.service
    echo "$(online)" >"$CS/$_jcg/cpuset.cpus"
    _conflict() {
        ! pinctl verify --offline >/run/verify.out 2>&1 &&
            grep "$_jcg gets CPUs .* of Slurm's job_$_qid, which \[slurm\] housekeeping keeps quiet" /run/verify.out | head -n 1
    }
    check quiet-verify-conflict "pinctl verify --offline fails on journald put on the job's cores" _conflict
    systemctl start pinctld.service
    wait_for 30 _off
    check quiet-restarted "a start puts journald off the job's cores again" _off
    # The job ends: timed from the moment its cgroup is gone to the
    # moment journald's affinity holds the job's cores again, both read
    # in a loop of shell builtins every 5 ms (no fork, which takes tens of
    # ms under emulation; the pause is a read that times out on a pipe no
    # one writes, not a busy loop that takes the daemon's host CPU).
    _jstat=/proc/$J_PID/status
    # _aff: journald's affinity into _v, without a subshell.
    _aff() { while read -r _k _v; do [ "$_k" = Cpus_allowed_list: ] && return; done <"$_jstat"; }
    _pre=$(cl minus "$(allowed "$J_PID")" "$JQ")
    _after=$(cl union "$_pre" "$JQ")  # as the kernel writes a list
    exec {_nap}<> <(:)
    scancel "$_qid"
    _tg="" _tb="" _end=$((${EPOCHREALTIME%.*} + 60)) _v=""
    while [ "${EPOCHREALTIME%.*}" -lt "$_end" ]; do
        if [ -z "$_tg" ]; then
            [ -d "$CS/$QJOB" ] || _tg=$EPOCHREALTIME
        else
            _aff
            [ "$_v" = "$_after" ] && { _tb=$EPOCHREALTIME; break; }
        fi
        read -r -t 0.005 -u "$_nap" _ || true
    done
    exec {_nap}>&-
    _ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%d", (b - a) * 1000 }'; }
    # When the daemon logged the change, from the same moment.
    _seen=$(journalctl -u pinctld.service -o short-unix --no-pager --since "@$(( ${_tg%.*} - 10 ))" 2>/dev/null |
        awk -v t="${_tg:-0}" '/job cores changed/ { d = sprintf("%d", ($1 - t) * 1000) } END { print d }')
    if [ -n "$_tb" ]; then
        pass quiet-back "journald has $JQ back ($_after) $(_ms "$_tg" "$_tb") ms after the job's cgroup went (the daemon's log: ${_seen:-?} ms)"
    elif [ -z "$_tg" ]; then
        fail quiet-back "the job's cgroup $QJOB is still there 60 s after scancel"
    else
        fail quiet-back "journald on '$_v', not $_after, $(_ms "$_tg" "$EPOCHREALTIME") ms after the job's cgroup went"
    fi
    _u_back() { [ "$(cl inter "$(allowed "$U_PID")" "$JQ")" = "$JQ" ]; }
    check quiet-user-back "the user's process has $JQ back" wait_for 10 _u_back
    systemctl stop quiet-session.service
    # Off again by a reload ([run] waits for a restart: harmless to the
    # scenarios after this one, and the purge ends the package).
    cp /run/pinctld.toml.slurm "$CONFIG"
    systemctl reload pinctld.service

    # Slurm stops: its tree goes, and system.slice is confined again.
    scancel -u root
    systemctl stop slurmd.service slurmctld.service munge.service
    # The scope outlives slurmd (it holds slurmstepd's own cgroup): stopped
    # as an operator would.
    systemctl stop "$(basename "$SCOPE")" 2>/dev/null
    _scope_gone() { [ ! -d "$CS/$SCOPE" ]; }
    wait_for 30 _scope_gone
    check scope-gone "$SCOPE is gone" _scope_gone
    expect system-slice-confined "$(cl minus "$(online)" "$EXCL")" eff system.slice
    shared_ok slurm-gone "$EXCL" burstable=$B_PID journald=$J_PID
fi
