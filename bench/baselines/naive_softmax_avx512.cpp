// The naive baseline's softmax pass built for AVX-512 (-mavx512f/dq/vl/bw); flags in
// bench/baselines/CMakeLists.txt.
#define TILEATTN_SOFTMAX_ROW softmax_row_avx512
#include "naive_softmax.inl"
