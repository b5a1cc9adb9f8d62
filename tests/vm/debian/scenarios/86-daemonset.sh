# pinctld as the DaemonSet's pod (packaging/kubernetes/), with the image
# packaging/image makes, on Debian 13's containerd over CRI (runc's systemd
# driver). The pod is made by cri.py from the manifests themselves
# (/vm/daemonset.json, the YAML as JSON): its namespaces, privileges,
# resources, args and mounts as written there; the ConfigMap mounted at
# /etc/pinctl.
#
# - The image, imported with ctr, runs pinctld in a privileged Burstable
#   container: `pinctl status` answers on the host through /run/pinctl.
# - A Guaranteed pod is pinned by that daemon.
# - The daemon's own container runs on the shared pool.
# - A rollout: the daemon's pod stopped (SIGTERM) and removed, a new one
#   started: the pinned pod's CPUs never move, and the new daemon names it
#   with the same CPUs.
# Without the image in the bed (tests/vm/run alone, no packaging/image
# before it) this scenario is skipped with a note.
. /vm/debian/cri/cri.sh

DS_IMAGE=/vm/pinctl-image.tar
DS_JSON=/vm/daemonset.json
if [ ! -s "$DS_IMAGE" ] || [ ! -s "$DS_JSON" ]; then
    note "no pinctl image or manifests in the bed (run packaging/image before tests/vm/run): skipped"
    return 0
fi
EXCL=${EXCL:-$X}
DRV=systemd

# One pinctld per node: the package's stops for the DaemonSet's.
systemctl stop pinctld.service
ctd_config "$DRV"
check ds-containerd "containerd (runc's systemd driver)" _ctd_restart
[ -n "${IMPORTED:-}" ] || { check image-import "one-layer busybox image imported with ctr" _import && IMPORTED=1; }
_ds_import() {
    command ctr -n k8s.io images import --snapshotter native "$DS_IMAGE" >/run/ds-import.out 2>&1 ||
        { tail -n 2 /run/ds-import.out; return 1; }
    _ref=$(jq -r '.spec.template.spec.containers[0].image' <(jq '.[] | select(.kind == "DaemonSet")' "$DS_JSON"))
    command ctr -n k8s.io images ls -q | grep -x "$_ref" || { echo "$_ref not in ctr images ls"; return 1; }
}
check ds-image-import "the image imported with ctr -n k8s.io images import" _ds_import

# ds_run TAG ATTEMPT: the DaemonSet's pod, as the kubelet would run it.
ds_run() {
    _t=$1
    rm -f "/run/cri-$_t.ok"
    $CRI daemonset "$DS_JSON" --name pinctld-vm --uid "$(uid cgroupfs 81)" --attempt "$2" --driver "$DRV" \
        >"/run/cri-$_t" 2>"/run/cri-$_t.err" || { tail -n 3 "/run/cri-$_t.err" | tr '\n' ' '; return 1; }
    touch "/run/cri-$_t.ok"
    tr '\n' ';' <"/run/cri-$_t"
}
_answers() { pinctl status >/dev/null 2>&1; }
check ds-run "the DaemonSet's pod, made from 02-daemonset.yaml and 01-configmap.yaml" ds_run ds 0
if ! ran ds; then
    systemctl start pinctld.service
    return 0
fi
check ds-status "pinctl status on the host answers (the socket through /run/pinctl)" wait_for 60 _answers
DS_PID=$(pod_pid ds pinctld)
_in_container() { cg_of "$DS_PID" | grep -q 'kubepods-burstable.*cri-containerd-'; }
check ds-burstable "the daemon runs in a Burstable pod's container: $(cg_of "$DS_PID")" _in_container

# A Guaranteed pod: pinned by the daemon in its container.
check ds-guaranteed-run "a Guaranteed pod of 2 CPUs" \
    run_pod dsguar --name ds-guar --uid "$(uid cgroupfs 82)" --qos guaranteed --cpus 2 --container app
DG=""
if ran dsguar; then
    DG_APP=$(pod_pid dsguar app)
    DG_CG=$(cg_of "$DG_APP")
    pin ds-pinned "$DG_CG" 2; DG=$GOT
    expect ds-guaranteed-process "$DG" allowed "$DG_APP"
    _pool() { pinctl status --json | jq -r .shared_pool; }
    expect ds-own-shared "$(_pool)" allowed "$DS_PID"
    check ds-own-not-exclusive "the daemon's own container holds none of $DG" \
        eval '[ -z "$(cl inter "$(allowed "$DS_PID")" "$DG")" ]'
fi

# A rollout: SIGTERM to the daemon (its pod stopped, within the grace
# period), the pod removed, a new one made. The pin never moves.
_rm_ds() {
    $CRI rm-pod --timeout 30 "$(pod_id ds sandbox)" >/run/ds-rm.out 2>&1 || { tail -n 2 /run/ds-rm.out | tr '\n' ' '; return 1; }
}
check ds-rollout-stop "the daemon's pod stopped and removed" _rm_ds
[ -z "$DG" ] || expect_stays ds-no-daemon "$DG" allowed "$DG_APP" 3
check ds-rollout-start "a new pod of the DaemonSet" ds_run ds 1
check ds-rollout-status "pinctl status answers again" wait_for 60 _answers
if [ -n "$DG" ]; then
    expect_stays ds-after-rollout "$DG" allowed "$DG_APP" 5
    _named() { pinctl status --json | jq -e --arg cg "$DG_CG" --arg cpus "$DG" \
        '[.workloads[] | select(.cgroups | index($cg)) | .cpus] == [$cpus]' >/dev/null; }
    check ds-rollout-adopted "the new daemon holds the pod on $DG" wait_for 30 _named
fi

# On a failure, what the daemon in the container said.
if grep -q "^$SCEN/" "$FAILS"; then
    for _log in /var/log/pods/pinctl_pinctld-vm_*/pinctld/*.log; do
        [ -e "$_log" ] && sed 's/^/LOG| /' "$_log" | tail -n 80
    done
fi

# Teardown: the pods removed, every CPU back; the package's pinctld again.
_rm_all() {
    # shellcheck disable=SC2046
    $CRI rm-pod --timeout 30 $(pod_id dsguar sandbox) >/run/ds-rm.out 2>&1 || { tail -n 2 /run/ds-rm.out | tr '\n' ' '; return 1; }
}
[ -z "$DG" ] || check ds-teardown "the Guaranteed pod removed" _rm_all
_pool_all() { [ "$(cl norm "$(pinctl status --json | jq -r .shared_pool)")" = "$(cl norm "$(cl minus "$(online)" "$EXCL")")" ]; }
[ -z "$DG" ] || check ds-released "the shared pool has every CPU again" wait_for 30 _pool_all
check ds-last-stop "the daemon's pod removed" _rm_ds
_stop() { systemctl stop containerd.service 2>&1; }
check ds-containerd-stop "systemctl stop containerd" _stop
systemctl start pinctld.service
