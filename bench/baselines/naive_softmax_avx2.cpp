// The naive baseline's softmax pass built for AVX2 + FMA; flags in bench/baselines/CMakeLists.txt.
#define TILEATTN_SOFTMAX_ROW softmax_row_avx2
#include "naive_softmax.inl"
