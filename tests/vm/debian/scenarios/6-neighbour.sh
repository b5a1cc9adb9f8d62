# systemd as a neighbour that writes cgroups too: a container pinned in a
# scope that systemd made (runc, systemd driver), then `systemctl
# daemon-reload` and `systemctl set-property` on the scope and on its
# slices, each of which makes systemd write the cgroup attributes it owns
# again. What the kernel gives the container's process is sampled every 50
# ms for 3 s after each: a pin must never widen, and never for long.
n=40
oci runc systemd "$n" 1
pin pinned "$OCI_CG" 1; C=$GOT
expect process "$C" allowed "$OCI_PID"
SCOPE=$(basename "$OCI_CG")
POD_SLICE=$(basename "$(dirname "$OCI_CG")")

# held NAME SET PID: samples Cpus_allowed_list of PID for 3 s; a PASS says
# it never left SET, a FAIL how often and what it became.
held() {
    _bad=0 _seen=""
    _end=$(( $(now_ms) + 3000 ))
    while [ "$(now_ms)" -lt "$_end" ]; do
        _now=$(cl norm "$(allowed "$3")")
        if [ "$_now" != "$2" ]; then _bad=$((_bad + 1)); _seen=$_now; fi
        sleep 0.05
    done
    if [ "$_bad" -eq 0 ]; then pass "$1" "allowed $3 stayed $2"; else fail "$1" "allowed $3 left $2 in $_bad samples (seen $_seen)"; fi
}

systemctl daemon-reload
held daemon-reload "$C" "$OCI_PID"
systemctl set-property --runtime "$SCOPE" CPUWeight=50
held set-property-scope "$C" "$OCI_PID"
systemctl set-property --runtime "$POD_SLICE" CPUWeight=50
held set-property-pod-slice "$C" "$OCI_PID"
systemctl set-property --runtime kubepods.slice CPUWeight=90
held set-property-kubepods "$C" "$OCI_PID"
# And what systemd itself says about the scope's CPUs.
note "systemd's view of $SCOPE: AllowedCPUs=$(systemctl show -p AllowedCPUs --value "$SCOPE") EffectiveCPUs=$(systemctl show -p EffectiveCPUs --value "$SCOPE")"
oci_delete runc systemd "$OCI_ID"
