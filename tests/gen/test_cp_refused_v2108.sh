#!/usr/bin/env bash
# v2108 context parallelism is partial: its cpu Ring Attention op is tested on its own
# (tests/unit/test_ring_attention_v2108.c) but no trainer runs it, so gen refuses every selection
# with it — `sp`, and `ring-attention` under --allow-planned (v2116 brings v2108 in) — with one
# line naming what is missing and exit 2, writing nothing.
source "$(dirname "$0")/lib.sh"
T=specs/v2500.yaml
expect test_v2108_sp_refused 2 "v2108 sequence_parallel: context parallelism \(degree 2, layout zigzag\) has its cpu ring-attention op .* but no trainer runs it yet" \
  -- "$GEN" $T --enable sp --model tiny --target cpu -o "$TMP/sp"
expect test_v2108_refusal_names_the_params 2 "degree 4, layout contiguous" \
  -- "$GEN" $T --enable sp --set v2108.degree=4 --set v2108.layout=contiguous --model tiny --target cpu -o "$TMP/sp4"
expect test_v2116_brings_v2108_refused 2 "v2108 sequence_parallel: context parallelism" \
  -- "$GEN" $T --enable ring-attention --allow-planned --model tiny --target cpu -o "$TMP/ring"
check test_v2108_refusals_wrote_nothing test ! -e "$TMP/sp" -a ! -e "$TMP/sp4" -a ! -e "$TMP/ring"
finish
