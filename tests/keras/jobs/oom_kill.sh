# A task the kernel's OOM killer ends: it puts itself into a memory cgroup of its own
# (cgroup v1, 64 MiB, as root) and becomes a Python that allocates 1 GiB. The cgroup is
# left for the test to remove (a cgroup with no process left can be removed).
cg=/sys/fs/cgroup/memory/tfcluster-oom-$$
mkdir -p "$cg" && echo 64M > "$cg/memory.limit_in_bytes" && echo $$ > "$cg/cgroup.procs" || exit 3
exec python3 -c "a = [bytearray(16 << 20) for _ in range(64)]; print('not killed')"
