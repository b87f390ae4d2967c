#!/usr/bin/env bash
# Writes ms_proto.cu (the file D1 compiled) from this folder's ms_kernel.cu and ms_main.cu and the device
# helpers and host record code of 2026-12-07-h100-wgmma-mq/wg_proto.cu (its lines 17-43, 95-167, 818-878).
# With QR: bash assemble.sh && patch ms_proto.cu qr.diff
set -eu
cd "$(dirname "$0")"
W=../2026-12-07-h100-wgmma-mq/wg_proto.cu
{ sed -n 1,5p ms_kernel.cu; sed -n '17,43p;95,167p' $W; sed -n '6,$p' ms_kernel.cu; sed -n 818,878p $W; cat ms_main.cu; } > ms_proto.cu
