// The naive baseline's softmax pass built for the baseline x86-64 target; flags in
// bench/baselines/CMakeLists.txt.
#define TILEATTN_SOFTMAX_ROW softmax_row_generic
#include "naive_softmax.inl"
