# systemd as a neighbour that writes cgroups too: a container pinned in a
# scope that systemd made (runc, systemd driver), then `systemctl
# daemon-reload` and `systemctl set-property` on the scope and on its
# slices, each of which makes systemd write the cgroup attributes it owns
# again. What the kernel gives the container's process is sampled every 50
# ms for 3 s after each: a pin must never move.
n=40
oci runc systemd "$n" 1
pin pinned "$OCI_CG" 1; C=$GOT
expect process "$C" allowed "$OCI_PID"
SCOPE=$(basename "$OCI_CG")
POD_SLICE=$(basename "$(dirname "$OCI_CG")")

systemctl daemon-reload
expect_stays daemon-reload "$C" allowed "$OCI_PID" 3 0.05
systemctl set-property --runtime "$SCOPE" CPUWeight=50
expect_stays set-property-scope "$C" allowed "$OCI_PID" 3 0.05
systemctl set-property --runtime "$POD_SLICE" CPUWeight=50
expect_stays set-property-pod-slice "$C" allowed "$OCI_PID" 3 0.05
systemctl set-property --runtime kubepods.slice CPUWeight=90
expect_stays set-property-kubepods "$C" allowed "$OCI_PID" 3 0.05
# And what systemd itself says about the scope's CPUs.
note "systemd's view of $SCOPE: AllowedCPUs=$(systemctl show -p AllowedCPUs --value "$SCOPE") EffectiveCPUs=$(systemctl show -p EffectiveCPUs --value "$SCOPE")"
oci_delete runc systemd "$OCI_ID"
