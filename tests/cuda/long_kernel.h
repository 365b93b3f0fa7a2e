// The test programs' long kernel: on a GPU it spins on the global timer for
// `nanoseconds`, then sets *flag = 42; on a sim server the program's kernel
// plugin models its time (COSTS) and sets the flag.
#pragma once

__global__ void longKernel(int *flag, long long nanoseconds)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < (unsigned long long)nanoseconds);
    *flag = 42;
}
