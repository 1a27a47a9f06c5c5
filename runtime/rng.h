// A small seeded generator (xoshiro256**, seeded through splitmix64) for parameter initialisation,
// dropout masks and sampling. Its streams are the same on every platform and standard library, which
// std::uniform_real_distribution does not promise, so a seed means the same run everywhere.
#pragma once
#include <cmath>
#include <cstdint>

namespace gnn {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) {
    for (uint64_t& w : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      w = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    const uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0], s_[3] ^= s_[1], s_[1] ^= s_[2], s_[0] ^= s_[3], s_[2] ^= t, s_[3] = rotl(s_[3], 45);
    return r;
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }  // [0, n); the modulo bias is < n / 2^64
  double normal() {  // Box-Muller
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  Rng split() { return Rng(next()); }  // an independent stream

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace gnn
