// Test build only (ENK_SIMDE_AVX512): the AVX-512 intrinsics these kernels use,
// emulated by SIMDe so that the AVX-512 kernels' logic runs on an AVX2 CPU.
// (SIMDe 0.7.4's own SIMDE_ENABLE_NATIVE_ALIASES does not compile with GCC 12.)
#pragma once

#include <simde/x86/avx512.h>

#include <cstdint>

// Missing from SIMDe 0.7.4.
static inline simde__m512 enk_simde_mm512_cvtepi32_ps(simde__m512i a) {
  std::int32_t in[16];
  float out[16];
  simde_mm512_storeu_si512(in, a);
  for (int j = 0; j < 16; ++j) out[j] = static_cast<float>(in[j]);
  return simde_mm512_loadu_ps(out);
}

#define __m512 simde__m512
#define __m512i simde__m512i
#define _mm512_setzero_ps simde_mm512_setzero_ps
#define _mm512_setzero_si512 simde_mm512_setzero_si512
#define _mm512_loadu_ps simde_mm512_loadu_ps
#define _mm512_loadu_si512 simde_mm512_loadu_si512
#define _mm512_storeu_ps simde_mm512_storeu_ps
#define _mm512_storeu_si512 simde_mm512_storeu_si512
#define _mm512_set1_ps simde_mm512_set1_ps
#define _mm512_set1_epi32 simde_mm512_set1_epi32
#define _mm512_fmadd_ps simde_mm512_fmadd_ps
#define _mm512_add_ps simde_mm512_add_ps
#define _mm512_mul_ps simde_mm512_mul_ps
#define _mm512_add_epi32 simde_mm512_add_epi32
#define _mm512_sub_epi32 simde_mm512_sub_epi32
#define _mm512_mullo_epi32 simde_mm512_mullo_epi32
#define _mm512_cvtepi32_ps enk_simde_mm512_cvtepi32_ps
#define _mm512_dpbusd_epi32 simde_mm512_dpbusd_epi32
