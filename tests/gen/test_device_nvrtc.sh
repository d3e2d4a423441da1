#!/usr/bin/env bash
# The kernels of the device-layer tests (tests/device/*.cu, which tests/gpu/test_gpu_device.c runs
# on a GPU) are valid CUDA: NVRTC compiles them to sm_80 and sm_90 cubins, through the GPU suite's
# own NVRTC path. Needs no GPU; without NVRTC the check says it is skipped.
source "$(dirname "$0")/lib.sh"
for sm in 80 90; do
  expect "device_kernels_nvrtc_sm$sm" 0 "^(ok|skipped)" -- "$BUILD/tests/test_gpu_device" --nvrtc $sm
done
finish
