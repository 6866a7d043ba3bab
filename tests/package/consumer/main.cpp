// A program outside the tileattn tree: one attention call through the installed package.
#include <cmath>
#include <cstdio>
#include <tileattn/tileattn.hpp>
#include <vector>

int main() {
  // One query against two keys with equal scores: the output is the mean of the two values.
  std::vector<float> q = {1.0f, 0.0f}, k = {1.0f, 0.0f, 1.0f, 0.0f}, v = {2.0f, 4.0f, 6.0f, 8.0f};
  std::vector<float> out(2, -1.0f);
  tileattn::AttentionArgs args;
  args.q = tileattn::make_tensor(q.data(), tileattn::DType::f32, {1, 1, 1, 2});
  args.k = tileattn::make_tensor(k.data(), tileattn::DType::f32, {1, 2, 1, 2});
  args.v = tileattn::make_tensor(v.data(), tileattn::DType::f32, {1, 2, 1, 2});
  args.out = tileattn::make_tensor(out.data(), tileattn::DType::f32, {1, 1, 1, 2});
  tileattn::attention_forward(args);
  if (std::fabs(out[0] - 4.0f) > 1e-6f || std::fabs(out[1] - 6.0f) > 1e-6f) {
    std::printf("consumer wrong: %f %f\n", out[0], out[1]);
    return 1;
  }
  std::printf("consumer ok (tileattn %s)\n", tileattn::build_info().version.c_str());
  return 0;
}
