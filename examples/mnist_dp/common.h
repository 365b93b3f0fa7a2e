// Small things every part of the program uses: fatal errors and formatting.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

// Print "mnist_dp: error: MESSAGE" and exit with status 1.  Several device
// threads may fail at once; only the first one speaks.
[[noreturn]] inline void fail(const std::string& message) {
    static std::mutex once;
    once.lock();  // never unlocked: the process is ending
    std::fflush(stdout);
    std::fprintf(stderr, "mnist_dp: error: %s\n", message.c_str());
    std::fflush(stderr);
    std::exit(1);
}

inline std::string format(const char* fmt, ...) {
    char buffer[1024];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(buffer, sizeof buffer, fmt, args);
    va_end(args);
    return buffer;
}
