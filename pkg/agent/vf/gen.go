package vf

// bpf/nagare_vf.c, compiled by bpf2go at build time (make generate).
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type vf_link -type df_key -type df_dest -type df_settings vf ../../../bpf/nagare_vf.c
