// Reading MNIST's IDX files (http://yann.lecun.com/exdb/mnist/), plain or
// gzipped (gzipped ones need the program built with -DMNIST_DP_ZLIB -lz).
//
// An IDX file is: two zero bytes, a type byte (0x08: unsigned bytes), the
// number of dimensions, each dimension as a big-endian uint32, then the data.
// Anything else is refused with a message naming the file and the problem.
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <vector>

#ifdef MNIST_DP_ZLIB
#include <zlib.h>
#endif

#include "common.h"

class IdxError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct IdxArray {
    std::string path;
    std::vector<uint32_t> dims;
    std::vector<uint8_t> data;
};

inline bool ends_with(const std::string& text, const std::string& tail) {
    return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

inline bool is_file(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
    std::vector<uint8_t> bytes;
    if (ends_with(path, ".gz")) {
#ifdef MNIST_DP_ZLIB
        gzFile file = gzopen(path.c_str(), "rb");
        if (!file) throw IdxError(path + ": cannot open");
        uint8_t chunk[1 << 16];
        int got;
        while ((got = gzread(file, chunk, sizeof chunk)) > 0) bytes.insert(bytes.end(), chunk, chunk + got);
        int status;
        const char* message = gzerror(file, &status);
        bool failed = got < 0 || (status != Z_OK && status != Z_STREAM_END);
        std::string why = failed ? message : "";
        gzclose(file);
        if (failed) throw IdxError(path + ": cannot decompress: " + why);
        return bytes;
#else
        throw IdxError(path + ": a gzipped file, and this program was built without zlib: gunzip it, or rebuild with "
                              "-DMNIST_DP_ZLIB -lz");
#endif
    }
    FILE* file = std::fopen(path.c_str(), "rb");
    if (!file) throw IdxError(path + ": cannot open");
    uint8_t chunk[1 << 16];
    size_t got;
    while ((got = std::fread(chunk, 1, sizeof chunk, file)) > 0) bytes.insert(bytes.end(), chunk, chunk + got);
    bool failed = std::ferror(file);
    std::fclose(file);
    if (failed) throw IdxError(path + ": read error");
    return bytes;
}

// Parse an IDX file of unsigned bytes with `ndim` dimensions.
inline IdxArray parse_idx(const std::string& path, const std::vector<uint8_t>& bytes, int ndim) {
    if (bytes.size() < 4)
        throw IdxError(format("%s: truncated: %zu bytes, an IDX header needs at least 4", path.c_str(), bytes.size()));
    if (bytes[0] != 0 || bytes[1] != 0)
        throw IdxError(format("%s: not an IDX file: it starts with %02x %02x %02x %02x, expected 00 00 08 %02x",
                              path.c_str(), bytes[0], bytes[1], bytes[2], bytes[3], ndim));
    if (bytes[2] != 0x08)
        throw IdxError(format("%s: IDX data of type 0x%02x; only unsigned bytes (0x08) are supported", path.c_str(),
                              bytes[2]));
    if (bytes[3] != ndim)
        throw IdxError(format("%s: %d dimensions, expected %d", path.c_str(), bytes[3], ndim));
    size_t header = 4 + 4 * (size_t)ndim;
    if (bytes.size() < header)
        throw IdxError(format("%s: truncated: %zu bytes, the header of a %d-dimensional IDX file needs %zu",
                              path.c_str(), bytes.size(), ndim, header));
    IdxArray array{path, {}, {}};
    uint64_t count = 1;
    std::string shape;
    for (int d = 0; d < ndim; ++d) {
        const uint8_t* p = &bytes[4 + 4 * d];
        uint32_t dim = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        array.dims.push_back(dim);
        count *= dim;
        if (count > (1ull << 40)) throw IdxError(path + ": implausible dimensions in the header");
        shape += (d ? "x" : "") + std::to_string(dim);
    }
    size_t have = bytes.size() - header;
    if (have < count)
        throw IdxError(format("%s: truncated: the header says %s = %llu bytes of data, the file holds %zu",
                              path.c_str(), shape.c_str(), (unsigned long long)count, have));
    if (have > count)
        throw IdxError(format("%s: %zu bytes of data, but the header says %s = %llu", path.c_str(), have,
                              shape.c_str(), (unsigned long long)count));
    array.data.assign(bytes.begin() + header, bytes.end());
    return array;
}

// DIR/NAME, DIR/NAME.gz, or the same with the '.' spelling some copies use
// ("train-images.idx3-ubyte").
inline std::string find_idx_file(const std::string& dir, const std::string& name) {
    std::string dotted = name;
    size_t dash = dotted.find("-idx");
    if (dash != std::string::npos) dotted[dash] = '.';
    for (const std::string& candidate : {name, name + ".gz", dotted, dotted + ".gz"})
        if (is_file(dir + "/" + candidate)) return dir + "/" + candidate;
    throw IdxError(dir + ": no " + name + " (or " + name + ".gz)");
}

struct Dataset {
    int count = 0, rows = 0, cols = 0;  // images of rows x cols pixels
    std::vector<uint8_t> images;        // count x rows x cols
    std::vector<uint8_t> labels;        // count, each 0..9
};

inline Dataset load_split(const std::string& dir, const std::string& images_name, const std::string& labels_name) {
    std::string images_path = find_idx_file(dir, images_name), labels_path = find_idx_file(dir, labels_name);
    IdxArray images = parse_idx(images_path, read_bytes(images_path), 3);
    IdxArray labels = parse_idx(labels_path, read_bytes(labels_path), 1);
    if (images.dims[0] != labels.dims[0])
        throw IdxError(format("%s holds %u images but %s holds %u labels", images_path.c_str(), images.dims[0],
                              labels_path.c_str(), labels.dims[0]));
    if (images.dims[0] == 0) throw IdxError(images_path + ": no images");
    for (size_t i = 0; i < labels.data.size(); ++i)
        if (labels.data[i] > 9)
            throw IdxError(format("%s: label %u of item %zu is not a digit 0..9", labels_path.c_str(), labels.data[i], i));
    Dataset set;
    set.count = (int)images.dims[0];
    set.rows = (int)images.dims[1];
    set.cols = (int)images.dims[2];
    set.images = std::move(images.data);
    set.labels = std::move(labels.data);
    return set;
}

// Keep the first `limit` items (limit <= 0: all).
inline void truncate(Dataset& set, int limit) {
    if (limit <= 0 || limit >= set.count) return;
    set.count = limit;
    set.images.resize((size_t)limit * set.rows * set.cols);
    set.labels.resize(limit);
}
