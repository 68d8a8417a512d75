// The AVX2 + FMA path of the packed batch-invariant GEMM (batch_invariant_avx2.cpp),
// for CPUs without AVX-512: the same [k, kPanelCols] panels as the AVX-512 path,
// each read as two strips of 24 columns under register tiles of up to 4 rows, or, with
// 10 rows or more and K >= 192, as three strips of 16 under tiles of up to 6 rows (12
// accumulators, the panel's vectors and the broadcast: the 16 ymm registers).
// Internal to nn/batch_invariant_packed.cpp, which picks the path per CPU.
#pragma once
#include <cstdint>

namespace rl::nn::bi::avx2 {

// Whether this CPU has AVX2 and FMA.
bool supported();

// y[i, c] (+ bias[c]) for i < m, c < nc of the panel p [K, kPanelCols]; each element
// one accumulator from 0 taking the K products in ascending k through an fma. With
// `next` (the following panel, or null), its rows are pulled into L2 meanwhile.
void panel_rows(const float* x, int64_t ldx, const float* p, int64_t K, const float* bias, float* y, int64_t ldy,
                int64_t m, int64_t nc, const float* next);

// Columns [c0, c0 + nc) of an [n, K] weight (rows of stride ldw: the HF layout) into
// the panel dst [K, kPanelCols] (64-byte aligned), zero-padded past nc.
void pack_panel_nk(const float* w, int64_t ldw, int64_t K, int64_t c0, int64_t nc, float* dst);

}  // namespace rl::nn::bi::avx2
