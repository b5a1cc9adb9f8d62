# The kubelet's real path (issue #32): Debian's containerd (1.6.20, its CRI
# plugin, runc) driven over its CRI socket by the bed's own client
# (/vm/debian/cri/cri.py), which sends what the kubelet sends: RunPodSandbox
# with the pod's cgroup as linux.cgroup_parent, the node's network (no CNI)
# and the pod's annotations, then CreateContainer and StartContainer with the
# kubelet's linux.resources; teardown with StopContainer, RemoveContainer,
# StopPodSandbox and RemovePodSandbox. containerd passes the pod's pinctl.io/*
# annotations (its pod_annotations list) into the bundle of the sandbox
# (pause) container and of every container. No registry is reachable: the
# image, also the sandbox image, is a one-layer image of busybox that
# cri.py builds and `ctr` imports; the snapshotter is native (overlay is a
# module, and the guest has none). Run with runc's systemd driver
# (SystemdCgroup = true) and with the cgroupfs driver, as cri_drivers says
# (the guest: one per hierarchy by default).
#
# Per driver: a Burstable pod stays on the shared pool; a Guaranteed pod of
# 2 CPUs is pinned by the kubelet rule (quota from the runtime); a
# single-container pod annotated pinctl.io/cpus: "1" takes exactly 1 CPU,
# its pause never; a two-container pod annotated pinctl.io/cpus.app: "1"
# pins app alone, on 1 CPU; a daemon-reload while the pins are held, every
# shared cgroup sampled every 10 ms: none is ever on an exclusive CPU; every
# pause process is on the shared pool; the teardown gives every CPU back.
. /vm/debian/cri/cri.sh

# The shared pool: online minus the exclusive sets of the earlier scenarios
# (X, R) and those this one adds (PINS: "cgroup=set" words). A pod's checks
# compare with what the kernel gives the Burstable process of scenario pin
# (B_PID, on the shared pool: checked there and at each release), so that
# one pod's wrong pin does not fail the next pod's checks too.
pool() { cl minus "$(online)" "$1"; }
shared() { allowed "$B_PID"; }
pins_set() { _s=""; for _p in $PINS; do _s=$(cl union "$_s" "${_p#*=}"); done; echo "$_s"; }
# allowed_for REL [leaf]: what a cgroup REL may hold during the sampling:
# a container's or pause's (leaf) the shared pool; a structure or pod
# cgroup the shared pool and the CPUs pinned below it (PINS, and OBS: the
# pods' cgroups found pinned when the sampling began, a pause among them if
# it was wrongly pinned, which is its own check's failure) on v2, and every
# CPU on v1, where they are never narrowed (structure_set).
allowed_for() {
    _own=""
    for _p in $PINS $OBS "$G=$X" "hpc.slice/job-1.scope=$R"; do
        case "${_p%%=*}" in "$1"/* | "$1") _own=$(cl union "$_own" "${_p#*=}") ;; esac
    done
    if [ "$HIER" = v1 ] && [ "$2" != leaf ]; then
        case "$1" in kubepods | kubepods.slice | kubepods/* | kubepods.slice/*) online; return ;; esac
    fi
    cl union "$SAMPLE_POOL" "$_own"
}

# Leftovers of scenarios runtimes and neighbour: bundles written by hand
# where containerd keeps its own, of containers deleted since.
rm -rf "${BUNDLES:?}"/*
# The exclusive CPUs of the scenarios before (pin alone in the boot that
# runs the CRI scenarios without the others).
EXCL=${EXCL:-$X}

# The checks of one driver; TAG prefixes the check names.
cri_round() {
    DRV=$1; T=$1
    PINS=""
    ctd_config "$DRV"
    check "$T-containerd" "containerd with runc's $DRV driver" _ctd_restart
    [ -n "$IMPORTED" ] || { check image-import "one-layer busybox image imported with ctr" _import && IMPORTED=1; }
    POOL=$(pool "$EXCL")
    expect "$T-pool-before" "$POOL" allowed "$B_PID"
    POOL=$(shared)

    # A Burstable pod: its container and its pause stay on the shared pool.
    n=$((BASE + 1))
    check "$T-burstable-run" "RunPodSandbox, CreateContainer, StartContainer" \
        run_pod burst --name "burst-$T" --uid "$(uid cgroupfs "$n")" --qos burstable --container app
    BU_APP=$(pod_pid burst app); BU_PAUSE=$(pod_pid burst sandbox)
    if ran burst; then
        note "Burstable pod: app $(cg_of "$BU_APP"), pause $(cg_of "$BU_PAUSE")"
        # On v1 runc copies the parent's set into a new cpuset: every CPU (a
        # structure cgroup is never narrowed), until the daemon narrows it:
        # wait for that first, then it must stay.
        expect "$T-burstable-app" "$POOL" allowed "$BU_APP"
        expect_stays "$T-burstable-app-stays" "$POOL" allowed "$BU_APP" 2
        expect "$T-burstable-pause" "$POOL" allowed "$BU_PAUSE"
    fi

    # A Guaranteed pod, limits = requests = 2 CPUs: the kubelet rule pins
    # its container by the quota the runtime wrote (then lifted:
    # unthrottle_exclusive = "kubelet", kept in user.pinctl.quota).
    n=$((BASE + 2))
    check "$T-guaranteed-run" "RunPodSandbox, CreateContainer, StartContainer" \
        run_pod guar --name "guar-$T" --uid "$(uid cgroupfs "$n")" --qos guaranteed --cpus 2 --container app
    GU_APP=$(pod_pid guar app); GU_PAUSE=$(pod_pid guar sandbox)
    GU_CG=$(cg_of "$GU_APP") GU=""
    if ran guar; then
        note "Guaranteed pod: app $GU_CG, pause $(cg_of "$GU_PAUSE")"
        pin "$T-guaranteed-pinned" "$GU_CG" 2; GU=$GOT
        [ "$(cl count "$GU")" = 2 ] && PINS="$PINS $GU_CG=$GU" || GU=""
        [ -z "$GU" ] || expect "$T-guaranteed-process" "$GU" allowed "$GU_APP"
        if [ "$HIER" = v1 ]; then _q=$(cat "$CPU/$GU_CG/cpu.cfs_quota_us" 2>/dev/null); else _q=$(cat "$CPU/$GU_CG/cpu.max" 2>/dev/null); fi
        _kept=$(vm-helper getxattr "$CS/$GU_CG" user.pinctl.quota 2>/dev/null)
        check "$T-guaranteed-quota" "the runtime's quota 200000: quota now '$_q', kept (user.pinctl.quota) '$_kept'" \
            eval 'case "$_q $_kept" in *200000*) ;; *) false ;; esac'
        expect "$T-guaranteed-pause" "$(shared)" allowed "$GU_PAUSE"
        check "$T-guaranteed-pool" "the pool lost the pin's CPUs: $(shared)" [ "$(shared)" = "$(cl minus "$POOL" "$GU")" ]
    fi

    # The pod annotation pinctl.io/cpus: "1" on a single-container pod:
    # exactly 1 exclusive CPU for the whole pod, never its pause's.
    n=$((BASE + 3))
    before=$(shared)
    check "$T-annotated-run" "RunPodSandbox, CreateContainer, StartContainer, annotation pinctl.io/cpus=1" \
        run_pod one --name "one-$T" --uid "$(uid cgroupfs "$n")" --qos burstable --annotation pinctl.io/cpus=1 --container app
    ON_APP=$(pod_pid one app); ON_PAUSE=$(pod_pid one sandbox)
    ON_CG=$(cg_of "$ON_APP") ON=""
    if ran one; then
        note "annotated pod: app $ON_CG, pause $(cg_of "$ON_PAUSE"); pinctl.io annotations in the sandbox's bundle: $(grep -o '"pinctl.io/[^"]*": *"[^"]*"' "$BUNDLES/$(pod_id one sandbox)/config.json" 2>/dev/null | tr '\n' ' '), in app's: $(grep -o '"pinctl.io/[^"]*": *"[^"]*"' "$BUNDLES/$(pod_id one app)/config.json" 2>/dev/null | tr '\n' ' ')"
        for _w in sandbox app; do
            note "bundle of $_w: $(jq -c '{cgroupsPath: .linux.cgroupsPath, quota: .linux.resources.cpu.quota, cpus: .linux.resources.cpu.cpus, annotations: (.annotations | with_entries(select(.key | test("pinctl|container-type|sandbox-cpu"))))}' "$BUNDLES/$(pod_id one "$_w")/config.json" 2>&1)"
        done
        pin "$T-annotated-pinned" "$ON_CG" 1; ON=$GOT
        [ "$(cl count "$ON")" = 1 ] && PINS="$PINS $ON_CG=$ON" || ON=""
        [ -z "$ON" ] || expect "$T-annotated-process" "$ON" allowed "$ON_APP"
        expect_stays "$T-annotated-pause" "$(cl minus "$before" "$ON")" allowed "$ON_PAUSE" 2
        expect "$T-annotated-pod-total" "$(cl minus "$before" "$ON")" allowed "$B_PID"
    fi

    # Two containers, the per-container form pinctl.io/cpus.app: "1": app
    # alone is exclusive, on 1 CPU; side and the pause stay shared.
    n=$((BASE + 4))
    before=$(shared)
    check "$T-two-run" "RunPodSandbox, CreateContainer and StartContainer of app and side, annotation pinctl.io/cpus.app=1" \
        run_pod two --name "two-$T" --uid "$(uid cgroupfs "$n")" --qos burstable --annotation pinctl.io/cpus.app=1 \
        --container app --container side
    TW_APP=$(pod_pid two app); TW_SIDE=$(pod_pid two side); TW_PAUSE=$(pod_pid two sandbox)
    TW_CG=$(cg_of "$TW_APP") TW=""
    if ran two; then
        pin "$T-two-app-pinned" "$TW_CG" 1; TW=$GOT
        [ "$(cl count "$TW")" = 1 ] && PINS="$PINS $TW_CG=$TW" || TW=""
        [ -z "$TW" ] || expect "$T-two-app-process" "$TW" allowed "$TW_APP"
        expect_stays "$T-two-side" "$(cl minus "$before" "$TW")" allowed "$TW_SIDE" 2
        expect "$T-two-pause" "$(cl minus "$before" "$TW")" allowed "$TW_PAUSE"
        expect "$T-two-pod-total" "$(cl minus "$before" "$TW")" allowed "$B_PID"
    fi

    # Every pause process on the shared pool (as the Burstable process).
    for _rp in burstable="$BU_PAUSE" guaranteed="$GU_PAUSE" annotated="$ON_PAUSE" two="$TW_PAUSE"; do
        [ -n "${_rp#*=}" ] && expect "$T-pauses/${_rp%%=*}" "$(shared)" allowed "${_rp#*=}"
    done

    # systemctl daemon-reload with the pins held: every shared cgroup's
    # effective CPUs, read every 10 ms for 2 s from before the reload to
    # after it, never holds an exclusive CPU.
    SAMPLE_POOL=$(shared)
    OBS=""
    for _pid in "$BU_APP" "$TW_SIDE" "$BU_PAUSE" "$GU_PAUSE" "$ON_PAUSE" "$TW_PAUSE"; do
        [ -n "$_pid" ] || continue
        _r=$(cg_of "$_pid"); _e=$(eff "$_r")
        [ -n "$_r" ] && [ -n "$_e" ] && [ -z "$(cl inter "$_e" "$SAMPLE_POOL")" ] && OBS="$OBS $_r=$_e"
    done
    [ -z "$OBS" ] || note "pinned before the reload, taken as such in the sampling:$OBS"
    # The cgroups the daemon keeps on the shared pool: its shared_cgroups
    # and managed (init.scope is in neither by default: PID 1 keeps every
    # CPU, before the reload as after it, which is the configuration's
    # choice and not checked here).
    _kept=$(sed -n 's/^\(shared_cgroups\|managed\) = \[\(.*\)\]$/\2/p' "$CONFIG" | tr -d '",' | tr '\n' ' ')
    _s=""
    for _r in user.slice system.slice init.scope system.slice/containerd.service kubepods.slice \
        kubepods.slice/kubepods-burstable.slice kubepods.slice/kubepods-besteffort.slice kubepods kubepods/burstable \
        kubepods/besteffort; do
        [ -e "$CS/$_r/$EFF" ] || continue
        case " $_kept " in
            *" ${_r%%/*} "*) _s="$_s $CS/$_r/$EFF=$(allowed_for "$_r")" ;;
            *) note "$_r is not among shared_cgroups or managed ($_kept): on CPUs $(eff "$_r"), not sampled" ;;
        esac
    done
    for _pid in "$BU_APP" "$TW_SIDE" "$BU_PAUSE" "$GU_PAUSE" "$ON_PAUSE" "$TW_PAUSE"; do
        [ -n "$_pid" ] || continue
        _r=$(cg_of "$_pid")
        [ -n "$_r" ] || continue
        _s="$_s $CS/$_r/$EFF=$(allowed_for "$_r" leaf)"
        _r=$(dirname "$_r")
        case "$_s" in *" $CS/$_r/$EFF="*) ;; *) _s="$_s $CS/$_r/$EFF=$(allowed_for "$_r")" ;; esac
    done
    rm -f /run/cri-sampler.ready
    # shellcheck disable=SC2086
    $CRI sample --every 0.01 --for 2.5 --ready /run/cri-sampler.ready $_s >/run/cri-sampler.out 2>&1 &
    _sp=$!
    wait_for 20 test -e /run/cri-sampler.ready
    sleep 0.3
    _since=$(date +%s)
    systemctl daemon-reload
    wait "$_sp"; _rc=$?
    _sampled() { cat /run/cri-sampler.out | sed "s|$CS/||g" | tr '\n' ';'; return "$_rc"; }
    check "$T-daemon-reload-shared" "no shared cgroup off the shared pool $SAMPLE_POOL (+ the pins below it)" _sampled
    # systemd logs the writes the kernel refuses (ENOSPC: a cgroup with
    # tasks), not those it accepts (an empty cgroup).
    _refused=$(journalctl -b --since "@$_since" --no-pager -o cat 2>/dev/null | grep "Failed to set 'cpuset.cpus'" |
        sed -n "s/.*Failed to set .cpuset.cpus. attribute on '[^']*\/\([^'/]*\)' to '\([^']*\)': \(.*\)/\1 (\"\2\": \3)/p" |
        sed 's/cri-containerd-\(.\{12\}\)[0-9a-f]*\.scope/cri-containerd-\1....scope/' | sort | uniq -c | tr -s ' \n' ' ')
    note "systemd's cpuset.cpus writes in the reload that the kernel refused:${_refused:- none}"
    [ -z "$GU" ] || expect_stays "$T-guaranteed-after-reload" "$GU" allowed "$GU_APP" 0
    [ -z "$ON" ] || expect_stays "$T-annotated-after-reload" "$ON" allowed "$ON_APP" 0

    # Teardown, as the kubelet deletes the pods: the CPUs come back. No
    # grace period (the kubelet's is the pod's, 30 s by default): the
    # containers' sleep, PID 1 of their PID namespace, ignores SIGTERM.
    _rm() {
        # shellcheck disable=SC2046
        $CRI rm-pod --timeout 0 $(pod_id burst sandbox) $(pod_id guar sandbox) $(pod_id one sandbox) $(pod_id two sandbox) \
            >/run/cri-rm.out 2>&1 || { tail -n 2 /run/cri-rm.out | tr '\n' ' '; return 1; }
        tr '\n' ';' </run/cri-rm.out
    }
    check "$T-teardown" "StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox" _rm
    shared_ok "$T-released" "$EXCL" burstable=$B_PID
    _gone() {
        for _c in "$GU_CG" "$ON_CG" "$TW_CG"; do [ -z "$_c" ] || [ ! -d "$CS/$_c" ] || { echo "$_c is still there"; return 1; }; done
    }
    wait_for 10 _gone
    check "$T-cgroups-gone" "the containers' cgroups are removed" _gone
    # With systemd on v2 a pin waits until systemd holds the slices above
    # it (daemon/systemd.rs): how long, from the daemon's histogram. The
    # VM bed is emulated: a real machine answers far sooner.
    if [ "$1" = systemd ] && [ "$HIER" = v2 ]; then
        note "pins' waits for systemd so far: $(systemd_waits)"
    fi
}

# The daemon's pinctl_systemd_wait_seconds: how many waits, how long.
systemd_waits() {
    python3 - <<'PY' 2>&1
import socket
s = socket.socket(socket.AF_UNIX)
s.connect("/run/pinctl/pinctl.sock")
s.sendall(b"GET /metrics HTTP/1.0\r\nHost: pinctl\r\n\r\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
v = {}
for line in data.decode().splitlines():
    name, _, value = line.partition(" ")
    if name in ("pinctl_systemd_wait_seconds_sum", "pinctl_systemd_wait_seconds_count"):
        v[name] = float(value)
n, t = v.get("pinctl_systemd_wait_seconds_count", 0), v.get("pinctl_systemd_wait_seconds_sum", 0)
print(f"{n:.0f} waits, {t * 1000:.1f} ms in all, {t * 1000 / n:.1f} ms each" if n else "none")
PY
}

IMPORTED=""
for _drv in $(cri_drivers); do
    case $_drv in systemd) BASE=50 ;; cgroupfs) BASE=60 ;; esac
    cri_round "$_drv"
done
_stop() { systemctl stop containerd.service 2>&1; }
check containerd-stop "systemctl stop containerd" _stop
