// The driver API's checks for the test programs, beside check.h's for the
// runtime: a failure prints "FAILED line N: CALL -> NAME, expected CODE" (what
// the tests look for) and exits.
#pragma once
#include <cuda.h>
#include "check.h"

#define DRV_EXPECT(call, code)                                                         \
    do {                                                                               \
        CUresult r_ = (call);                                                          \
        if (r_ != (code)) {                                                            \
            const char *n_ = "?";                                                      \
            cuGetErrorName(r_, &n_);                                                   \
            printf("FAILED line %d: %s -> %s, expected %s\n", __LINE__, #call, n_, #code); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

#define DRV(call) DRV_EXPECT(call, CUDA_SUCCESS)
