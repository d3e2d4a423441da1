/* nvrtc.h — NVRTC compilation of rendered kernels for `gen`, through a content-addressed cache
 * (nvrtc.c). The Lua-facing functions are installed into the `hyp` table by gen_register_nvrtc;
 * without NVRTC (HYP_HAVE_NVRTC=0) nothing is installed and Lua reports the target as
 * unavailable. */
#ifndef GEN_NVRTC_H
#define GEN_NVRTC_H
#include <lua.h>

/* Adds hyp.nvrtc_version() and hyp.nvrtc_compile(jobs, opts) to the table at idx. */
void gen_register_nvrtc(lua_State *L, int idx);

#endif
