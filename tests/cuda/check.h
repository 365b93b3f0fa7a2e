// Checks for the runtime test programs: each failure prints "FAILED line N:
// ..." (what the tests look for) and exits.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        cudaError_t err_ = (call);                                                     \
        if (err_ != cudaSuccess) {                                                     \
            printf("FAILED line %d: %s -> %s\n", __LINE__, #call, cudaGetErrorName(err_)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

// The call must fail with `code` (which then stays the thread's last error).
#define EXPECT(call, code)                                                             \
    do {                                                                               \
        cudaError_t err_ = (call);                                                     \
        if (err_ != (code)) {                                                          \
            printf("FAILED line %d: %s -> %s, expected %s\n", __LINE__, #call,         \
                   cudaGetErrorName(err_), cudaGetErrorName(code));                    \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

// EXPECT, then consume the error as cudaGetLastError would.
#define EXPECT_AND_CLEAR(call, code)                                                   \
    do {                                                                               \
        EXPECT(call, code);                                                            \
        cudaGetLastError();                                                            \
    } while (0)

#define REQUIRE(cond)                                                                  \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            printf("FAILED line %d: %s\n", __LINE__, #cond);                           \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)
