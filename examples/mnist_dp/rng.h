// Deterministic random numbers, reproducible bit for bit in Python
// (cpu_reference.py): SplitMix64, uniform floats from its top 24 bits,
// Fisher-Yates shuffles.  Initial weights come from the seed on the host, so
// every device count starts from the same parameters.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

class SplitMix64 {
public:
    explicit SplitMix64(uint64_t seed) : state_(seed) {}

    uint64_t next() {
        state_ += 0x9E3779B97F4A7C15ull;
        uint64_t z = state_;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }

    // Uniform in [0, 1), 24 random bits: exact in float and double.
    double uniform() { return (double)(next() >> 40) * 0x1.0p-24; }

    // Fisher-Yates, from the last element down.
    void shuffle(std::vector<int>& items) {
        for (size_t i = items.size(); i > 1; --i) {
            size_t j = (size_t)(next() % i);
            std::swap(items[i - 1], items[j]);
        }
    }

private:
    uint64_t state_;
};

// The two independent streams of a run.
inline SplitMix64 init_stream(uint64_t seed) { return SplitMix64(seed); }
inline SplitMix64 shuffle_stream(uint64_t seed) { return SplitMix64(seed ^ 0xD1B54A32D192ED03ull); }
