package steering

// The uplink's XDP program lives in bpf/nagare_uplink_xdp.c (logic in
// bpf/lib/steer.h); bpf2go compiles it at build time (make generate),
// with -mcpu=v3 for its 32-bit atomics (kernels since 5.1).
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -mcpu=v3 -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type steer_key -type steer_mask -type steer_entry -type steer_core -type steer_settings -type steer_emc_entry -type steer_frag_key -type steer_counters uplink ../../bpf/nagare_uplink_xdp.c
