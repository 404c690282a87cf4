package datapath

// The fast path's C sources live in bpf/; bpf2go compiles them with clang
// at build time (make generate) and writes the Go bindings next to this
// file. The -type list exports the structs whose layout Go must mirror.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -mcpu=v3 -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type flow_key -type port_info -type dp_config -type mf_mask -type megaflow_key -type action -type flow_entry -type flow_stats -type emc_entry -type out_trace -type meter -type port_drop_key -type ct_config -type ct_port -type shortcut_key -type shortcut nagare ../../bpf/nagare_port.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type probe_result probe ../../bpf/probe_parse.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel ctkfunc ../../bpf/ct_kfunc_bench.c
