// What the AMX kernels share (kernels/gemm_bf16.cpp, kernels/squeeze_excite_amx.cpp; both compiled with
// AMX and AVX-512 flags, and nothing else includes this): the tile configuration and its loading, and a
// 16 x 16 u32 transpose in registers. Internal linkage, so that no other file's copy is ever linked in.
#pragma once
#if !(defined(__AMX_TILE__) || defined(__AMXTILE__)) || !defined(__AVX512F__)  // (GCC's name, clang's)
#error "kernels/amx_tiles.h is for files compiled with AMX and AVX-512 flags"
#endif
#include <immintrin.h>

#include <cstdint>

namespace gnn {
namespace {

struct AmxTileConfig {  // ldtilecfg's 64 bytes, palette 1
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The calling thread's tiles shaped as cfg says. GCC 12 does not see the builtin read past the palette
// byte and dropped the stores filling cfg in a small leaf function (a config of no tiles, and SIGILL at the
// first tile op): the barrier makes them happen.
inline void amx_configure(const AmxTileConfig& cfg) {
  __asm__ volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// 16 rows of 16 u32 transposed in registers: r[i][t] -> r[t][i].
// (The masked forms: GCC 12 warns that the unmasked ones read an undefined register.)
inline __m512i amx_lo32(__m512i a, __m512i b) { return _mm512_maskz_unpacklo_epi32(__mmask16(0xffff), a, b); }
inline __m512i amx_hi32(__m512i a, __m512i b) { return _mm512_maskz_unpackhi_epi32(__mmask16(0xffff), a, b); }
inline __m512i amx_lo64(__m512i a, __m512i b) { return _mm512_maskz_unpacklo_epi64(__mmask8(0xff), a, b); }
inline __m512i amx_hi64(__m512i a, __m512i b) { return _mm512_maskz_unpackhi_epi64(__mmask8(0xff), a, b); }
template <int Imm>
inline __m512i amx_lanes(__m512i a, __m512i b) {
  return _mm512_maskz_shuffle_i32x4(__mmask16(0xffff), a, b, Imm);
}
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = amx_lo32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = amx_hi32(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 4; ++k) {
    r[4 * k] = amx_lo64(t[4 * k], t[4 * k + 2]);
    r[4 * k + 1] = amx_hi64(t[4 * k], t[4 * k + 2]);
    r[4 * k + 2] = amx_lo64(t[4 * k + 1], t[4 * k + 3]);
    r[4 * k + 3] = amx_hi64(t[4 * k + 1], t[4 * k + 3]);
  }
  // r[4k + j]'s 128-bit lane L holds column 4L + j of rows 4k..4k+3
  for (int j = 0; j < 4; ++j) {
    const __m512i a = amx_lanes<0x88>(r[j], r[4 + j]), b = amx_lanes<0xdd>(r[j], r[4 + j]),
                  c = amx_lanes<0x88>(r[8 + j], r[12 + j]), d = amx_lanes<0xdd>(r[8 + j], r[12 + j]);
    t[j] = amx_lanes<0x88>(a, c);       // lane 0: columns j
    t[8 + j] = amx_lanes<0xdd>(a, c);   // lane 2: columns 8 + j
    t[4 + j] = amx_lanes<0x88>(b, d);   // lane 1: columns 4 + j
    t[12 + j] = amx_lanes<0xdd>(b, d);  // lane 3: columns 12 + j
  }
  for (int k = 0; k < 16; ++k) r[k] = t[k];
}

}  // namespace
}  // namespace gnn
